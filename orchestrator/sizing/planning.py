"""From a ranking to a plan: the Plan `orch up` consumes (the winner and its alternatives),
or, when nothing fits, one line saying why and what would make it fit (a memory lever,
sizing/levers.py, or a multi-node layout)."""

from __future__ import annotations

from dataclasses import replace

from orchestrator.catalog import InstanceType, load_gpus
from orchestrator.errors import UsageError
from orchestrator.plan import Plan
from orchestrator.sizing.assumptions import plan_assumptions
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.levers import cheaper_if
from orchestrator.sizing.memory import estimate_memory
from orchestrator.sizing.resolve import resolve_architecture
from orchestrator.sizing.select import (
    GIB,
    SETUP_HOURS,
    PlanOptions,
    Ranking,
    cluster_market,
    instances_for,
    rank,
    unverified_allowed,
    winners,
)
from orchestrator.sizing.stacks import STACK_TEXT
from orchestrator.sizing.throughput import gpu_supports


def plan_job(job: JobSpec, options: PlanOptions | None = None) -> Plan:
    """Rank and return the Plan that `orch up` consumes; UsageError when nothing fits."""
    options = options or PlanOptions()
    ranking = rank(job, options)
    if not winners(ranking, options):
        raise UsageError(nothing_fits_message(job, options, ranking))
    return plan_from_ranking(ranking, options)


def plan_from_ranking(ranking: Ranking, options: PlanOptions) -> Plan:
    from datetime import UTC, datetime

    priced = winners(ranking, options)
    choice, alternatives = priced[0], priced[1 : 1 + options.alternatives]
    world = choice.gpu_count * choice.nodes  # the data-parallel GPUs of every node
    memory = ranking.memory_by_count[world]
    job = ranking.job.with_gpus(world).to_dict()
    if ranking.samples_assumed:
        job["samples"] = ranking.samples  # what was planned, not null
    return Plan(
        job=job,
        estimate={
            "parameters": memory.parameters,
            "memory": memory.to_dict()["memory"],
            "assumptions": dict(memory.assumptions or {}),
            "throughput": {
                "stack": ranking.job.stack,
                "implementation": STACK_TEXT[ranking.job.stack],
            },
        },
        choice=choice,
        alternatives=alternatives,
        created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        clouds=ranking.clouds.to_list() if ranking.clouds else [],
        assumptions=plan_assumptions(
            ranking.job,
            ranking.samples,
            ranking.samples_assumed,
            ranking.shape,
            SETUP_HOURS,
            [choice, *alternatives],
        ),
        warnings=list(ranking.warnings),
    )


def nothing_fits_message(job: JobSpec, options: PlanOptions, ranking: Ranking) -> str:
    """One line: why nothing fits, and the smallest change that would make something fit."""
    too_long = [r for r in ranking.rejected.values() if r.endswith("more than a year")]
    if too_long and not ranking.candidates:
        return (
            f"no box finishes {ranking.samples:,} samples within a year; check --samples"
            " (or --epochs/--dataset-size)"
        )
    if any(c.cost is not None for c in ranking.candidates):
        best = next(c for c in ranking.candidates if c.cost is not None)
        return (
            f"only boxes whose prices are NOT RE-VERIFIED fit (best: {best.instance_type} in"
            f" {best.region}); refresh them with `orch catalog refresh --cloud {best.cloud}`"
            " or pass --allow-unverified-prices"
        )
    if ranking.candidates:
        return "no instance with a public price fits; unpriced types fit (see `orch catalog`)"
    if options.max_price is not None or options.deadline_hours is not None:
        unbounded = rank(job, replace(options, max_price=None, deadline_hours=None))
        # Boxes the plan could choose once relaxed (not an unverified price under --cloud any).
        priced = winners(unbounded, options) or [
            c for c in unbounded.candidates if c.cost is not None
        ]
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
        if all("cannot train" in r for r in reasons):  # memory is not what rules them out
            return (
                f"{head}; train in --precision amp-bf16 (costed as amp-fp16 there), amp-fp16"
                " or fp32, or leave GPUs with bf16 in the choice (--gpu, --instance-type)"
            )
    elif ranking.memory_by_count:
        by_count = ranking.memory_by_count
        count, least = min(by_count.items(), key=lambda kv: kv[1].total_bytes)
        head += f": needs {least.total_bytes / GIB:.1f} GiB per GPU"
        if count > min(by_count):  # more GPUs shard it, yet not enough
            head += f" even on {count} GPUs"
    nodes = multi_node_hint(job, options)
    if nodes:
        head += f"; {nodes}"
    suggestions = [lever.describe() for lever in cheaper_if(job, options, ranking)]
    if suggestions:
        return f"{head}; would fit with {' or '.join(suggestions)}"
    return f"{head}; {last_resort(job)}"


def last_resort(job: JobSpec) -> str:
    """What is left to try when no one lever makes the job fit: the flags it does not use yet."""
    advice = "try a smaller --batch or --seq"
    if not job.grad_checkpointing:
        advice += " with --grad-checkpointing"
    if job.zero < 3:
        advice += ", or more GPUs with --zero 3"
    return advice


NODE_COUNTS = (2, 3, 4, 6, 8, 12, 16, 24, 32)  # multi-node sizes tried, smallest first


def multi_node_hint(job: JobSpec, options: PlanOptions) -> str | None:
    """How many boxes of which type the job needs when sharded with ZeRO-3 across nodes.

    Estimated from the per-GPU memory of ZeRO-3 over all the nodes' GPUs (weights, gradients
    and optimizer states sharded; activations stay per GPU). The fewest nodes win, then the
    lowest hourly price; only types with a fixed network bandwidth (catalog/data/network.toml)
    are planned across nodes. The hint names the flags that plan it (`--nodes N`).
    """
    from orchestrator.catalog.network import network_of

    arch, _ = resolve_architecture(job)
    gpus = load_gpus()
    by_total: dict[int, int] = {}  # total GPUs -> per-GPU bytes under ZeRO-3
    best: tuple[int, float, InstanceType, int] | None = None
    for instance in instances_for(options):
        gpu = gpus[instance.gpu]
        if (options.gpus is not None and instance.gpu_count != options.gpus) or not (
            gpu_supports(gpu, job.precision) and network_of(instance.cloud, instance.name)
        ):
            continue
        hourly = _cluster_hourly(instance, options)
        if hourly is None:  # no price the plan could choose: --region, --spot, --max-price
            continue
        for nodes in NODE_COUNTS:
            total = nodes * instance.gpu_count
            if total not in by_total:
                by_total[total] = estimate_memory(
                    arch, replace(job, gpus=total, zero=3)
                ).total_bytes
            if by_total[total] <= gpu.memory_gib * GIB * options.headroom:
                key = (nodes, hourly * nodes)
                if best is None or key < best[:2]:
                    best = (nodes, hourly * nodes, instance, by_total[total])
                break
    if best is None:
        return None
    nodes, _, instance, per_gpu = best
    flags = f"--nodes {nodes}" + (" --zero 3" if job.zero < 3 else "")
    return (
        f"needs {nodes} × {instance.name} with ZeRO-3 ({nodes * instance.gpu_count} GPUs,"
        f" {per_gpu / GIB:.1f} GiB per GPU): plan it with {flags}"
    )


def _cluster_hourly(instance: InstanceType, options: PlanOptions) -> float | None:
    """The lowest hourly price of one node of `instance` that a plan of these options could
    choose (its region, markets, --max-price, a verified price unless allowed); None: none."""
    regions = [options.region] if options.region else list(instance.prices)
    prices = [
        price
        for region in regions
        for spot in ((False, True) if options.spot else (False,))
        if (price := instance.price(region, spot=spot)) is not None
        and (options.max_price is None or price <= options.max_price)
        and (instance.price_verified(region) or unverified_allowed(options))
        and cluster_market(instance.cloud, spot)
    ]
    return min(prices, default=None)
