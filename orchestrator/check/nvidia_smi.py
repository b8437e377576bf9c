"""Build nvidia-smi queries and parse their CSV answers; map nvidia-smi GPU names to catalog names.

We always ask with `--format=csv,noheader,nounits`, so each line is one GPU and each column
one requested field, in order. nvidia-smi writes `[N/A]` (or `N/A`, `[Not Supported]`,
`[Unknown Error]`) where a field does not apply: ECC on GPUs without ECC, for instance.
Those become None here.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.errors import OrchError

INVENTORY_FIELDS = (
    "index",
    "name",
    "memory.total",
    "driver_version",
    "ecc.errors.uncorrected.volatile.total",
    "pci.bus_id",
    "uuid",
)
USAGE_FIELDS = ("index", "utilization.gpu", "memory.used", "memory.total")
# The largest boxes have 8 GPUs (16 on older p2.16xlarge); more rows is not a real answer.
MAX_GPUS = 64

# nvidia-smi's placeholders for a field it cannot give (nvml.h NVML_ERROR_* strings as
# nvidia-smi prints them); newer drivers answer retired fields with "[Requested functionality
# has been deprecated]". All of them mean "unknown", not "broken".
_NOT_AVAILABLE = re.compile(
    r"^\[?(n/?a|not supported|unknown error|insufficient permissions|gpu is lost"
    r"|requested functionality has been deprecated|not found|no data)\]?$"
)
# A number field is at most this (bytes of memory in MiB, a count of ECC errors, a percentage):
# anything larger, or inf/nan, is not a reading.
_MAX_NUMBER = 2**53


class NvidiaSmiParseError(OrchError):
    """nvidia-smi printed something that is not the CSV we asked for."""


def query_argv(fields: tuple[str, ...]) -> list[str]:
    return ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]


@dataclass(slots=True)
class GpuInventory:
    index: int
    name: str
    memory_total_mib: int | None
    driver_version: str | None
    ecc_uncorrected: int | None  # None: ECC not supported or disabled
    pci_bus_id: str | None
    uuid: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class GpuUsage:
    index: int
    utilization_pct: int | None
    memory_used_mib: int | None
    memory_total_mib: int | None

    @property
    def memory_fraction(self) -> float | None:
        if not self.memory_total_mib or self.memory_used_mib is None:
            return None
        return self.memory_used_mib / self.memory_total_mib

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _value(text: str) -> str | None:
    text = text.strip()
    if not text or _NOT_AVAILABLE.match(text.lower()):
        return None
    return text


def _number(text: str | None, field: str) -> int | None:
    if text is None:
        return None
    # `nounits` drops "MiB" and "%", but be lenient in case a caller forgot it.
    cleaned = re.sub(r"\s*(MiB|%)$", "", text)
    try:
        value = float(cleaned)
        if not math.isfinite(value) or abs(value) > _MAX_NUMBER:
            raise ValueError(cleaned)
        return int(value)
    except ValueError:
        raise NvidiaSmiParseError(
            f"nvidia-smi field {field} is not a number: {text[:60]!r}"
        ) from None


def parse_rows(output: str, fields: tuple[str, ...]) -> list[dict[str, str | None]]:
    """Split CSV output into one dict per GPU, with N/A-like values as None."""
    rows = []
    reader = csv.reader(io.StringIO(output), skipinitialspace=True, strict=True)
    try:
        for line_no, row in enumerate(reader, start=1):
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) != len(fields):
                raise NvidiaSmiParseError(
                    f"nvidia-smi line {line_no} has {len(row)} fields, expected {len(fields)}: "
                    f"{','.join(row)[:120]!r}"
                )
            if len(rows) >= MAX_GPUS:
                raise NvidiaSmiParseError(f"nvidia-smi listed more than {MAX_GPUS} GPUs")
            rows.append({field: _value(cell) for field, cell in zip(fields, row, strict=True)})
    except csv.Error as exc:
        # An unclosed quote, a field over csv's 128 KiB limit, a NUL byte: not our CSV.
        raise NvidiaSmiParseError(
            f"nvidia-smi output is not the CSV asked for (line {reader.line_num}: {exc})"
        ) from None
    return rows


def parse_inventory(output: str) -> list[GpuInventory]:
    gpus = []
    for row in parse_rows(output, INVENTORY_FIELDS):
        index = _number(row["index"], "index")
        name = row["name"]
        if index is None or name is None:
            raise NvidiaSmiParseError("nvidia-smi reported a GPU without index or name")
        gpus.append(
            GpuInventory(
                index=index,
                name=name,
                memory_total_mib=_number(row["memory.total"], "memory.total"),
                driver_version=row["driver_version"],
                ecc_uncorrected=_number(
                    row["ecc.errors.uncorrected.volatile.total"],
                    "ecc.errors.uncorrected.volatile.total",
                ),
                pci_bus_id=row["pci.bus_id"],
                uuid=row["uuid"],
            )
        )
    return gpus


def parse_usage(output: str) -> list[GpuUsage]:
    readings = []
    for row in parse_rows(output, USAGE_FIELDS):
        index = _number(row["index"], "index")
        if index is None:
            raise NvidiaSmiParseError("nvidia-smi reported a GPU without an index")
        readings.append(
            GpuUsage(
                index=index,
                utilization_pct=_number(row["utilization.gpu"], "utilization.gpu"),
                memory_used_mib=_number(row["memory.used"], "memory.used"),
                memory_total_mib=_number(row["memory.total"], "memory.total"),
            )
        )
    return readings


# ------------------------------------------------------------------------------ GPU names

# Used only when the catalog (orchestrator.catalog gpus.toml `nvidia_smi_names`) lacks a name.
# Names as nvidia-smi prints them; see tests/fixtures/nvidia-smi/ for captured outputs.
FALLBACK_NAMES: dict[str, str] = {
    "Tesla T4": "T4",
    "Tesla V100-SXM2-16GB": "V100-16GB",
    "Tesla V100-PCIE-16GB": "V100-16GB",
    "Tesla V100-SXM2-32GB": "V100-32GB",
    "Tesla V100-PCIE-32GB": "V100-32GB",
    "NVIDIA A10G": "A10G",
    "NVIDIA A10": "A10",
    "NVIDIA L4": "L4",
    "NVIDIA A100-SXM4-40GB": "A100-40GB",
    "NVIDIA A100-PCIE-40GB": "A100-40GB",
    "NVIDIA A100-SXM4-80GB": "A100-80GB",
    "NVIDIA A100 80GB PCIe": "A100-80GB",
    "NVIDIA T4": "T4",
    "Tesla V100S-PCIE-32GB": "V100-32GB",
    "NVIDIA H100 80GB HBM3": "H100-80GB",
}


def _normalise(name: str) -> str:
    name = name.strip().lower()
    for prefix in ("nvidia ", "tesla "):
        name = name.removeprefix(prefix)
    return re.sub(r"[\s_]+", "-", name)


def _catalog_names() -> dict[str, str]:
    try:
        from orchestrator.catalog import load_gpus

        gpus = load_gpus()
    except (ImportError, OrchError):
        return {}
    return {smi: gpu.name for gpu in gpus.values() for smi in gpu.nvidia_smi_names}


def name_table() -> dict[str, str]:
    """nvidia-smi name -> catalog GPU name; catalog entries win over the fallback table."""
    return {**FALLBACK_NAMES, **_catalog_names()}


def canonical_gpu_name(smi_name: str, table: dict[str, str] | None = None) -> str | None:
    """Map "Tesla T4" to "T4"; None when the name is unknown."""
    table = name_table() if table is None else table
    if smi_name in table:
        return table[smi_name]
    wanted = _normalise(smi_name)
    for known, canonical in table.items():
        if _normalise(known) == wanted:
            return canonical
    for canonical in set(table.values()):
        if _normalise(canonical) == wanted:
            return canonical
    return None
