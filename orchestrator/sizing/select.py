"""Selection: enumerate (cloud, region, instance, market) that fit and rank by cost per job.

One ranked list drives both `orch plan` (the table, plan.json) and failover in `orch up`
(plan.json's alternatives, tried in order when a launch fails for capacity or quota).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from orchestrator.catalog import Gpu, InstanceType, load_gpus, load_instances
from orchestrator.errors import UsageError
from orchestrator.plan import Candidate, Plan
from orchestrator.sizing.flops import training_flops_per_sample
from orchestrator.sizing.images import image_for
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.memory import MemoryBreakdown, estimate_memory
from orchestrator.sizing.resolve import resolve_architecture
from orchestrator.sizing.throughput import (
    Collectives,
    collective_bytes,
    gpu_supports,
    samples_per_second,
    shape_of,
    workload_of,
)

CLOUDS = ("aws", "aliyun")
DEFAULT_SAMPLES = 100_000  # when neither --samples nor --epochs/--dataset-size is given
DEFAULT_HEADROOM = 0.90  # estimated peak must stay within 90 % of GPU memory
UNDERUSED_FRACTION = 0.5  # warn when a box would be less than half used
# Boot, driver check and data staging are paid for but train nothing: ~10 minutes a box.
SETUP_HOURS = 1 / 6
GIB = 1024**3


@dataclass(frozen=True)
class PlanOptions:
    cloud: str = "any"  # "aws" | "aliyun" | "any"
    region: str | None = None
    spot: bool = False  # also consider spot capacity (ranked together with on-demand)
    max_price: float | None = None  # USD per hour for the whole instance
    deadline_hours: float | None = None
    gpus: int | None = None  # only instances with exactly this many GPUs
    headroom: float = DEFAULT_HEADROOM
    throughput: dict[str, float] = field(default_factory=dict)  # GPU name -> samples/s per GPU
    dataset_gib: float = 0.0
    alternatives: int = 10


@dataclass
class Ranking:
    """The outcome of a selection: ranked candidates plus what was ruled out and why."""

    job: JobSpec
    samples: int
    samples_assumed: bool
    parameters: int
    memory_by_count: dict[int, MemoryBreakdown]
    candidates: list[Candidate]
    rejected: dict[str, str]  # instance type -> reason (the first one seen)
    warnings: list[str]


def job_samples(job: JobSpec) -> tuple[int, bool]:
    """Total training samples for the job and whether the default was assumed."""
    if job.samples is not None:
        return job.samples, False
    if job.epochs is not None and job.dataset_size is not None:
        return max(1, math.ceil(job.epochs * job.dataset_size)), False
    return DEFAULT_SAMPLES, True


def _instances(options: PlanOptions) -> list[InstanceType]:
    clouds = CLOUDS if options.cloud == "any" else (options.cloud,)
    if options.cloud not in (*CLOUDS, "any"):
        raise UsageError(f"unknown cloud {options.cloud!r} (choose aws, aliyun or any)")
    instances = [i for c in clouds for i in load_instances(c)]
    if options.region:
        instances = [i for i in instances if options.region in i.prices]
        if not instances:
            raise UsageError(f"no priced instance types in region {options.region!r}")
    return instances


def _markets(options: PlanOptions) -> tuple[bool, ...]:
    return (False, True) if options.spot else (False,)


@dataclass(frozen=True)
class Fit:
    """How one instance type runs the job."""

    memory: MemoryBreakdown
    fraction: float  # of one GPU's memory
    samples_per_s: float
    hours: float


def data_bytes(parameters: int, optimizer_bytes: int, dataset_gib: float) -> float:
    """Two full checkpoints (fp32 weights + optimizer state), a weight cache, and the dataset."""
    checkpoint = parameters * 4 + optimizer_bytes
    return 2 * checkpoint + parameters * 4 + dataset_gib * GIB


def root_volume_gib(base_gib: int, storage_bytes: float) -> int:
    """Image plus data with 20 % slack, rounded up to 10 GiB."""
    return int(math.ceil((base_gib * GIB + storage_bytes) * 1.2 / GIB / 10) * 10)


def rank(job: JobSpec, options: PlanOptions) -> Ranking:
    """Every fitting (instance, region, market), cheapest job first, then fastest."""
    arch, warnings = resolve_architecture(job)
    samples, assumed = job_samples(job)
    flops = training_flops_per_sample(arch, job)
    workload = workload_of(arch)
    shape = shape_of(arch, job)
    gpus = load_gpus()
    unknown = sorted(set(options.throughput) - set(gpus))
    if unknown:
        raise UsageError(
            f"unknown GPU {unknown[0]!r} in --throughput",
            hint=f"known: {', '.join(sorted(gpus))}",
        )

    # Disk beyond the image: sized once from the unsharded model (see root_volume_gib).
    full = estimate_memory(arch, replace(job, gpus=1, zero=0))
    storage_bytes = data_bytes(full.parameters, full.optimizer_bytes, options.dataset_gib)

    memory: dict[int, MemoryBreakdown] = {}
    candidates: list[Candidate] = []
    rejected: dict[str, str] = {}
    for instance in _instances(options):
        if options.gpus is not None and instance.gpu_count != options.gpus:
            continue
        gpu = gpus[instance.gpu]
        if not gpu_supports(gpu, job.precision):
            rejected.setdefault(instance.name, f"{gpu.name} cannot train in {job.precision}")
            continue
        count = instance.gpu_count
        if count not in memory:
            memory[count] = estimate_memory(arch, job.with_gpus(count))
        needed = memory[count].total_bytes
        capacity = gpu.memory_gib * GIB
        if needed > capacity * options.headroom:
            rejected.setdefault(
                instance.name,
                f"needs {needed / GIB:.1f} GiB per GPU, {gpu.name} has {gpu.memory_gib:g} GiB",
            )
            continue
        rate = samples_per_second(
            flops,
            gpu,
            count,
            job.precision,
            options.throughput.get(gpu.name),
            workload,
            shape=shape,
            collectives=_collectives(instance, memory[count], job),
            batch=job.batch,
        )
        hours = samples / rate / 3600 + SETUP_HOURS
        if options.deadline_hours is not None and hours > options.deadline_hours:
            rejected.setdefault(instance.name, f"takes {hours:.1f} h, past the deadline")
            continue
        fit = Fit(memory[count], needed / capacity, rate, hours)
        candidates.extend(_priced_candidates(instance, gpu, options, fit, storage_bytes))

    candidates.sort(key=_rank_key)
    return Ranking(
        job=job,
        samples=samples,
        samples_assumed=assumed,
        parameters=full.parameters,
        memory_by_count=memory,
        candidates=candidates,
        rejected=rejected,
        warnings=warnings,
    )


def _collectives(instance: InstanceType, memory: MemoryBreakdown, job: JobSpec):
    """The box's collectives per micro-batch, when its interconnect is in the catalog."""
    from orchestrator.catalog.interconnect import interconnect_of

    link = interconnect_of(instance.family)
    if link is None or instance.gpu_count <= 1:
        return None
    moved = collective_bytes(
        memory.parameters, memory.trainable_parameters, job.zero, job.precision,
        instance.gpu_count,
    )
    return Collectives(moved, link.busbw_gbps, link.kind)


def _priced_candidates(
    instance: InstanceType,
    gpu: Gpu,
    options: PlanOptions,
    fit: Fit,
    storage_bytes: float,
) -> Iterable[Candidate]:
    image = image_for(instance)
    volume = root_volume_gib(image.base_volume_gib, storage_bytes)
    regions = [options.region] if options.region else sorted(instance.prices)
    for region in regions:
        for spot in _markets(options):
            price = instance.price(region, spot=spot)
            if spot and price is None:
                continue  # no spot offer known for this type and region
            if options.max_price is not None and (price is None or price > options.max_price):
                continue
            warnings = [instance.legacy_note] if instance.legacy and instance.legacy_note else []
            if fit.fraction < UNDERUSED_FRACTION:
                warnings.append(
                    f"box would be under half used ({fit.fraction:.0%} of {gpu.name} memory)"
                )
            yield Candidate(
                cloud=instance.cloud,
                region=region,
                instance_type=instance.name,
                market="spot" if spot else "on-demand",
                gpu=gpu.name,
                gpu_count=instance.gpu_count,
                gpu_memory_gib=gpu.memory_gib,
                price_per_hour=price,
                samples_per_s=round(fit.samples_per_s, 3),
                hours=round(fit.hours, 3),
                cost=None if price is None else round(price * fit.hours, 2),
                memory_per_gpu_bytes=fit.memory.total_bytes,
                memory_fraction=round(fit.fraction, 4),
                image=dict(image.query),
                root_volume_gib=volume,
                ssh_user=image.ssh_user,
                warnings=warnings,
            )


def _rank_key(c: Candidate) -> tuple[int, float, float, str, str]:
    # Unpriced types (no public price) sort after every priced one, then by time.
    return (c.cost is None, c.cost or 0.0, c.hours, c.instance_type, c.region)


def plan_job(job: JobSpec, options: PlanOptions | None = None) -> Plan:
    """Rank and return the Plan that `orch up` consumes; UsageError when nothing fits."""
    options = options or PlanOptions()
    ranking = rank(job, options)
    priced = [c for c in ranking.candidates if c.cost is not None]
    if not priced:
        raise UsageError(nothing_fits_message(job, options, ranking))
    return plan_from_ranking(ranking, options)


def plan_from_ranking(ranking: Ranking, options: PlanOptions) -> Plan:
    from datetime import UTC, datetime

    priced = [c for c in ranking.candidates if c.cost is not None]
    choice, alternatives = priced[0], priced[1 : 1 + options.alternatives]
    memory = ranking.memory_by_count[choice.gpu_count]
    return Plan(
        job=ranking.job.with_gpus(choice.gpu_count).to_dict(),
        estimate={
            "parameters": memory.parameters,
            "memory": memory.to_dict()["memory"],
            "assumptions": dict(memory.assumptions or {}),
        },
        choice=choice,
        alternatives=alternatives,
        created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )


# What to try, in order, when nothing fits: each is (flag text, change to the job).
_REMEDIES: tuple[tuple[str, dict[str, object]], ...] = (
    ("--grad-checkpointing", {"grad_checkpointing": True}),
    ("--zero 3", {"zero": 3}),
    ("--zero 3 --grad-checkpointing", {"zero": 3, "grad_checkpointing": True}),
    ("--lora-rank 16", {"lora_rank": 16}),
    ("--lora-rank 16 --grad-checkpointing", {"lora_rank": 16, "grad_checkpointing": True}),
)


def nothing_fits_message(job: JobSpec, options: PlanOptions, ranking: Ranking) -> str:
    """One line: why nothing fits, and the smallest change that would make something fit."""
    if ranking.candidates:
        return "no instance with a public price fits; unpriced types fit (see `orch catalog`)"
    if options.max_price is not None or options.deadline_hours is not None:
        unbounded = rank(job, replace(options, max_price=None, deadline_hours=None))
        priced = [c for c in unbounded.candidates if c.cost is not None]
        if priced:
            best = min(priced, key=lambda c: c.price_per_hour or 0.0)
            fastest = min(priced, key=lambda c: c.hours)
            return (
                "nothing fits within --max-price/--deadline; the cheapest fitting box is "
                f"{best.instance_type} at ${best.price_per_hour:.3f}/h and the fastest "
                f"{fastest.instance_type} takes {fastest.hours:.1f} h"
            )
    reasons = sorted(set(ranking.rejected.values()))
    head = "nothing fits"
    if job.precision == "bf16" and any("cannot train" in r for r in reasons):
        head += f" ({reasons[0]})"
    elif ranking.memory_by_count:
        count, least = min(ranking.memory_by_count.items(), key=lambda kv: kv[1].total_bytes)
        head += f": needs {least.total_bytes / GIB:.1f} GiB per GPU even on {count} GPU(s)"
    suggestions = []
    for flags, change in _REMEDIES:
        if all(getattr(job, k) == v for k, v in change.items()):
            continue
        trial = replace(job, **change)  # type: ignore[arg-type]
        trial_rank = rank(trial, options)
        if trial_rank.candidates:
            suggestions.append(f"{flags} (fits {trial_rank.candidates[0].instance_type})")
        if len(suggestions) == 2:
            break
    if suggestions:
        return f"{head}; would fit with {' or '.join(suggestions)}"
    return f"{head}; try a smaller --batch or --seq, or more GPUs with --zero 3"
