"""The terms of a training step that the throughput model (sizing/throughput.py) and its
measured runs (sizing/stack_runs.py) share: the optimizer step's memory traffic and host
cost, and the workload class a model is calibrated as."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.catalog import Gpu
from orchestrator.sizing.architectures import Architecture
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.stacks import FOREACH_STEP_FACTOR, workload_for

if TYPE_CHECKING:
    from orchestrator.catalog.measurements import ThroughputMeasurement

# The optimizer step. Each step streams the parameters, gradients and optimizer states through
# the GPU's memory once per kernel that touches them; a step every `accumulation` micro-batches
# adds its time, divided by that, to each micro-batch's compute. Two implementations:
#   "fused": one pass (apex FusedAdam/FusedLAMB, torch.optim's fused=True, bitsandbytes): reads
#     parameter, gradient and states, writes parameter and states, so per parameter
#     2 x parameter bytes + gradient bytes + 2 x state bytes (fp32 AdamW: 28 B); multi-tensor
#     launches cover hundreds of tensors, so launch cost is left out. A lower bound for
#     torch.optim's default foreach path, which makes several passes.
#   "eager": DeepLearningExamples' BertAdam (PyTorch/LanguageModeling/BERT/optimization.py),
#     the FP32 optimizer of its run_squad.py: per parameter tensor a Python loop of 13 fp32
#     elementwise kernels (moment updates, sqrt, eps, divide, weight decay, learning rate,
#     negate, add; and zero_grad) and the gradient norm of clip_grad_norm_(p): counting each
#     kernel's operand reads and result write, EAGER_ADAM_BYTES per parameter. clip_grad_norm_
#     ends in `if clip_coef < 1` on a GPU tensor, a host-device sync per tensor, so the host
#     cost of the tensor's EAGER_ADAM_OPS ops (13 elementwise, 6 in clip_grad_norm_) is not
#     hidden behind the GPU: it adds HOST_OP_SECONDS each.
# HOST_OP_SECONDS is the one fitted constant (eager dispatch + launch + the sync, per op), fitted
# on the measurements (benchmarks/throughput_accuracy.py refits it inside each leave-one-out
# round); published per-op eager overhead is about 5-25 us.
EAGER_ADAM_BYTES = 128
EAGER_ADAM_OPS = 19
HOST_OP_SECONDS = 9e-6


@dataclass(frozen=True, slots=True)
class OptimizerStep:
    """One GPU's optimizer step: its memory traffic and its ops issued one at a time."""

    bytes: float
    host_ops: int = 0  # eager ops whose host cost is exposed (0 for fused optimizers)
    accumulation: int = 1  # micro-batches per optimizer step

    def seconds(self, gpu: Gpu, host_op: float = HOST_OP_SECONDS) -> float:
        """Time of one optimizer step on `gpu`."""
        return self.bytes / (gpu.memory_bandwidth_gbps * 1e9) + self.host_ops * host_op

    def per_micro_batch(self, gpu: Gpu, host_op: float = HOST_OP_SECONDS) -> float:
        return self.seconds(gpu, host_op) / self.accumulation


def fused_step_bytes(trainable: int, precision: str, state_bytes: float) -> float:
    """Memory traffic of a one-pass (fused) optimizer step over `trainable` parameters whose
    optimizer states take `state_bytes`: parameter and states read and written, gradient read."""
    from orchestrator.sizing.memory import dtypes

    dt = dtypes(precision)
    return trainable * (2 * dt.param + dt.grad) + 2 * state_bytes


def measurement_step(m: ThroughputMeasurement, arch: Architecture) -> OptimizerStep | None:
    """The optimizer step a published run took (None where its implementation is not recorded)."""
    if not m.optimizer:
        return None
    if m.optimizer == "eager":
        tensors = sum(w.count for w in arch.weights)
        return OptimizerStep(
            arch.parameters * EAGER_ADAM_BYTES, tensors * EAGER_ADAM_OPS, m.accumulation
        )
    from orchestrator.sizing.memory import optimizer_state_bytes

    precision = "fp32" if m.precision == "tf32" else m.precision
    job = JobSpec(model=m.model, precision=precision, optimizer="adamw")
    states = optimizer_state_bytes(arch, job)
    return OptimizerStep(fused_step_bytes(arch.parameters, precision, states), 0, m.accumulation)


def job_step(
    trainable: int,
    state_bytes: float,
    precision: str,
    zero: int,
    count: int,
    stack: str = "optimised",
    accumulation: int = 1,
) -> OptimizerStep:
    """A user's job: an optimizer step every `accumulation` micro-batches, fused on the
    optimised stack, torch's foreach AdamW (FOREACH_STEP_FACTOR passes) on the eager one.
    ZeRO 1-3 shard the states, so each of `count` GPUs updates 1/count of them."""
    shards = count if zero >= 1 and count > 1 else 1
    passes = FOREACH_STEP_FACTOR if stack == "eager" else 1.0
    step = fused_step_bytes(trainable, precision, state_bytes) * passes / shards
    return OptimizerStep(step, accumulation=max(1, accumulation))


def workload_of(arch: Architecture, memory_format: str = "", stack: str = "optimised") -> str:
    """Convolutional nets reach a much lower share of tensor peak than transformers (their
    layers are bandwidth-bound), so the two are calibrated apart. A CNN run channels-last
    (NHWC) is its own workload: in PyTorch's default NCHW, cuDNN's tensor-core convolutions
    add layout transposes, and the same GPU trains ResNet-50 about 1.5x slower in AMP.
    Transformers are calibrated per implementation class (`stack`, sizing/stacks.py)."""
    if arch.traits.transformer:
        return workload_for("transformer", stack)
    return "cnn-channels-last" if memory_format == "channels-last" else "cnn"
