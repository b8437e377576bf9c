"""Training throughput per GPU: FLOPs per sample against a calibrated achievable FLOP rate.

samples/s per GPU = peak_tflops[gpu, precision] * efficiency[gpu, precision] / flops_per_sample

`efficiency` (model FLOPs utilisation) is calibrated on published measured throughput in the
catalog (`[[measurement]]` in gpus.toml): for each measurement we compute the FLOPs our own
model assigns to that job, so estimator and calibration share one FLOPs convention. A GPU
without a measurement for a precision gets an efficiency transferred from the measured GPUs
(scaled by compute and bandwidth); the catalog's per-GPU prior is the last resort.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from orchestrator.catalog import Gpu, ThroughputMeasurement, load_gpus, load_measurements
from orchestrator.errors import UsageError
from orchestrator.sizing.architectures import Architecture
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
    basis: str  # "measured" | "transferred" (from measured GPUs) | "prior" (catalog)
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


def workload_of(arch: Architecture) -> str:
    """Convolutional nets reach a much lower share of tensor peak than transformers (their
    layers are bandwidth-bound), so the two are calibrated apart."""
    return "cnn" if arch.kind == "cnn" else "transformer"


def _median(values: list[float]) -> float:
    # statistics.median would import fractions, decimal and random: ~12 ms of start-up.
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


Calibration = dict[tuple[str, str, str], float]  # (gpu, peak key, workload) -> utilisation


@lru_cache(maxsize=1)
def calibrated_efficiency() -> Calibration:
    """The catalog's measurements, calibrated once per process."""
    return calibrate(load_measurements())


def calibrate(measurements: Iterable[ThroughputMeasurement]) -> Calibration:
    """Median measured model-FLOPs utilisation per (gpu, peak key, workload)."""
    # Imported here: resolving catalog models pulls in the architecture code.
    from orchestrator.sizing.flops import training_flops_per_sample
    from orchestrator.sizing.resolve import resolve_architecture

    gpus = load_gpus()
    samples: dict[tuple[str, str, str], list[float]] = {}
    for m in measurements:
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
        utilisation = achieved / (gpu.peak_tflops[key] * 1e12)
        samples.setdefault((gpu.name, key, workload_of(arch)), []).append(utilisation)
    return {k: _median(v) for k, v in samples.items()}


# bf16 and fp16 run on the same tensor cores at the same dense rate on every GPU that has both,
# so a measurement in one calibrates the other.
_TWIN_KEY = {"bf16": "fp16", "fp16": "bf16"}


def _measured(gpu: Gpu, key: str, workload: str, table: Calibration) -> float | None:
    found = table.get((gpu.name, key, workload))
    if found is None and key in _TWIN_KEY and _TWIN_KEY[key] in gpu.peak_tflops:
        found = table.get((gpu.name, _TWIN_KEY[key], workload))
    return found


def _from_siblings(gpu: Gpu, key: str, workload: str, table: Calibration) -> float | None:
    """Efficiency for a GPU without measurements, transferred from the measured ones.

    Training throughput depends on both tensor FLOPS and memory bandwidth, so a reference
    GPU's achieved FLOP rate is scaled by the geometric mean of the two ratios; the median
    over references is returned as a fraction of this GPU's peak.
    """
    gpus = load_gpus()
    estimates = []
    for (name, ref_key, ref_workload), efficiency in table.items():
        if ref_workload != workload or name == gpu.name:
            continue
        if ref_key not in (key, _TWIN_KEY.get(key)):
            continue
        ref = gpus[name]
        achieved = ref.peak_tflops[ref_key] * efficiency
        ratio = (gpu.peak_tflops[key] / ref.peak_tflops[ref_key]) * (
            gpu.memory_bandwidth_gbps / ref.memory_bandwidth_gbps
        )
        estimates.append(achieved * ratio**0.5 / gpu.peak_tflops[key])
    return _median(estimates) if estimates else None


def gpu_rate(
    gpu: Gpu, precision: str, workload: str = "transformer", table: Calibration | None = None
) -> GpuRate:
    """Peak and achievable fraction for a GPU: measured, else transferred, else the prior."""
    table = calibrated_efficiency() if table is None else table
    used, note = effective_precision(gpu, precision)
    key = PEAK_KEY[used]
    if key not in gpu.peak_tflops:
        key = "fp32"
    peak = gpu.peak_tflops[key]
    measured = _measured(gpu, key, workload, table)
    if measured is not None:
        return GpuRate(used, peak, measured, "measured", note)
    transferred = _from_siblings(gpu, key, workload, table)
    if transferred is not None:
        return GpuRate(used, peak, transferred, "transferred", note)
    return GpuRate(used, peak, gpu.efficiency.get(key, 0.3), "prior", note)


def multi_gpu_scaling(gpu: Gpu, count: int) -> float:
    if count <= 1:
        return 1.0
    nvlink = "nvlink" in gpu.interconnect.lower() or "nvswitch" in gpu.interconnect.lower()
    return SCALING_NVLINK if nvlink else SCALING_PCIE


def samples_per_second(
    flops_per_sample: float,
    gpu: Gpu,
    count: int,
    precision: str,
    override: float | None = None,
    workload: str = "transformer",
) -> float:
    """Training samples/s for `count` GPUs of one box working data-parallel.

    `override` is a user's measured samples/s per GPU for this GPU model (--throughput).
    """
    per_gpu = override
    if per_gpu is None:
        rate = gpu_rate(gpu, precision, workload)
        per_gpu = rate.peak_tflops * 1e12 * rate.efficiency / flops_per_sample
    return per_gpu * count * multi_gpu_scaling(gpu, count)
