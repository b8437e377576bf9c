"""What a real GPU process holds beyond the tensors: the CUDA context and the caching
allocator's reserve above the allocated peak; and the implementation knobs that change the
activation footprint (fused cross-entropy, activation offload).

`nvidia-smi` shows, for a PyTorch training process,

    CUDA context (driver, PyTorch's and cuBLAS/cuDNN's kernels)  +  reserved by the allocator

and `torch.cuda.max_memory_reserved()` is the second term only. Both parts are modelled here;
benchmarks/memory_peaks.py checks the totals against measured peaks and reports the
leave-one-out error of each stack's one fitted constant (the reserve fraction,
sizing/runtime_stack.py). docs/accuracy.md has the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.runtime_stack import stack_of

GIB = 1024**3

# CUDA context before the first tensor, as nvidia-smi counts it:
# - CUDA >= 11.7 runtime with lazy module loading (default in PyTorch since 1.13 via
#   CUDA_MODULE_LOADING=LAZY, https://github.com/pytorch/pytorch/pull/86509 , 2022-10-07:
#   287 MB lazy vs 667 MB eager for a small tensor; "around 400MB if CUDA >= 11.7 is used and
#   lazy module loading enabled", https://github.com/pytorch/pytorch/issues/109888 ,
#   2023-09-23; "~300MB", https://github.com/pytorch/pytorch/issues/107667 , 2023-08-28).
#   That is the bare context; a training process loads more (below).
# - Eager loading (a driver older than R515, or a CUDA < 11.7 build): every kernel is loaded
#   at start-up. Measured 1343 MB on a V100 with driver 460.91 / CUDA 11.2 (transformers
#   docs, model_memory_anatomy.md, 2022-01-11): 1.3 GiB.
# Lazy loading needs driver >= 515 (NVIDIA CUDA Programming Guide, 4.7 Lazy Loading, "CUDA
# Driver Version Requirement", read 2026-12-03:
# https://docs.nvidia.com/cuda/cuda-programming-guide/04-special-topics/lazy-loading.html );
# it is on by default from CUDA 12.2 on Linux.
# A training process adds the kernels loaded during its first steps (cuBLAS, autograd's): on
# the H200 of 2026-12-04 (CUDA 13.0, PyTorch 2.11, lazy loading) 0.51 GiB after
# initialisation became 0.75 GiB at every job's peak (NVML used minus max_memory_reserved;
# runtime_stack.HF_EAGER), so a lazily loading box is taken at that measured 0.75 GiB.
CONTEXT_LAZY_GIB = 0.75
CONTEXT_EAGER_GIB = 1.3
LAZY_LOADING_MIN_DRIVER = 515
DEFAULT_CONTEXT_GIB = CONTEXT_LAZY_GIB


@dataclass(frozen=True, slots=True)
class ContextAssumption:
    """The CUDA context the estimate adds, and where the figure comes from."""

    gib: float
    basis: str

    def to_dict(self) -> dict[str, Any]:
        return {"cuda_context_gib": round(self.gib, 3), "cuda_context_basis": self.basis}


def context_for_driver(driver_version: str) -> ContextAssumption | None:
    """The context a box's NVIDIA driver implies (lazy loading needs R515+), or None."""
    try:
        major = int(driver_version.strip().split(".")[0])
    except (ValueError, IndexError):
        return None
    if major >= LAZY_LOADING_MIN_DRIVER:
        return ContextAssumption(CONTEXT_LAZY_GIB, f"driver {driver_version}: lazy loading")
    return ContextAssumption(CONTEXT_EAGER_GIB, f"driver {driver_version}: eager loading")


def context_assumption(job: JobSpec) -> ContextAssumption:
    """The job's CUDA context: the user's figure (or a box's check) when given, else the
    figure measured for the job's runtime stack."""
    if job.cuda_context_gib is not None:
        return ContextAssumption(job.cuda_context_gib, job.cuda_context_basis or "given")
    stack = stack_of(job)
    return ContextAssumption(stack.context_gib, f"measured, {stack.basis}")


def allocator_reserve_bytes(job: JobSpec, allocated_peak: float) -> float:
    """Reserved-but-unallocated memory at the peak: the caching allocator's rounding and the
    freed blocks it keeps, a measured fraction of the allocated peak for the job's stack."""
    return stack_of(job).reserve_fraction * allocated_peak


def assumptions(job: JobSpec) -> dict[str, Any]:
    """What the overhead terms assume, for the estimate's text and JSON."""
    out = context_assumption(job).to_dict()
    out.update(stack_of(job).to_dict())
    out["fused_cross_entropy"] = job.fused_ce
    out["activation_offload"] = job.activation_offload
    return out


def describe(job: JobSpec) -> str:
    """One line for the estimate table."""
    ctx = context_assumption(job)
    stack = stack_of(job)
    knobs = [
        k
        for k, on in (("fused CE", job.fused_ce), ("activation offload", job.activation_offload))
        if on
    ]
    extra = f"; {', '.join(knobs)}" if knobs else ""
    return (
        f"overhead assumes a {ctx.gib:.2f} GiB CUDA context ({ctx.basis}; --cuda-context-gib "
        f"to change) and an allocator reserve of {stack.reserve_fraction:.0%} of the "
        f"allocated peak ({stack.name} stack){extra}"
    )
