"""The speed of one job on one box: its FLOPs and workload computed once per plan, then
samples/s for any GPU and count (the box's collectives, the vCPUs' image decoding).

`sizing/select.py` ranks boxes by what this module says about each.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from orchestrator.catalog import Gpu, InstanceType
from orchestrator.sizing.architectures import Architecture
from orchestrator.sizing.flops import training_flops_per_sample
from orchestrator.sizing.input_pipeline import decode_ceiling
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.memory import MemoryBreakdown
from orchestrator.sizing.stacks import extra_seconds
from orchestrator.sizing.throughput import (
    HOST_OP_SECONDS,
    PEAK_KEY,
    Collectives,
    Shape,
    collective_bytes,
    job_step,
    samples_per_second,
    shape_of,
    workload_of,
)


@dataclass(frozen=True, slots=True)
class JobSpeed:
    """What the throughput of one job needs, computed once per plan."""

    arch: Architecture
    job: JobSpec
    flops: float  # per sample, as the GPU runs it (recompute included)
    model_flops: float  # per sample without recompute: the MFU convention
    workload: str
    shape: Shape | None
    trainable: int
    state_bytes: int

    @classmethod
    def of(cls, arch: Architecture, job: JobSpec, full: MemoryBreakdown) -> JobSpeed:
        flops = training_flops_per_sample(arch, job)
        plain = replace(job, grad_checkpointing=False)
        model_flops = training_flops_per_sample(arch, plain) if job.grad_checkpointing else flops
        return cls(
            arch,
            job,
            flops,
            model_flops,
            workload_of(arch, stack=job.stack),
            shape_of(arch, job, job.stack),
            full.trainable_parameters,
            full.optimizer_bytes,
        )

    def samples_per_s(
        self,
        gpu: Gpu,
        count: int,
        measured: float | None,
        collectives: Collectives | None,
        shards: int | None = None,
    ) -> float:
        """One box of `count` GPUs; `shards`: the GPUs ZeRO shards the optimizer step over
        (all nodes' GPUs in a cluster; default `count`)."""
        job = self.job
        step = job_step(
            self.trainable,
            self.state_bytes,
            job.precision,
            job.zero,
            shards or count,
            job.stack,
            job.grad_accum,
        )
        return samples_per_second(
            self.flops,
            gpu,
            count,
            job.precision,
            measured,
            self.workload,
            shape=self.shape,
            collectives=collectives,
            batch=job.batch,
            optimizer=step,
            extra_s=extra_seconds(self.arch, job, gpu, job.stack, HOST_OP_SECONDS),
        )

    def llm_figures(
        self, gpu: Gpu, precision_used: str, per_gpu: float
    ) -> tuple[float | None, float | None]:
        """(tokens/s per GPU, MFU) of a decoder-only job; (None, None) for other models.
        MFU counts the model's FLOPs without checkpointing's recompute, against the dense peak
        of the precision the GPU runs."""
        if not self.arch.traits.llm:
            return None, None
        key = PEAK_KEY.get(precision_used, "fp32")
        peak = gpu.peak_tflops.get(key) or gpu.peak_tflops["fp32"]
        return per_gpu * self.job.seq, self.model_flops * per_gpu / (peak * 1e12)


def box_collectives(
    instance: InstanceType, memory: MemoryBreakdown, job: JobSpec
) -> Collectives | None:
    """The box's collectives per micro-batch, when its interconnect is in the catalog."""
    from orchestrator.catalog.interconnect import interconnect_of

    link = interconnect_of(instance.family)
    if link is None or instance.gpu_count <= 1:
        return None
    moved = collective_bytes(
        memory.parameters,
        memory.trainable_parameters,
        job.zero,
        job.precision,
        instance.gpu_count,
    )
    return Collectives(moved, link.busbw_gbps, link.kind)


def input_bound(instance: InstanceType, gpu: Gpu, rate: float) -> tuple[float, str]:
    """An image job's rate capped by the vCPUs' JPEG decoding, and the note saying so."""
    ceiling = decode_ceiling(instance.vcpus)
    if rate <= ceiling:
        return rate, ""
    return ceiling, (
        f"input-bound: JPEG decode + augmentation on {instance.vcpus} vCPUs feeds"
        f" about {ceiling:,.0f} images/s, below the GPUs' {rate:,.0f}; planned at"
        f" {ceiling:,.0f} (measured? --throughput {gpu.name}=IMAGES_PER_S)"
    )
