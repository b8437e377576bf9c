"""Measured single-GPU runs with their implementation class (llm_throughput.toml [[single_gpu]]):
the job each describes, and the utilisation of its forward and backward once the optimizer
step and the stack's per-micro-batch extras (sizing/stacks.py) are taken out of its time."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from orchestrator.sizing.architectures import Architecture
from orchestrator.sizing.job import JobSpec


@dataclass(frozen=True, slots=True)
class RunTerms:
    """What the throughput model needs of a measured run, computed once."""

    arch: Architecture
    job: JobSpec
    workload: str
    flops: float  # per sample
    trainable: int
    state_bytes: int


def run_job(m: Any) -> tuple[Architecture, JobSpec]:
    """The architecture and the job of a [[single_gpu]] run."""
    from orchestrator.catalog.measurements import llm_arch_config
    from orchestrator.sizing.architectures import from_hf_config
    from orchestrator.sizing.resolve import resolve_architecture

    job = JobSpec(
        model=m.arch,
        batch=m.batch,
        seq=m.seq,
        image_size=m.image_size,
        precision=m.precision,
        grad_checkpointing=m.grad_checkpointing,
        lora_rank=m.lora_rank or None,
        stack=m.stack,
        quantize=m.quantize,
    )
    config = llm_arch_config(m.arch)
    if config is not None:
        return from_hf_config(config, m.arch), job
    return resolve_architecture(job)[0], job


@cache
def run_terms(m: Any) -> RunTerms:
    from orchestrator.sizing.flops import training_flops_per_sample
    from orchestrator.sizing.memory import estimate_memory
    from orchestrator.sizing.step_terms import workload_of

    arch, job = run_job(m)
    memory = estimate_memory(arch, job)
    return RunTerms(
        arch,
        job,
        workload_of(arch, stack=m.stack),
        training_flops_per_sample(arch, job),
        memory.trainable_parameters,
        memory.optimizer_bytes,
    )


def run_utilisation(m: Any, gpu: Any, key: str, host_op: float) -> float | None:
    """Achieved share of `key` peak in the run's forward and backward (None: not usable)."""
    from orchestrator.sizing.stacks import extra_seconds
    from orchestrator.sizing.step_terms import job_step

    t = run_terms(m)
    step = job_step(t.trainable, t.state_bytes, t.job.precision, 0, 1, m.stack)
    extra = step.per_micro_batch(gpu, host_op) + extra_seconds(t.arch, t.job, gpu, m.stack, host_op)
    per_sample = 1.0 / m.samples_per_s - extra / m.batch
    if per_sample <= 0:
        return None
    return t.flops / per_sample / (gpu.peak_tflops[key] * 1e12)
