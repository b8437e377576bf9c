"""The value types of a trace: what one traced forward keeps (`TraceResult`) and the parts of
a job that change it (`TraceKey`, the cache key)."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.sizing.architectures import WeightGroup
from orchestrator.sizing.job import JobSpec


@dataclass(frozen=True)
class TraceResult:
    """What one traced training forward keeps, in bytes (for the job's micro-batch)."""

    activation_bytes: int  # saved for backward: not parameters, buffers or weight casts
    parameters: int  # unique parameter elements (tied weights once)
    trainable_parameters: int
    parameter_bytes: int
    buffer_bytes: int
    weight_cast_bytes: int  # autocast's half copies of the weights, saved by matmuls
    saved_tensors: int  # unique storages counted in activation_bytes
    forward_flops: float  # matmul/conv/attention FLOPs of the forward (FlopCounterMode)
    seconds: float  # build + forward
    model_class: str
    weights: tuple[WeightGroup, ...] = ()
    notes: tuple[str, ...] = ()
    versions: str = ""


@dataclass(frozen=True)
class TraceKey:
    """The parts of a job that change what a forward saves."""

    batch: int
    seq: int
    target_seq: int | None
    image_size: int | None
    precision: str
    attention: str
    grad_checkpointing: bool
    lora_rank: int | None


def trace_key(job: JobSpec) -> TraceKey:
    return TraceKey(
        job.batch,
        job.seq,
        job.target_seq,
        job.image_size,
        job.precision,
        job.attention,
        job.grad_checkpointing,
        job.lora_rank,
    )
