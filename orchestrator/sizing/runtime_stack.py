"""The software stack a training step runs on, as far as memory is concerned: what the CUDA
context holds, how much the caching allocator reserves above the allocated peak, which
optimizer implementation runs the step and whether gradients stay allocated between steps.

Each stack's figures are measured, stated with their source, and reported with every estimate
(`assumptions` in JSON, the overhead line of the table). benchmarks/memory_peaks.py refits the
reserve fraction of each stack on its own measurements and prints the leave-one-out errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.sizing.job import JobSpec


@dataclass(frozen=True, slots=True)
class RuntimeStack:
    """A training software stack's memory facts beyond the tensors it allocates."""

    name: str
    context_gib: float  # CUDA context at the training peak, as nvidia-smi counts it
    reserve_fraction: float  # reserved-but-unallocated, per byte of the allocated peak
    optimizer_impl: str  # "foreach": a state-sized temporary; "for-loop": one tensor's; "fused"
    grads_persist: bool  # zero_grad() keeps the gradients allocated (set_to_none=False)
    basis: str
    kbit_saves_input: bool = False  # bitsandbytes' 4-bit matmul keeps its input (<= 0.41)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack": self.name,
            "stack_basis": self.basis,
            "allocator_reserve_fraction": self.reserve_fraction,
            "optimizer_implementation": self.optimizer_impl,
            "gradients_persist_between_steps": self.grads_persist,
        }


# Plain eager PyTorch as most Hugging Face users train (the default): measured on one NVIDIA
# H200, driver 580.159.04, CUDA 13.0, PyTorch 2.11.0+cu130, transformers 5.17.0, 2026-12-04
# (benchmarks/data/h200_eager_2026-12-04.jsonl, seven jobs). The context is NVML's used memory
# at the peak minus torch.cuda.max_memory_reserved(): 0.75 GiB on every job (0.51 GiB right after
# CUDA initialised, lazy loading; cuBLAS and the training kernels load during the first steps).
# The reserve: max_memory_reserved - max_memory_allocated over the allocated peak, 2.6-10 % on
# those jobs; the fraction is the least-squares fit, raised so that none is more than 5 % under.
# torch.optim.AdamW defaults to its foreach implementation on CUDA (torch/optim/optimizer.py,
# _default_to_fused_or_foreach); Module.zero_grad() sets gradients to None since PyTorch 2.0.
HF_EAGER = RuntimeStack(
    name="hf-eager",
    context_gib=0.75,
    reserve_fraction=0.06,
    optimizer_impl="foreach",
    grads_persist=False,
    basis="eager PyTorch 2.11 / CUDA 13, torch AdamW (foreach); measured on H200 2026-12-04",
)

# The transformers 4.18-4.27 Trainer of early 2022 (benchmarks/data/memory_peaks.toml, V100,
# driver 460.91, CUDA 11.2): eager module loading (the context holds every kernel, 1.3 GiB),
# transformers' own AdamW ("adamw_hf", a loop over parameters: one tensor-sized temporary),
# and PyTorch 1.x's zero_grad(set_to_none=False), which keeps the gradients allocated.
HF_TRAINER_2022 = RuntimeStack(
    name="hf-trainer-2022",
    context_gib=1.3,
    reserve_fraction=0.115,
    optimizer_impl="for-loop",
    grads_persist=True,
    basis="PyTorch 1.x / CUDA 11.2, transformers 4.2x Trainer (adamw_hf); V100 peaks of 2022",
)

# `--stack optimised` (compiled or fused kernels, sizing/stacks.py): a fused AdamW
# (torch.optim.AdamW(fused=True), one kernel per tensor group, no state-sized temporary); the
# CUDA stack's context and reserve are taken from the measured eager stack (no optimised run
# has been measured for memory yet).
HF_OPTIMISED = RuntimeStack(
    name="optimised",
    context_gib=HF_EAGER.context_gib,
    reserve_fraction=HF_EAGER.reserve_fraction,
    optimizer_impl="fused",
    grads_persist=False,
    basis="fused AdamW; context and reserve assumed as measured for hf-eager (H200 2026-12-04)",
)

# LitGPT's published resource tables (benchmarks/data/memory_peaks.toml; A100-40GB, PyTorch
# 2.1.0+cu121, bitsandbytes 0.41.1, 2023-10-20): the default step (foreach AdamW, gradients
# freed), with bitsandbytes of that time, whose MatMul4Bit saved its input for backward
# (`ctx.tensors = (A, B)`; current releases keep `(None, B)`,
# bitsandbytes-foundation/bitsandbytes bitsandbytes/autograd/_functions.py). Only
# max_memory_allocated was published, so the context and reserve are the eager stack's.
LITGPT_2023 = RuntimeStack(
    name="litgpt-2023",
    context_gib=HF_EAGER.context_gib,
    reserve_fraction=HF_EAGER.reserve_fraction,
    optimizer_impl="foreach",
    grads_persist=False,
    basis="LitGPT, PyTorch 2.1 / bitsandbytes 0.41.1, A100 2023-10-20 (max_memory_allocated)",
    kbit_saves_input=True,
)

STACKS = {s.name: s for s in (HF_EAGER, HF_TRAINER_2022, HF_OPTIMISED, LITGPT_2023)}
DEFAULT_STACK = HF_EAGER.name


def runtime_stack(name: str | None) -> RuntimeStack:
    return STACKS[name or DEFAULT_STACK]


def stack_of(job: JobSpec) -> RuntimeStack:
    """The job's memory stack: named, or the one its implementation class (--stack) implies."""
    if job.memory_stack:
        return STACKS[job.memory_stack]
    return HF_OPTIMISED if job.stack == "optimised" else HF_EAGER
