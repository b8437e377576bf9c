"""Training throughput per GPU: FLOPs per sample against a calibrated achievable FLOP rate.

samples/s per GPU = peak_tflops[gpu, precision] * efficiency[gpu, precision] / flops_per_sample

`efficiency` (model FLOPs utilisation) is calibrated on published measured throughput in the
catalog (`[[measurement]]` in gpus.toml): for each measurement we compute the FLOPs our own
model assigns to that job, so estimator and calibration share one FLOPs convention. Where a GPU
has no measurement for a precision, the catalog's per-GPU prior is used.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import lru_cache

from orchestrator.catalog import Gpu, load_gpus, load_measurements
from orchestrator.errors import UsageError
from orchestrator.sizing.job import JobSpec

# Which peak-TFLOPS column a job's precision runs on. PyTorch leaves TF32 matmuls off by
# default (torch.backends.cuda.matmul.allow_tf32 = False since 1.12), so fp32 uses fp32 peak.
PEAK_KEY = {"fp32": "fp32", "tf32": "tf32", "amp-fp16": "fp16", "amp-bf16": "bf16", "bf16": "bf16"}

# Data-parallel scaling inside one box: all-reduce of gradients overlaps with backward well on
# NVLink/NVSwitch, less well over PCIe. Documented in docs/throughput.md.
SCALING_NVLINK = 0.95
SCALING_PCIE = 0.88


@dataclass(frozen=True)
class GpuRate:
    """How fast one GPU runs a job's precision."""

    precision_used: str  # may differ from the job's: amp-bf16 on a GPU without bf16 runs fp16
    peak_tflops: float
    efficiency: float
    calibrated: bool  # True when from measurements, False when from the catalog prior
    note: str = ""


def effective_precision(gpu: Gpu, precision: str) -> tuple[str, str]:
    """The precision a GPU actually runs, and a note when it had to change.

    Pure bf16 training on a GPU without bf16 is not runnable at all: see `gpu_supports`.
    """
    if precision == "amp-bf16" and "bf16" not in gpu.peak_tflops:
        return "amp-fp16", f"{gpu.name} has no bf16: runs amp-fp16 instead"
    return precision, ""


def gpu_supports(gpu: Gpu, precision: str) -> bool:
    return not (precision == "bf16" and "bf16" not in gpu.peak_tflops)


@lru_cache(maxsize=1)
def calibrated_efficiency() -> dict[tuple[str, str], float]:
    """Median measured model-FLOPs utilisation per (gpu, peak key), from the catalog."""
    # Imported here: resolving catalog models pulls in the architecture code.
    from orchestrator.sizing.flops import training_flops_per_sample
    from orchestrator.sizing.resolve import resolve_architecture

    gpus = load_gpus()
    samples: dict[tuple[str, str], list[float]] = {}
    for m in load_measurements():
        gpu = gpus.get(m.gpu)
        key = PEAK_KEY.get(m.precision)
        if gpu is None or key is None or key not in gpu.peak_tflops:
            continue
        job = JobSpec(
            model=m.model,
            batch=m.batch,
            seq=m.seq or 512,
            image_size=m.image_size or None,
            precision=m.precision if m.precision != "tf32" else "fp32",
        )
        try:
            arch, _ = resolve_architecture(job)
        except UsageError:
            continue  # a measurement of a model the catalog lacks: not usable
        achieved = m.samples_per_s * training_flops_per_sample(arch, job)
        samples.setdefault((gpu.name, key), []).append(achieved / (gpu.peak_tflops[key] * 1e12))
    return {k: statistics.median(v) for k, v in samples.items()}


def gpu_rate(gpu: Gpu, precision: str) -> GpuRate:
    used, note = effective_precision(gpu, precision)
    key = PEAK_KEY[used]
    peak = gpu.peak_tflops.get(key) or gpu.peak_tflops["fp32"]
    measured = calibrated_efficiency().get((gpu.name, key))
    if measured is not None:
        return GpuRate(used, peak, measured, True, note)
    prior = gpu.efficiency.get(key, 0.3)
    return GpuRate(used, peak, prior, False, note)


def multi_gpu_scaling(gpu: Gpu, count: int) -> float:
    if count <= 1:
        return 1.0
    nvlink = "nvlink" in gpu.interconnect.lower() or "nvswitch" in gpu.interconnect.lower()
    return SCALING_NVLINK if nvlink else SCALING_PCIE


def samples_per_second(
    flops_per_sample: float, gpu: Gpu, count: int, precision: str, override: float | None = None
) -> float:
    """Training samples/s for `count` GPUs of one box working data-parallel.

    `override` is a user's measured samples/s per GPU for this GPU model (--throughput).
    """
    per_gpu = override
    if per_gpu is None:
        rate = gpu_rate(gpu, precision)
        per_gpu = rate.peak_tflops * 1e12 * rate.efficiency / flops_per_sample
    return per_gpu * count * multi_gpu_scaling(gpu, count)
