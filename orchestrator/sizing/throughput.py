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
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.catalog import Gpu, load_gpus
from orchestrator.errors import UsageError
from orchestrator.sizing.architectures import Architecture
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.stacks import EAGER_DROPOUT_ATTENTION_RATE, attention_dropout
from orchestrator.sizing.step_terms import (
    EAGER_ADAM_BYTES,
    EAGER_ADAM_OPS,
    HOST_OP_SECONDS,
    OptimizerStep,
    fused_step_bytes,
    job_step,
    measurement_step,
    workload_of,
)

if TYPE_CHECKING:
    from orchestrator.catalog.measurements import ThroughputMeasurement

# The optimizer step and the workload class live in sizing/step_terms.py (shared with
# sizing/stack_runs.py); re-exported here, where the throughput model uses them.
__all__ = [
    "EAGER_ADAM_BYTES",
    "EAGER_ADAM_OPS",
    "HOST_OP_SECONDS",
    "OptimizerStep",
    "fused_step_bytes",
    "job_step",
    "measurement_step",
    "workload_of",
]

# Which peak-TFLOPS column a job's precision runs on. PyTorch leaves TF32 matmuls off by
# default (torch.backends.cuda.matmul.allow_tf32 = False since 1.12), so fp32 uses fp32 peak.
PEAK_KEY = {"fp32": "fp32", "tf32": "tf32", "amp-fp16": "fp16", "amp-bf16": "bf16", "bf16": "bf16"}

# Data-parallel scaling inside one box: all-reduce of gradients overlaps with backward well on
# NVLink/NVSwitch, less well over PCIe. Documented in docs/throughput.md.
SCALING_NVLINK = 0.95
SCALING_PCIE = 0.88

# Utilisation falls with the job's shape (a roofline of the step): element-wise traffic per
# FLOP grows as 1/hidden, weight traffic per FLOP as 1/tokens-per-micro-batch, and both
# weigh by the GPU's FLOP-per-byte ratio (peak / memory bandwidth):
#     roofline = 1 / (1 + (peak / bandwidth) * (SHAPE_ALPHA / hidden + SHAPE_BETA / tokens))
#     utilisation = e_max[gpu] * roofline
# e_max is calibrated per GPU from the measurements divided by this factor; SHAPE_ALPHA and
# SHAPE_BETA are fitted on BERT and LLM measurements (benchmarks/throughput_accuracy.py
# prints the fit and the leave-one-out error per model family).
SHAPE_ALPHA = 4.0
SHAPE_BETA = 5.0
# Attention's score/context matmuls (flash kernels) run at a lower rate than the weight
# matmuls: their FLOPs count 1 / ATTENTION_RATE times. Fitted with the two above.
ATTENTION_RATE = 0.4


@dataclass(frozen=True, slots=True)
class Shape:
    """What a transformer step's utilisation depends on beyond its FLOPs."""

    hidden: int
    tokens: int  # per GPU per micro-batch
    attention: float = 0.0  # share of the step's FLOPs in attention scores and context
    dropout: bool = False  # eager attention with dropout: runs at EAGER_DROPOUT_ATTENTION_RATE


def shape_of(arch: Architecture, job: JobSpec, stack: str = "optimised") -> Shape | None:
    if not arch.traits.transformer or not arch.stacks:
        return None
    from orchestrator.sizing.flops import layer_flops

    hidden = max(st.hidden for st in arch.stacks)
    image = job.image_size or arch.image_size
    seq = arch.vision_tokens(image) if arch.traits.patch_tokens else job.seq
    sdpa = job.attention == "sdpa" and arch.sdpa
    weights = attention = 0.0
    for st in arch.stacks:
        w, a = layer_flops(st, seq, seq, sdpa)
        weights += st.layers * w
        attention += st.layers * a
    share = attention / (weights + attention) if weights + attention else 0.0
    dropout = stack == "eager" and attention_dropout(arch)
    return Shape(hidden, max(1, job.batch * seq), share, dropout)


def shape_factor(
    gpu: Gpu,
    key: str,
    shape: Shape | None,
    alpha: float = SHAPE_ALPHA,
    beta: float = SHAPE_BETA,
    attention_rate: float = ATTENTION_RATE,
    dropout_rate: float = EAGER_DROPOUT_ATTENTION_RATE,
) -> float:
    """Utilisation relative to the GPU's e_max for a job of this shape (1 without one)."""
    if shape is None:
        return 1.0
    ratio = gpu.peak_tflops[key] * 1e12 / (gpu.memory_bandwidth_gbps * 1e9)
    roofline = 1.0 / (1.0 + ratio * (alpha / shape.hidden + beta / shape.tokens))
    rate = dropout_rate if shape.dropout else attention_rate
    return roofline / (1.0 + (1.0 / rate - 1.0) * shape.attention)


@dataclass(frozen=True, slots=True)
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


def _median(values: list[float]) -> float:
    # statistics.median would import fractions, decimal and random: ~12 ms of start-up.
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


Calibration = dict[tuple[str, str, str], float]  # (gpu, peak key, workload) -> utilisation


@lru_cache(maxsize=1)
def calibrated_efficiency() -> Calibration:
    """The catalog's measurements (gpus.toml and llm_throughput.toml), calibrated once.

    Calibrating resolves every measured model's architecture and FLOPs (about a tenth of
    `orch plan`'s start-up), so the table is kept in the parse cache, keyed by the data files
    and the sizing code it was computed from: any change to either computes it anew.
    """
    import json

    from orchestrator.catalog.toml_cache import cache_dir, place_tag, write_quietly

    # The place tag keeps two installs' tables apart (see toml_cache).
    place = place_tag(_package_dir())
    cached = cache_dir() / f"calibration.{place}.{_calibration_key()}.json"
    try:
        rows = json.loads(cached.read_bytes())
        return {(gpu, key, workload): float(value) for gpu, key, workload, value in rows}
    except (OSError, ValueError, TypeError):
        pass  # missing or unreadable: calibrate
    from orchestrator.catalog.measurements import (
        load_llm_measurements,
        load_measurements,
        load_single_gpu_runs,
    )

    table = calibrate(load_measurements(), load_llm_measurements(), runs=load_single_gpu_runs())
    payload = json.dumps([[*k, v] for k, v in sorted(table.items())]).encode()
    write_quietly(cached, payload, "calibration", place)
    return table


@cache
def _package_dir() -> Path:
    """The installed `orchestrator` package: the calibration's inputs and its cache place."""
    return Path(__file__).resolve().parents[1]


def _calibration_key() -> str:
    """Size and mtime of every file the calibration depends on: the catalog's data files and
    the sizing modules that turn a measurement into a utilisation."""
    import os
    import zlib

    package = _package_dir()
    stamps = []
    # os.walk/scandir, not Path.glob: no pattern compiling and one stat a file (start-up).
    for top, suffix in ((package / "catalog" / "data", ".toml"), (package / "sizing", ".py")):
        for folder, dirs, names in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            where = os.path.relpath(folder, package)
            for name in sorted(n for n in names if n.endswith(suffix)):
                info = os.stat(os.path.join(folder, name))
                stamps.append(f"{where}/{name}:{info.st_mtime_ns}:{info.st_size}")
    return f"{zlib.crc32(';'.join(stamps).encode()):08x}"


@cache
def measurement_terms(
    m: ThroughputMeasurement,
) -> tuple[str, Shape | None, float, OptimizerStep | None] | None:
    """(workload, shape, FLOPs per sample, optimizer step) of a measured run; None when the
    catalog lacks its model. Cached: the calibration and its leave-one-out rounds reuse it."""
    # Imported here: resolving catalog models pulls in the architecture code.
    from orchestrator.sizing.flops import training_flops_per_sample
    from orchestrator.sizing.resolve import resolve_architecture

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
        return None  # a measurement of a model the catalog lacks: not usable
    workload = workload_of(arch, m.memory_format)
    flops = training_flops_per_sample(arch, job)
    return workload, shape_of(arch, job), flops, measurement_step(m, arch)


def measured_utilisations(
    measurements: Iterable[ThroughputMeasurement],
    llm: Iterable[Any] = (),
    host_op: float = HOST_OP_SECONDS,
    runs: Iterable[Any] = (),
) -> list[tuple[str, str, str, Shape | None, float]]:
    """(gpu, peak key, workload, shape, utilisation per GPU at one GPU's scaling) per
    usable measurement, in our own FLOPs convention. A run's optimizer step, where recorded,
    is taken out of its time first: utilisation is that of the forward and backward.
    `runs` are single-GPU runs with their stack (catalog/measurements.py SingleGpuRun)."""

    gpus = load_gpus()
    out = []
    for m in measurements:
        gpu = gpus.get(m.gpu)
        key = PEAK_KEY.get(m.precision)
        if gpu is None or key is None or key not in gpu.peak_tflops:
            continue
        terms = measurement_terms(m)
        if terms is None:
            continue
        workload, shape, flops, step = terms
        per_sample = 1.0 / m.samples_per_s
        if step is not None:
            per_sample -= step.per_micro_batch(gpu, host_op) / m.batch
            if per_sample <= 0:
                continue  # the optimizer alone would take longer than the run: not usable
        utilisation = flops / per_sample / (gpu.peak_tflops[key] * 1e12)
        out.append((gpu.name, key, workload, shape, utilisation))
    for m in llm:
        gpu = gpus.get(m.gpu)
        key = PEAK_KEY.get(m.precision)
        if gpu is None or key is None or key not in gpu.peak_tflops:
            continue
        shape, flops = _llm_terms(m)
        achieved = m.tokens_per_s_per_gpu / m.seq * flops
        utilisation = achieved / (gpu.peak_tflops[key] * 1e12)
        scaling = SCALING_NVLINK if m.gpus > 1 else 1.0  # all published runs: NVSwitch
        out.append((gpu.name, key, "transformer", shape, utilisation / scaling))
    out.extend(_run_utilisations(runs, gpus, host_op))
    return out


def _run_utilisations(runs: Iterable[Any], gpus: dict[str, Gpu], host_op: float) -> list:
    from orchestrator.sizing.stack_runs import run_terms, run_utilisation

    out = []
    for m in runs:
        gpu = gpus.get(m.gpu)
        key = PEAK_KEY.get(m.precision)
        if gpu is None or key is None or key not in gpu.peak_tflops:
            continue
        utilisation = run_utilisation(m, gpu, key, host_op)
        if utilisation is None:
            continue
        t = run_terms(m)
        out.append((gpu.name, key, t.workload, shape_of(t.arch, t.job, m.stack), utilisation))
    return out


@cache
def _llm_terms(m: Any) -> tuple[Shape | None, float]:
    """(shape, FLOPs per sample) of an LLM measurement; cached like `measurement_terms`."""
    from orchestrator.sizing.flops import training_flops_per_sample

    arch, job = llm_job(m)
    return shape_of(arch, job), training_flops_per_sample(arch, job)


def llm_job(m: Any) -> tuple[Architecture, JobSpec]:
    """The architecture and job of an LLM throughput measurement."""
    from orchestrator.catalog import find_model
    from orchestrator.catalog.measurements import llm_arch_config
    from orchestrator.sizing.architectures import from_hf_config

    config = llm_arch_config(m.arch) or dict(find_model(m.arch).config)
    job = JobSpec(
        model=m.arch,
        batch=m.batch,
        seq=m.seq,
        precision=m.precision,
        grad_checkpointing=m.grad_checkpointing,
    )
    return from_hf_config(config, m.arch), job


def calibrate(
    measurements: Iterable[ThroughputMeasurement],
    llm: Iterable[Any] = (),
    alpha: float = SHAPE_ALPHA,
    beta: float = SHAPE_BETA,
    attention_rate: float = ATTENTION_RATE,
    host_op: float = HOST_OP_SECONDS,
    runs: Iterable[Any] = (),
    dropout_rate: float = EAGER_DROPOUT_ATTENTION_RATE,
) -> Calibration:
    """Median shape-normalised utilisation (e_max) per (gpu, peak key, workload)."""
    gpus = load_gpus()
    samples: dict[tuple[tuple[Any, ...], str, str], list[float]] = {}
    for name, key, workload, shape, u in measured_utilisations(measurements, llm, host_op, runs):
        factor = shape_factor(gpus[name], key, shape, alpha, beta, attention_rate, dropout_rate)
        samples.setdefault((_chip(gpus[name]), key, workload), []).append(u / factor)
    # GPUs on the same chip (A100 40 and 80 GB, V100 16 and 32 GB) share one e_max: memory
    # size and bandwidth differences are in the shape factor already.
    return {
        (gpu.name, key, workload): _median(values)
        for (chip, key, workload), values in samples.items()
        for gpu in gpus.values()
        if _chip(gpu) == chip
    }


def _chip(gpu: Gpu) -> tuple[Any, ...]:
    return (gpu.architecture, tuple(sorted(gpu.peak_tflops.items())))


# bf16 and fp16 run on the same tensor cores at the same dense rate on every GPU that has both,
# so a measurement in one calibrates the other.
_TWIN_KEY = {"bf16": "fp16", "fp16": "bf16"}


def _measured(gpu: Gpu, key: str, workload: str, table: Calibration) -> float | None:
    found = table.get((gpu.name, key, workload))
    if found is None and key in _TWIN_KEY and _TWIN_KEY[key] in gpu.peak_tflops:
        found = table.get((gpu.name, _TWIN_KEY[key], workload))
    return found


# How a reference GPU's achieved FLOP rate transfers to another GPU: ratio of peaks to the
# first power, ratio of memory bandwidths to the second. Transformers: the geometric mean of
# the two. CNNs on tensor cores: memory bandwidth alone. Their convolutions are a small part of
# the step next to batch-norm, ReLU, residual adds and layout transposes, all memory-bound:
# Lambda's ResNet-50 runs (gpus.toml) gain 1.13x from A100 40 GB to 80 GB (same peak, 1.31x
# bandwidth) and 1.65x from A100 80 GB to H100 (3.2x peak, 1.64x bandwidth). FP32 on CUDA
# cores is compute-bound and keeps the geometric mean.
TRANSFER_EXPONENTS = {"transformer": (0.5, 0.5), "cnn": (0.0, 1.0)}


def _transfer_exponents(key: str, workload: str) -> tuple[float, float]:
    if workload.startswith("cnn") and key != "fp32":
        return TRANSFER_EXPONENTS["cnn"]
    return TRANSFER_EXPONENTS["transformer"]


def _from_siblings(gpu: Gpu, key: str, workload: str, table: Calibration) -> float | None:
    """Efficiency for a GPU without measurements, transferred from the measured ones.

    Training throughput depends on both tensor FLOPS and memory bandwidth, so a reference
    GPU's achieved FLOP rate is scaled by the two ratios (TRANSFER_EXPONENTS); the median
    over references is returned as a fraction of this GPU's peak.
    """
    gpus = load_gpus()
    compute_exp, bandwidth_exp = _transfer_exponents(key, workload)
    estimates = []
    for (name, ref_key, ref_workload), efficiency in table.items():
        if ref_workload != workload or name == gpu.name:
            continue
        if ref_key not in (key, _TWIN_KEY.get(key)):
            continue
        ref = gpus[name]
        achieved = ref.peak_tflops[ref_key] * efficiency
        ratio = (gpu.peak_tflops[key] / ref.peak_tflops[ref_key]) ** compute_exp * (
            gpu.memory_bandwidth_gbps / ref.memory_bandwidth_gbps
        ) ** bandwidth_exp
        estimates.append(achieved * ratio / gpu.peak_tflops[key])
    return _median(estimates) if estimates else None


def gpu_rate(
    gpu: Gpu,
    precision: str,
    workload: str = "transformer",
    table: Calibration | None = None,
    shape: Shape | None = None,
) -> GpuRate:
    """Peak and achievable fraction for a GPU: measured, else transferred, else the prior.

    With a `shape` the calibrated e_max is scaled by the job's shape factor; without one the
    rate is e_max (the large-shape limit)."""
    table = calibrated_efficiency() if table is None else table
    used, note = effective_precision(gpu, precision)
    key = PEAK_KEY[used]
    if key not in gpu.peak_tflops:
        key = "fp32"
    peak = gpu.peak_tflops[key]
    factor = shape_factor(gpu, key, shape)
    measured = _measured(gpu, key, workload, table)
    if measured is not None:
        return GpuRate(used, peak, min(1.0, measured * factor), "measured", note)
    cap = _power_cap(gpu, key, workload, table)
    if workload.endswith("-eager"):
        # A class without a run on this GPU: the class's measured ratio to the optimised
        # calibration on the chips that have both, times this GPU's optimised e_max, so a
        # class keeps its place against the optimised one on every GPU.
        base = workload.removesuffix("-eager")
        ratio = _class_ratio(key, workload, base, table)
        optimised = gpu_rate(gpu, precision, base, table)
        if ratio is not None and optimised.basis != "prior":
            efficiency = min(1.0, min(optimised.efficiency * ratio, cap) * factor)
            return GpuRate(used, peak, efficiency, "transferred", note)
    transferred = _from_siblings(gpu, key, workload, table)
    if transferred is not None:
        return GpuRate(used, peak, min(1.0, min(transferred, cap) * factor), "transferred", note)
    return GpuRate(used, peak, min(gpu.efficiency.get(key, 0.3), cap), "prior", note)


def _power_cap(gpu: Gpu, key: str, workload: str, table: Calibration) -> float:
    """The highest e_max a power-capped GPU can reach without a run of its own (1: no cap).

    A board that cannot hold its boost clock under continuous matrix multiplies (T4: about
    24 of 65 fp16 TFLOPS at its 70 W limit, gpus.toml `sustained_tflops`) runs a training
    step's matmuls at that rate, not at its peak. Transferring a rate from GPUs that hold
    their clocks (`_from_siblings`: peak and bandwidth ratios) does not see that, and gave
    the T4 more than its sustained matmul rate. Its e_max is therefore at most
    sustained / peak times the median e_max measured for this workload (a share of each
    measured GPU's own peak, so the measured GPUs' distance from their peaks is counted
    again: conservative).
    """
    sustained = gpu.sustained_tflops.get(key)
    if sustained is None or key not in gpu.peak_tflops:
        return 1.0
    measured = [
        e for (_, k, w), e in table.items() if w == workload and k in (key, _TWIN_KEY.get(key))
    ]
    if not measured:
        return sustained / gpu.peak_tflops[key]
    return sustained / gpu.peak_tflops[key] * _median(measured)


def _class_ratio(key: str, workload: str, base: str, table: Calibration) -> float | None:
    """Median e_max of `workload` over that of `base` on the GPUs calibrated in both."""
    ratios = [
        efficiency / table[(name, k, base)]
        for (name, k, w), efficiency in table.items()
        if w == workload and k in (key, _TWIN_KEY.get(key)) and (name, k, base) in table
    ]
    return _median(ratios) if ratios else None


def multi_gpu_scaling(gpu: Gpu, count: int) -> float:
    if count <= 1:
        return 1.0
    nvlink = "nvlink" in gpu.interconnect.lower() or "nvswitch" in gpu.interconnect.lower()
    return SCALING_NVLINK if nvlink else SCALING_PCIE


@dataclass(frozen=True, slots=True)
class Collectives:
    """What data-parallel / sharded training moves between a box's GPUs each micro-batch."""

    bytes_per_gpu: float  # sent (and received) by each GPU per micro-batch step
    busbw_gbps: float  # the box's NCCL bus bandwidth (catalog/data/interconnect.toml)
    kind: str  # "nvswitch" | "nvlink" | "pcie"

    def seconds(self) -> float:
        return self.bytes_per_gpu / (self.busbw_gbps * 1e9)


def collective_bytes(
    parameters: int, trainable: int, zero: int, precision: str, count: int
) -> float:
    """Bytes each GPU moves per micro-batch step (ring collectives move (n-1)/n of a buffer):

    ZeRO-3 / FSDP full-shard: all-gather the weights for forward and again for backward in
    the compute dtype, reduce-scatter the gradients; ZeRO 0-2 (DDP): all-reduce (twice the
    buffer) of the gradients. Gradients are fp32 under autocast, bf16 in pure bf16. Gradient
    accumulation's no_sync is not assumed (conservative for DDP)."""
    if count <= 1:
        return 0.0
    compute = 4 if precision == "fp32" else 2
    grad = 2 if precision == "bf16" else 4
    ring = (count - 1) / count
    if zero >= 3:
        return ring * (2 * parameters * compute + trainable * grad)
    return ring * 2 * trainable * grad


def samples_per_second(
    flops_per_sample: float,
    gpu: Gpu,
    count: int,
    precision: str,
    override: float | None = None,
    workload: str = "transformer",
    shape: Shape | None = None,
    collectives: Collectives | None = None,
    batch: int = 1,
    optimizer: OptimizerStep | None = None,
    extra_s: float = 0.0,
) -> float:
    """Training samples/s for `count` GPUs of one box working data-parallel.

    `override` is a user's measured samples/s per GPU for this GPU model (--throughput).
    `shape` scales the calibrated e_max to the job (micro-batch tokens, width, attention).
    With `collectives` (the box's interconnect known) a micro-batch step takes the longer of
    its compute (with NVSwitch-class sync overhead, SCALING_NVLINK) and its collectives,
    which overlap with compute (FSDP prefetch, DDP bucketing); otherwise a fixed scaling
    by the GPU's link kind applies. `optimizer` (one GPU's step) adds its time per
    micro-batch of `batch` samples to the compute, and `extra_s` (the stack's per-micro-batch
    extras: eager MoE loops, dequantisation; sizing/stacks.py) its seconds.
    """
    per_gpu = override
    if per_gpu is None:
        rate = gpu_rate(gpu, precision, workload, shape=shape)
        per_gpu = rate.peak_tflops * 1e12 * rate.efficiency / flops_per_sample
        step = optimizer.per_micro_batch(gpu) if optimizer is not None else 0.0
        if step or extra_s:
            per_gpu = batch / (batch / per_gpu + step + extra_s)
    if count <= 1:
        return per_gpu
    if collectives is None:
        return per_gpu * count * multi_gpu_scaling(gpu, count)
    compute = batch / per_gpu / SCALING_NVLINK
    step = max(compute, collectives.seconds())
    return count * batch / step
