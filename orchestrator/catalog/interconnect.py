"""Per-instance-family GPU interconnect (data/interconnect.toml): a catalog fact kept apart
from the price files. The LLM throughput measurements are in catalog/measurements.py."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from orchestrator.catalog.loader import DATA_DIR, CatalogError, _source, read_toml_cached
from orchestrator.catalog.schema import Source


@dataclass(frozen=True, slots=True)
class Interconnect:
    """How the GPUs inside one box talk to each other, and the bandwidth NCCL gets."""

    kind: str  # "nvswitch" | "nvlink" | "pcie"
    link_gbps: float  # per-GPU one-way link rate (spec)
    busbw_gbps: float  # NCCL collective bus bandwidth across the box (see the data file)
    source: Source


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
