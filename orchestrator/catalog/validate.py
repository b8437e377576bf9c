"""Cross-file checks of the catalog (the tests run them): every instance's GPU exists,
prices are positive, every measurement's GPU and model exist, no model name is claimed twice.
Loading already rejects a missing or malformed source."""

from __future__ import annotations

from orchestrator.catalog.loader import (
    MEASUREMENT_PRECISIONS,
    PRECISION_KEYS,
    _model_index,
    find_model,
    load_gpus,
    load_instances,
    load_models,
)
from orchestrator.catalog.measurements import load_measurements
from orchestrator.errors import UsageError


def validate_catalog() -> list[str]:
    """Check the whole catalog; return a list of problems (empty when the data is sound).

    Loading already rejects a missing or malformed source; this adds the checks that span
    entries and files.
    """
    problems: list[str] = []
    gpus = load_gpus()
    models = load_models()
    for gpu in gpus.values():
        if gpu.memory_gib <= 0 or gpu.memory_bandwidth_gbps <= 0:
            problems.append(f"GPU {gpu.name}: memory and bandwidth must be positive")
        for key in (*gpu.peak_tflops, *gpu.efficiency):
            if key not in PRECISION_KEYS:
                problems.append(f"GPU {gpu.name}: unknown precision key {key!r}")
        if any(v <= 0 for v in gpu.peak_tflops.values()):
            problems.append(f"GPU {gpu.name}: peak TFLOPS must be positive")
        if any(not 0 < v <= 1 for v in gpu.efficiency.values()):
            problems.append(f"GPU {gpu.name}: efficiency must be a fraction in (0, 1]")
        if not set(gpu.efficiency) <= set(gpu.peak_tflops):
            problems.append(f"GPU {gpu.name}: efficiency given for a precision without a peak")
    seen: set[tuple[str, str]] = set()
    for row in load_instances():
        label = f"{row.cloud} {row.name}"
        if (row.cloud, row.name) in seen:
            problems.append(f"{label}: listed twice")
        seen.add((row.cloud, row.name))
        if row.gpu not in gpus:
            problems.append(f"{label}: unknown GPU {row.gpu!r}")
        if row.gpu_count < 1 or row.vcpus < 1 or row.memory_gib <= 0:
            problems.append(f"{label}: GPU count, vCPUs and memory must be positive")
        if row.legacy and not row.legacy_note:
            problems.append(f"{label}: legacy without a legacy_note")
        for region, price in row.prices.items():
            for value in (price.on_demand, price.spot):
                if value is not None and value <= 0:
                    problems.append(f"{label} {region}: prices must be positive")
            if price.on_demand is None and price.spot is None:
                problems.append(f"{label} {region}: price entry with no price")
    for m in load_measurements():
        label = f"measurement {m.gpu} {m.model}"
        if m.gpu not in gpus:
            problems.append(f"{label}: unknown GPU")
        try:
            find_model(m.model)
        except UsageError:
            problems.append(f"{label}: unknown model")
        if m.precision not in MEASUREMENT_PRECISIONS:
            problems.append(f"{label}: unknown precision {m.precision!r}")
        if m.samples_per_s <= 0 or m.batch < 1 or m.gpus_measured < 1:
            problems.append(f"{label}: throughput, batch and GPU count must be positive")
    for entry in models.values():
        if "model_type" not in entry.config:
            problems.append(f"model {entry.name}: config lacks model_type")
    _model_index()  # raises on a name claimed by two models
    return problems
