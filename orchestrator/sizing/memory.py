"""Per-GPU training memory: parameters, gradients, optimizer states, activations, overhead.

The estimate is for ONE GPU of a `job.gpus`-wide data-parallel group with ZeRO stage
`job.zero` (FSDP full-shard = 3). Activations are the tensors autograd saves for backward,
counted per layer from the architecture the way the `transformers` PyTorch implementations
save them (benchmarks/memory_accuracy.py checks this against torch); they are never derived
from the parameter count. Formulas and conventions: docs/memory-model.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.sizing import overhead as ovh
from orchestrator.sizing.activation_layers import dtypes
from orchestrator.sizing.activations import activation_bytes, saved_activations
from orchestrator.sizing.architectures import Architecture
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.quantized import kbit_saved_bytes, quantized_weight_bytes
from orchestrator.sizing.runtime_stack import RuntimeStack, stack_of
from orchestrator.sizing.step_phases import (
    PHASES,
    Resident,
    optimizer_temporary_bytes,
    step_phases,
)

__all__ = [
    "GIB",
    "MemoryBreakdown",
    "activation_bytes",
    "dtypes",
    "estimate_memory",
    "optimizer_state_bytes",
]

MIB = 1024**2
GIB = 1024**3

# The CUDA context and the allocator's reserve: orchestrator/sizing/overhead.py.
CUDNN_WORKSPACE_BYTES = 256 * MIB  # convolution algorithms' scratch space (CNNs)
NCCL_BYTES = 256 * MIB  # NCCL communicator buffers when gpus > 1
COMM_BUCKET_BYTES = 200 * MIB  # ZeRO reduce/all-gather buckets
ADAM8BIT_MIN_SIZE = 4096  # bitsandbytes keeps 32-bit states for tensors smaller than this
ADAM8BIT_BLOCK = 2048  # one fp32 absmax per block of 2048 values, per state


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Per-GPU training memory by term, and the peak over a step's phases."""

    parameters_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    overhead_bytes: int
    total_bytes: int
    parameters: int  # total parameter count of the model (not per GPU)
    trainable_parameters: int
    assumptions: dict[str, Any] | None = None  # overhead.assumptions(job)
    peak_bytes: int = 0  # allocated bytes of the step's largest phase
    allocated_bytes: int = 0  # peak_bytes + the allocator's other buffers (DDP buckets, ...)
    peak_phase: str = ""  # which phase (step_phases.PHASES)
    phases: dict[str, int] | None = None  # allocated bytes of every phase

    def to_dict(self) -> dict[str, Any]:
        return {
            "parameters": self.parameters,
            "trainable_parameters": self.trainable_parameters,
            "assumptions": dict(self.assumptions or {}),
            "memory": {
                "parameters_bytes": self.parameters_bytes,
                "gradients_bytes": self.gradients_bytes,
                "optimizer_bytes": self.optimizer_bytes,
                "activations_bytes": self.activations_bytes,
                "overhead_bytes": self.overhead_bytes,
                "total_bytes": self.total_bytes,
                "peak_bytes": self.peak_bytes,
                "peak_phase": self.peak_phase,
                "phases": dict(self.phases or {}),
            },
        }


# ------------------------------------------------------------------------ states


def _optimizer_bytes_per_group(optimizer: str, shape: tuple[int, ...], count: int, state: int):
    numel = math.prod(shape) * count
    if optimizer in ("adam", "adamw"):
        return 2 * state * numel
    if optimizer == "sgd":
        return 0
    if optimizer == "sgd-momentum":
        return state * numel
    if optimizer == "adamw-8bit":
        if math.prod(shape) < ADAM8BIT_MIN_SIZE:
            return 8 * numel
        return 2 * numel + 2 * 4 * math.ceil(numel / ADAM8BIT_BLOCK)
    if optimizer == "adafactor":
        # Factored second moment for matrices (row and column sums), full for vectors; no
        # first moment (transformers' Adafactor default beta1=None); states kept in fp32.
        if len(shape) >= 2:
            rows = math.prod(shape[:-1])
            cols = math.prod(shape[:-2]) * shape[-1]
            return 4 * (rows + cols) * count
        return 4 * numel
    raise ValueError(f"unknown optimizer {optimizer!r}")


def optimizer_state_bytes(arch: Architecture, job: JobSpec) -> int:
    """Optimizer state bytes for all trainable parameters (before ZeRO sharding)."""
    dt = dtypes(job.precision)
    if job.lora_rank:
        r = job.lora_rank
        total = 0
        for st in arch.stacks:
            for fan_in, fan_out in st.lora_targets:
                for shape in ((r, fan_in), (fan_out, r)):
                    total += _optimizer_bytes_per_group(job.optimizer, shape, st.layers, dt.state)
        return total
    return sum(
        _optimizer_bytes_per_group(job.optimizer, w.shape, w.count, dt.state) for w in arch.weights
    )


def _largest_layer_parameters(arch: Architecture) -> int:
    layers = sum(s.layers for s in arch.stacks) or getattr(arch, "layer_count", 1)
    biggest_tensor = max(math.prod(w.shape) for w in arch.weights)
    return max(arch.parameters // layers, biggest_tensor)


# ------------------------------------------------------------------------------ total


def _resident(arch: Architecture, job: JobSpec, stack: RuntimeStack) -> tuple[Resident, int]:
    """Weights, autocast's half weights, gradients, optimizer states and the optimizer's
    temporaries per GPU after ZeRO sharding; and the trainable parameter count."""
    dt = dtypes(job.precision)
    gpus, zero = max(1, job.gpus), job.zero
    total_params = arch.parameters
    cast_cache = 0.0
    if job.quantize:
        trainable = arch.lora_parameters(job.lora_rank or 0)
        weights = quantized_weight_bytes(arch, job.quantize, trainable)
    elif job.lora_rank:
        trainable = arch.lora_parameters(job.lora_rank)
        # The frozen base needs no master copy: held in the compute dtype (bf16/fp16 under
        # autocast); the adapters are trained like full weights (fp32 under autocast).
        weights = total_params * (dt.act if dt.amp else dt.param) + trainable * dt.param
    else:
        trainable = total_params
        weights = total_params * dt.param
        if dt.amp and zero < 3:
            cast_cache = arch.matmul_parameters * dt.act  # autocast's cached half weights
    if zero >= 3:
        weights /= gpus
    grads = trainable * dt.grad
    states = optimizer_state_bytes(arch, job) / (gpus if zero >= 1 else 1)
    resident = Resident(
        weights=weights,
        cast_cache=cast_cache,
        gradients=grads / gpus if zero >= 2 else grads,
        states=states,
        optimizer_temp=optimizer_temporary_bytes(arch, job, stack, states),
    )
    return resident, trainable


def _comm_bytes(arch: Architecture, job: JobSpec, grads: float) -> tuple[float, float]:
    """(Buffers from the caching allocator, buffers outside it) for multi-GPU and CNN jobs:
    cuDNN's workspace, DDP's gradient buckets, ZeRO buckets and ZeRO-3 gathers; NCCL's own."""
    gpus, zero = max(1, job.gpus), job.zero
    allocated = CUDNN_WORKSPACE_BYTES if arch.resnet is not None or arch.convnext else 0.0
    if gpus == 1:
        return allocated, 0.0
    if zero == 0:
        allocated += grads  # DDP gradient buckets: a second copy of the gradients
    else:
        allocated += min(grads, COMM_BUCKET_BYTES)
    if zero >= 3:
        # The current and the prefetched layer, gathered in the compute dtype.
        allocated += 2 * _largest_layer_parameters(arch) * dtypes(job.precision).act
    return allocated, NCCL_BYTES


def estimate_memory(arch: Architecture, job: JobSpec) -> MemoryBreakdown:
    """Peak memory of one GPU for one training step of `job`: the largest phase of the step
    (sizing/step_phases.py), plus the CUDA context and the allocator's reserve."""
    stack = stack_of(job)
    resident, trainable = _resident(arch, job, stack)
    saved = saved_activations(arch, job)
    kbit = kbit_saved_bytes(arch, job, stack.kbit_saves_input)
    if job.grad_checkpointing:
        saved = replace(saved, recompute=saved.recompute + kbit)
    else:
        saved = replace(saved, forward_end=saved.forward_end + kbit)
    phases = step_phases(arch, job, resident, saved, stack)
    peak_phase = max(PHASES, key=lambda name: phases[name])
    full_grads = trainable * dtypes(job.precision).grad
    comm_allocated, comm_outside = _comm_bytes(arch, job, full_grads)
    allocated = phases[peak_phase] + comm_allocated
    overhead = comm_allocated + comm_outside + ovh.allocator_reserve_bytes(job, allocated)
    overhead += ovh.context_assumption(job).gib * GIB
    peak = int(math.ceil(phases[peak_phase]))
    parts = [
        resident.weights + resident.cast_cache,
        resident.gradients,
        resident.states,
        saved.total,
        overhead,
    ]
    ints = [int(math.ceil(p)) for p in parts]
    return MemoryBreakdown(
        parameters_bytes=ints[0],
        gradients_bytes=ints[1],
        optimizer_bytes=ints[2],
        activations_bytes=ints[3],
        overhead_bytes=ints[4],
        total_bytes=peak + ints[4],
        parameters=arch.parameters,
        trainable_parameters=trainable,
        assumptions=ovh.assumptions(job),
        peak_bytes=peak,
        allocated_bytes=int(math.ceil(allocated)),
        peak_phase=peak_phase,
        phases={name: int(math.ceil(phases[name])) for name in PHASES},
    )
