"""Per-instance-family GPU interconnect (data/interconnect.toml) and the LLM throughput
measurements (data/llm_throughput.toml): catalog facts kept apart from the price files."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from orchestrator.catalog.loader import DATA_DIR, CatalogError, _source, read_toml_cached
from orchestrator.catalog.schema import Source


@dataclass(frozen=True, slots=True)
class Interconnect:
    kind: str  # "nvswitch" | "nvlink" | "pcie"
    link_gbps: float  # per-GPU one-way link rate (spec)
    busbw_gbps: float  # NCCL collective bus bandwidth across the box (see the data file)
    source: Source


@dataclass(frozen=True, slots=True)
class LlmMeasurement:
    gpu: str
    precision: str
    arch: str  # an [arch.*] of the data file or a catalog model
    seq: int
    batch: int
    grad_checkpointing: bool
    gpus: int
    tokens_per_s_per_gpu: float
    source: Source
    note: str = ""


def _read(name: str) -> dict[str, Any]:
    try:
        return read_toml_cached(DATA_DIR / name, name)
    except (FileNotFoundError, ValueError) as exc:
        raise CatalogError(f"catalog data file {name} unreadable: {exc}") from exc


@cache
def load_interconnects() -> dict[str, Interconnect]:
    data = _read("interconnect.toml")
    shared = data.get("sources", {})
    return {
        family: Interconnect(
            kind=raw["kind"],
            link_gbps=float(raw["link_gbps"]),
            busbw_gbps=float(raw["busbw_gbps"]),
            source=_source(raw.get("source"), shared, f"interconnect.toml {family}"),
        )
        for family, raw in data.get("family", {}).items()
    }


def interconnect_of(family: str) -> Interconnect | None:
    return load_interconnects().get(family)


@cache
def _llm() -> tuple[tuple[LlmMeasurement, ...], dict[str, dict[str, Any]]]:
    data = _read("llm_throughput.toml")
    shared = data.get("sources", {})
    rows = tuple(
        LlmMeasurement(
            gpu=raw["gpu"],
            precision=raw["precision"],
            arch=raw["arch"],
            seq=int(raw["seq"]),
            batch=int(raw["batch"]),
            grad_checkpointing=bool(raw.get("grad_checkpointing", False)),
            gpus=int(raw.get("gpus", 1)),
            tokens_per_s_per_gpu=float(raw["tokens_per_s_per_gpu"]),
            source=_source(raw.get("source"), shared, f"llm_throughput.toml #{i + 1}"),
            note=raw.get("note", ""),
        )
        for i, raw in enumerate(data.get("llm", []))
    )
    return rows, dict(data.get("arch", {}))


def load_llm_measurements() -> list[LlmMeasurement]:
    return list(_llm()[0])


@dataclass(frozen=True, slots=True)
class SingleGpuRun:
    """A measured training run on one GPU, with its implementation class (`stack`)."""

    gpu: str
    stack: str  # "eager" | "optimised" (orchestrator/sizing/stacks.py)
    precision: str
    arch: str  # a catalog model or an [arch.*] of the data file
    seq: int
    image_size: int | None
    batch: int
    grad_checkpointing: bool
    lora_rank: int
    quantize: str | None
    samples_per_s: float
    source: Source
    note: str = ""


@cache
def load_single_gpu_runs() -> tuple[SingleGpuRun, ...]:
    """The [[single_gpu]] rows of llm_throughput.toml."""
    data = _read("llm_throughput.toml")
    shared = data.get("sources", {})
    return tuple(
        SingleGpuRun(
            gpu=raw["gpu"],
            stack=raw["stack"],
            precision=raw["precision"],
            arch=raw["arch"],
            seq=int(raw.get("seq", 512)),
            image_size=int(raw["image_size"]) if "image_size" in raw else None,
            batch=int(raw["batch"]),
            grad_checkpointing=bool(raw.get("grad_checkpointing", False)),
            lora_rank=int(raw.get("lora_rank", 0)),
            quantize=raw.get("quantize") or None,
            samples_per_s=float(raw["samples_per_s"]),
            source=_source(raw.get("source"), shared, f"llm_throughput.toml single_gpu #{i + 1}"),
            note=raw.get("note", ""),
        )
        for i, raw in enumerate(data.get("single_gpu", []))
    )


def llm_arch_config(name: str) -> dict[str, Any] | None:
    """An HF-style config for an [arch.*] of the data file (None: not one): its `config` table
    as given, or a GPT config built from an MPT shape (d_model, n_layers, n_heads)."""
    shape = _llm()[1].get(name)
    if shape is None:
        return None
    if "config" in shape:
        return dict(shape["config"])
    d = int(shape["d_model"])
    return {
        "model_type": "gpt2",
        "n_embd": d,
        "n_layer": int(shape["n_layers"]),
        "n_head": int(shape["n_heads"]),
        "n_inner": 4 * d,
        "vocab_size": int(shape.get("vocab_size", 50368)),
        "n_positions": 262144,
        "architectures": ["GPT2LMHeadModel"],
    }
