"""What a real GPU process holds beyond the tensors: the CUDA context and the caching
allocator's reserve above the allocated peak; and the implementation knobs that change the
activation footprint (fused cross-entropy, activation offload).

`nvidia-smi` shows, for a PyTorch training process,

    CUDA context (driver, PyTorch's and cuBLAS/cuDNN's kernels)  +  reserved by the allocator

and `torch.cuda.max_memory_reserved()` is the second term only. Both parts are modelled here;
benchmarks/memory_peaks.py checks the totals against published measured peaks and reports the
leave-one-out error of the one fitted constant (FRAGMENTATION). docs/accuracy.md has the table.
"""

from __future__ import annotations

from typing import Any

from orchestrator.records import record
from orchestrator.sizing.job import JobSpec

GIB = 1024**3

# CUDA context before the first tensor, as nvidia-smi counts it:
# - CUDA >= 11.7 runtime with lazy module loading (default in PyTorch since 1.13 via
#   CUDA_MODULE_LOADING=LAZY, https://github.com/pytorch/pytorch/pull/86509 , 2022-10-07:
#   287 MB lazy vs 667 MB eager for a small tensor; "around 400MB if CUDA >= 11.7 is used and
#   lazy module loading enabled", https://github.com/pytorch/pytorch/issues/109888 ,
#   2023-09-23; "~300MB", https://github.com/pytorch/pytorch/issues/107667 , 2023-08-28).
#   cuBLAS/cuDNN kernels and workspaces loaded during the first steps add ~100 MB: 0.5 GiB.
# - Eager loading (a driver older than R515, or a CUDA < 11.7 build): every kernel is loaded
#   at start-up. Measured 1343 MB on a V100 with driver 460.91 / CUDA 11.2 (transformers
#   docs, model_memory_anatomy.md, 2022-01-11): 1.3 GiB.
# Lazy loading needs driver >= 515 (NVIDIA CUDA Programming Guide, 4.7 Lazy Loading, "CUDA
# Driver Version Requirement", read 2026-12-03:
# https://docs.nvidia.com/cuda/cuda-programming-guide/04-special-topics/lazy-loading.html );
# it is on by default from CUDA 12.2 on Linux.
CONTEXT_LAZY_GIB = 0.5
CONTEXT_EAGER_GIB = 1.3
LAZY_LOADING_MIN_DRIVER = 515
DEFAULT_CONTEXT_GIB = CONTEXT_LAZY_GIB
DEFAULT_CONTEXT_BASIS = "assumed: CUDA 12 with lazy module loading"

# The caching allocator rounds requests to its block sizes and keeps freed blocks for reuse;
# the reserve above the allocated peak grows with the per-step (activation) footprint.
# Fitted on published nvidia-smi peaks (benchmarks/memory_peaks.py prints the fit and its
# leave-one-out error); applied to activations plus the largest transient buffer.
FRAGMENTATION = 0.22


@record
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
    """The job's CUDA context: the user's figure (or a box's check) when given, else default."""
    if job.cuda_context_gib is not None:
        return ContextAssumption(job.cuda_context_gib, job.cuda_context_basis or "given")
    return ContextAssumption(DEFAULT_CONTEXT_GIB, DEFAULT_CONTEXT_BASIS)


def allocator_reserve_bytes(activations: float, transient: float) -> float:
    """Reserved-but-unallocated memory at the peak (fragmentation of per-step tensors)."""
    return FRAGMENTATION * (activations + transient)


def assumptions(job: JobSpec) -> dict[str, Any]:
    """What the overhead terms assume, for the estimate's text and JSON."""
    out = context_assumption(job).to_dict()
    out["allocator_fragmentation"] = FRAGMENTATION
    out["fused_cross_entropy"] = job.fused_ce
    out["activation_offload"] = job.activation_offload
    return out


def describe(job: JobSpec) -> str:
    """One line for the estimate table."""
    ctx = context_assumption(job)
    knobs = [k for k, on in (("fused CE", job.fused_ce), ("activation offload",
             job.activation_offload)) if on]
    extra = f"; {', '.join(knobs)}" if knobs else ""
    return (
        f"overhead assumes a {ctx.gib:.2f} GiB CUDA context ({ctx.basis}; --cuda-context-gib "
        f"to change) and allocator reserve of {FRAGMENTATION:.0%} of activations{extra}"
    )
