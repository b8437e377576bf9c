"""The throughput measurements the throughput model calibrates on (sizing/throughput.py):
published per-GPU runs (data/gpus.toml `[[measurement]]`), published LLM runs and the
single-GPU runs with their implementation class (data/llm_throughput.toml). Calibration runs
once per change of data or code: a plan with a warm calibration cache never loads this
module."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from orchestrator.catalog.interconnect import _read
from orchestrator.catalog.loader import CatalogError, _source
from orchestrator.catalog.loader import _read as read_data_file
from orchestrator.catalog.schema import Source


@dataclass(frozen=True, slots=True)
class ThroughputMeasurement:
    """A published, measured training throughput used to calibrate the throughput model.

    `samples_per_s` is per GPU. `model` is a catalog model name; the job shape is given by
    `seq` (tokens per sample; 0 for vision), `image_size` (vision) and `batch` (per GPU).

    `optimizer` is how the run's optimizer step was implemented, when the model accounts
    for it (orchestrator/sizing/throughput.py, OptimizerStep): "fused" (one
    pass over parameters, gradients and states: apex FusedAdam/FusedLAMB, torch fused=True)
    or "eager" (a Python loop of elementwise ops per parameter tensor: DeepLearningExamples'
    BertAdam). Empty: not recorded, the step's cost stays inside the calibrated utilisation
    (as for every row before optimizers were modelled). `accumulation` is micro-batches per
    optimizer step (1: a step every micro-batch).
    """

    gpu: str
    precision: str  # "fp32" | "amp-fp16" | "amp-bf16" | "tf32" (fp32 math on tensor cores)
    model: str
    seq: int
    batch: int
    samples_per_s: float
    gpus_measured: int
    source: Source
    image_size: int = 0
    note: str = ""
    memory_format: str = ""  # CNNs: "channels-last" (NHWC); empty is PyTorch's NCHW default
    optimizer: str = ""  # "" (not modelled) | "fused" | "eager"
    accumulation: int = 1  # micro-batches per optimizer step


def _measurements() -> tuple[ThroughputMeasurement, ...]:
    data = read_data_file("gpus.toml")
    shared = data.get("sources", {})
    rows = []
    for index, raw in enumerate(data.get("measurement", [])):
        where = f"gpus.toml measurement #{index + 1} ({raw.get('gpu')}, {raw.get('model')})"
        rows.append(
            ThroughputMeasurement(
                gpu=raw["gpu"],
                precision=raw["precision"],
                model=raw["model"],
                seq=int(raw.get("seq", 0)),
                batch=int(raw["batch"]),
                samples_per_s=float(raw["samples_per_s"]),
                gpus_measured=int(raw.get("gpus_measured", 1)),
                source=_source(raw.get("source"), shared, where),
                image_size=int(raw.get("image_size", 0)),
                note=raw.get("note", ""),
                memory_format=raw.get("memory_format", ""),
                optimizer=raw.get("optimizer", ""),
                accumulation=int(raw.get("accumulation", 1)),
            )
        )
        if rows[-1].optimizer not in ("", "fused", "eager"):
            raise CatalogError(f"{where}: optimizer must be 'fused' or 'eager'")
        if rows[-1].accumulation < 1:
            raise CatalogError(f"{where}: accumulation must be at least 1")
        if rows[-1].memory_format not in ("", "channels-last"):
            raise CatalogError(f"{where}: memory_format must be 'channels-last' or absent")
    return tuple(rows)


def load_measurements() -> list[ThroughputMeasurement]:
    """Published measured training throughput (per GPU), for calibrating the throughput model."""
    return list(_measurements())


@dataclass(frozen=True, slots=True)
class LlmMeasurement:
    """A published LLM training throughput run, per GPU, with its job shape and source."""

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
