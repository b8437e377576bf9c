"""Selection: enumerate (cloud, region, instance, market) that fit and rank by cost per job.

One ranked list drives both `orch plan` (the table, plan.json) and failover in `orch up`
(plan.json's alternatives, tried in order when a launch fails for capacity or quota).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace

from orchestrator.catalog import Gpu, InstanceType, load_gpus, load_instances
from orchestrator.clouds import check_name, names
from orchestrator.errors import UsageError
from orchestrator.plan import Candidate
from orchestrator.sizing.architectures import Architecture
from orchestrator.sizing.assumptions import planned_shape
from orchestrator.sizing.cloud_preference import CloudPreference, cloud_preference
from orchestrator.sizing.images import image_for
from orchestrator.sizing.input_pipeline import decodes_images
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.job_speed import JobSpeed, box_collectives, input_bound
from orchestrator.sizing.memory import MemoryBreakdown, estimate_memory
from orchestrator.sizing.nodes import cluster_rate, internode_seconds, node_counts
from orchestrator.sizing.resolve import resolve_architecture
from orchestrator.sizing.run_length import DEFAULT_SAMPLES, job_samples
from orchestrator.sizing.throughput import effective_precision, gpu_supports

DEFAULT_HEADROOM = 0.90  # estimated peak must stay within 90 % of GPU memory
UNDERUSED_FRACTION = 0.5  # warn when a box would be less than half used
# Boot, driver check and data staging are paid for but train nothing: ~10 minutes a box.
SETUP_HOURS = 1 / 6
MAX_JOB_HOURS = 24 * 365  # a box that needs longer than a year is not a plan
__all__ = ["DEFAULT_SAMPLES", "job_samples"]  # re-exported: sizing/run_length.py has them
GIB = 1024**3


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """Where and how to look for boxes: cloud, region, markets, limits and preferences."""

    cloud: str = "any"  # a registered cloud name, or "any"
    region: str | None = None
    spot: bool = False  # also consider spot capacity (ranked together with on-demand)
    max_price: float | None = None  # USD per hour for the whole instance
    deadline_hours: float | None = None
    gpus: int | None = None  # only instances with exactly this many GPUs
    gpu: str | None = None  # only instances with this GPU (a catalog name: --gpu H100 resolved)
    headroom: float = DEFAULT_HEADROOM
    throughput: dict[str, float] = field(default_factory=dict)  # GPU name -> samples/s per GPU
    dataset_gib: float = 0.0
    alternatives: int = 10
    instance_type: str | None = None  # cost only this named type (--instance-type)
    # Rank prices that no dated authoritative source confirms like the others; by default
    # they never win a plan (--allow-unverified-prices).
    allow_unverified_prices: bool = False
    # Boxes per cluster: 1 (the default), exactly N, or None for `--nodes auto` (1, 2, 4, 8).
    nodes: int | None = 1


@dataclass(slots=True)
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
    clouds: CloudPreference | None = None  # which clouds were considered, and how ranked
    # The cheapest job cost among boxes ruled out by memory alone, had the job fitted there
    # (None: none): a memory lever (sizing/levers.py) can only help when it beats the winner.
    memory_blocked_cost: float | None = None
    shape: dict[str, int] = field(default_factory=dict)  # the input size as planned


def _clouds(options: PlanOptions) -> tuple[str, ...]:
    check_name(options.cloud, extra=("any",))
    return names() if options.cloud == "any" else (options.cloud,)


def instances_for(options: PlanOptions) -> list[InstanceType]:
    chosen = _clouds(options)
    instances = [i for c in chosen for i in load_instances(c)]
    if options.instance_type is not None:
        instances = [_named_instance(chosen, options.instance_type)]
    if options.region:
        instances = [i for i in instances if options.region in i.prices]
        if not instances:
            raise UsageError(f"no priced instance types in region {options.region!r}")
    if options.gpu is not None:
        instances = [i for i in instances if i.gpu == options.gpu]
        if not instances:
            where = f" in {options.region}" if options.region else ""
            raise UsageError(f"--gpu {options.gpu}: no instance type{where} has this GPU")
    _check_gpu_count(instances, options)
    return instances


def _check_gpu_count(instances: list[InstanceType], options: PlanOptions) -> None:
    """--gpus N that no considered box has: say so, with the counts there are."""
    counts = sorted({i.gpu_count for i in instances})
    if options.gpus is None or options.gpus in counts:
        return
    narrowed = " ".join(
        f"{flag} {value}"
        for flag, value in (
            ("--cloud", None if options.cloud == "any" else options.cloud),
            ("--region", options.region),
            ("--gpu", options.gpu),
            ("--instance-type", options.instance_type),
        )
        if value
    )
    where = f" with {narrowed}" if narrowed else ""
    raise UsageError(
        f"--gpus {options.gpus}: no box{where} has {options.gpus} GPUs;"
        f" the GPU counts there are {', '.join(map(str, counts))}"
    )


def _named_instance(clouds: Iterable[str], name: str) -> InstanceType:
    """The one type --instance-type names, looked up in the clouds being considered."""
    from orchestrator.catalog import find_instance

    clouds = list(clouds)
    for cloud in clouds:
        matches = [i for i in load_instances(cloud) if i.name.lower() == name.lower()]
        if matches:
            return matches[0]
    try:
        find_instance(clouds[0], name)  # raises with "did you mean" for the first cloud
    except UsageError as exc:
        if len(clouds) == 1:
            raise
        raise UsageError(
            f"--instance-type {name!r} is in no catalog of {', '.join(clouds)}",
            hint=exc.hint,
        ) from None
    raise UsageError(f"--instance-type {name!r} is not a {clouds[0]} type")


def _markets(options: PlanOptions) -> tuple[bool, ...]:
    return (False, True) if options.spot else (False,)


@dataclass(frozen=True, slots=True)
class Fit:
    """How one instance type runs the job."""

    memory: MemoryBreakdown
    fraction: float  # of one GPU's memory
    samples_per_s: float
    hours: float
    precision_used: str = ""
    notes: tuple[str, ...] = ()  # per-instance warnings (precision fallback, input-bound, ...)
    tokens_per_s_per_gpu: float | None = None  # decoder-only jobs
    mfu: float | None = None  # decoder-only jobs: model FLOPs utilisation


def significant(value: float, digits: int = 3) -> float:
    """`value` to `digits` significant figures (samples/s and tokens/s as a reader takes them)."""
    return float(f"{value:.{digits}g}") if value else 0.0


def data_bytes(parameters: int, optimizer_bytes: int, dataset_gib: float) -> float:
    """Two full checkpoints (fp32 weights + optimizer state), a weight cache, and the dataset."""
    checkpoint = parameters * 4 + optimizer_bytes
    return 2 * checkpoint + parameters * 4 + dataset_gib * GIB


def root_volume_gib(base_gib: int, storage_bytes: float) -> int:
    """Image plus data with 20 % slack, rounded up to 10 GiB."""
    return int(math.ceil((base_gib * GIB + storage_bytes) * 1.2 / GIB / 10) * 10)


def rank(job: JobSpec, options: PlanOptions, given: Collection[str] = ()) -> Ranking:
    """Every fitting (instance, region, market), cheapest job first, then fastest. `given`:
    the options the user set, for the warnings about those that change nothing (resolve.py)."""
    arch, warnings = resolve_architecture(job, given)
    # "--zero N with one GPU shards nothing" belongs to 1-GPU boxes only: it is attached to
    # those candidates below, not printed over an 8-GPU winner.
    zero_note = f"--zero {job.zero} with one GPU shards nothing"
    warnings = [w for w in warnings if w != zero_note]
    samples, assumed = job_samples(job)
    gpus = load_gpus()
    _check_throughput_gpus(options, gpus)

    # Disk beyond the image: sized once from the unsharded model (see root_volume_gib).
    full = estimate_memory(arch, replace(job, gpus=1, zero=0))
    storage_bytes = data_bytes(full.parameters, full.optimizer_bytes, options.dataset_gib)
    speed = JobSpeed.of(arch, job, full)
    memory: dict[int, MemoryBreakdown] = {}  # by data-parallel GPUs (all nodes' together)
    candidates: list[Candidate] = []
    rejected: dict[str, str] = {}
    blocked: list[float] = []  # job costs of boxes (and clusters) ruled out by memory alone
    for instance in instances_for(options) if 1 in node_counts(options.nodes) else ():
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
        links = box_collectives(instance, memory[count], job)
        capacity = gpu.memory_gib * GIB
        if needed > capacity * options.headroom:
            rejected.setdefault(
                instance.name,
                f"needs {needed / GIB:.1f} GiB per GPU, {gpu.name} has {gpu.memory_gib:g} GiB",
            )
            rate = speed.samples_per_s(gpu, count, None, links)
            cost = _cheapest_cost(instance, options, samples / rate / 3600 + SETUP_HOURS)
            blocked += [] if cost is None else [cost]
            continue
        measured = options.throughput.get(gpu.name)
        rate = speed.samples_per_s(gpu, count, measured, links)
        used, precision_note = effective_precision(gpu, job.precision)
        notes = [precision_note] if precision_note else []
        if job.zero and count == 1:
            notes.append(zero_note)
        if measured is None and decodes_images(arch):
            rate, input_note = input_bound(instance, gpu, rate)
            notes += [input_note] if input_note else []
        hours = samples / rate / 3600 + SETUP_HOURS
        if options.deadline_hours is not None and hours > options.deadline_hours:
            rejected.setdefault(instance.name, f"takes {hours:.1f} h, past the deadline")
            continue
        if hours > MAX_JOB_HOURS:
            rejected.setdefault(instance.name, f"takes {hours:,.0f} h, more than a year")
            continue
        tokens, mfu = speed.llm_figures(gpu, used, rate / count)
        fit = Fit(memory[count], needed / capacity, rate, hours, used, tuple(notes), tokens, mfu)
        candidates.extend(_priced_candidates(instance, gpu, options, fit, storage_bytes))
    if options.nodes != 1:
        context = _Context(arch, job, options, gpus, speed, samples, storage_bytes, memory)
        candidates.extend(_cluster_candidates(context, rejected, blocked))

    preference = _sort(candidates, options)
    return Ranking(
        job=job,
        samples=samples,
        samples_assumed=assumed,
        parameters=full.parameters,
        memory_by_count=memory,
        candidates=candidates,
        rejected=rejected,
        warnings=warnings,
        clouds=preference,
        memory_blocked_cost=min(blocked, default=None),
        shape=planned_shape(arch, job),
    )


def _sort(candidates: list[Candidate], options: PlanOptions) -> CloudPreference:
    """Sort in rank order: what can win (`winners`) before what cannot, whatever its cloud's
    tier, so that the table's first row is the plan's choice (an unpriced type, or an
    unverified price under --cloud any, of a cloud with credentials would otherwise head it);
    then by the clouds this machine can launch in, then by cost."""
    allow = options.allow_unverified_prices
    preference = cloud_preference(_clouds(options), region_given=options.region is not None)
    can_win = unverified_allowed(options)
    candidates.sort(
        key=lambda c: (
            c.cost is None,
            not (c.price_verified or can_win),
            preference.tier(c),
            *_rank_key(c, allow),
        )
    )
    return preference


def _check_throughput_gpus(options: PlanOptions, gpus: dict[str, Gpu]) -> None:
    unknown = sorted(set(options.throughput) - set(gpus))
    if unknown:
        raise UsageError(
            f"unknown GPU {unknown[0]!r} in --throughput",
            hint=f"known: {', '.join(sorted(gpus))}",
        )


def _cheapest_cost(instance: InstanceType, options: PlanOptions, hours: float) -> float | None:
    """The lowest job cost of `instance` over the regions and markets a plan would consider."""
    regions = [options.region] if options.region else list(instance.prices)
    costs = [
        price * hours
        for region in regions
        for spot in _markets(options)
        if (price := instance.price(region, spot=spot)) is not None
        and (options.max_price is None or price <= options.max_price)
        and (instance.price_verified(region) or options.allow_unverified_prices)
    ]
    return min(costs, default=None)


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
            warnings += fit.notes
            verified = price is None or instance.price_verified(region)
            if not verified:
                source = instance.price_source
                warnings.append(
                    f"price of {instance.name} in {region} is NOT RE-VERIFIED (no dated"
                    f" authoritative source; from {source.url}, read {source.date}):"
                    f" `orch catalog refresh --cloud {instance.cloud}`"
                )
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
                samples_per_s=significant(fit.samples_per_s, 6),
                hours=round(fit.hours, 3),
                cost=None if price is None else round(price * fit.hours, 2),
                memory_per_gpu_bytes=fit.memory.total_bytes,
                memory_fraction=round(fit.fraction, 4),
                image=dict(image.query),
                root_volume_gib=volume,
                ssh_user=image.ssh_user,
                warnings=warnings,
                precision_used=fit.precision_used,
                price_verified=verified,
                price_date=instance.price_source.date,
                tokens_per_s_per_gpu=None
                if fit.tokens_per_s_per_gpu is None
                else significant(fit.tokens_per_s_per_gpu, 6),
                mfu=None if fit.mfu is None else round(fit.mfu, 3),
            )


# --------------------------------------------------------------------- clusters (issue 24)


@dataclass(slots=True)
class _Context:
    """What evaluating one (instance type, node count) needs, computed once per plan."""

    arch: Architecture
    job: JobSpec
    options: PlanOptions
    gpus: dict[str, Gpu]
    speed: JobSpeed
    samples: int
    storage_bytes: float
    memory: dict[int, MemoryBreakdown]  # by data-parallel GPUs, shared with rank()

    @classmethod
    def of(cls, job: JobSpec, options: PlanOptions) -> _Context:
        arch, _ = resolve_architecture(job)
        full = estimate_memory(arch, replace(job, gpus=1, zero=0))
        storage = data_bytes(full.parameters, full.optimizer_bytes, options.dataset_gib)
        speed = JobSpeed.of(arch, job, full)
        return cls(arch, job, options, load_gpus(), speed, job_samples(job)[0], storage, {})

    def memory_of(self, world: int) -> MemoryBreakdown:
        if world not in self.memory:
            self.memory[world] = estimate_memory(self.arch, self.job.with_gpus(world))
        return self.memory[world]


def _cluster_speed(
    ctx: _Context, instance: InstanceType, gpu: Gpu, nodes: int
) -> tuple[float, list[str]]:
    """Samples/s of `nodes` boxes of `instance` (any count, the memory aside) and notes."""
    from orchestrator.catalog.network import network_of

    job, count = ctx.job, instance.gpu_count
    memory = ctx.memory_of(count * nodes)
    measured = ctx.options.throughput.get(gpu.name)
    collectives = box_collectives(instance, memory, job)
    box = ctx.speed.samples_per_s(gpu, count, measured, collectives, shards=count * nodes)
    notes: list[str] = []
    if measured is None and decodes_images(ctx.arch):
        box, input_note = input_bound(instance, gpu, box)
        notes += [input_note] if input_note else []
    network = network_of(instance.cloud, instance.name)
    if nodes == 1 or network is None:
        return box, notes
    moved = internode_seconds(
        memory.parameters, memory.trainable_parameters, job.zero, job.precision, nodes, network
    )
    rate = cluster_rate(box, count * job.batch, nodes, moved)
    notes.append(
        f"{nodes} nodes over {network.fabric.upper()} at {network.gbps:g} Gbps: "
        f"{rate / (nodes * box):.0%} of {nodes}x one box's speed (inter-node collectives)"
    )
    return rate, notes


def _cluster_fit(
    ctx: _Context, instance: InstanceType, gpu: Gpu, nodes: int, blocked: list[float]
) -> Fit | str:
    """How `nodes` boxes of `instance` run the job, or why they cannot; a cluster ruled out
    by memory alone adds what the job would have cost on it to `blocked`."""
    from orchestrator.catalog.network import network_of

    if network_of(instance.cloud, instance.name) is None:
        return "no fixed network bandwidth in the catalog: not planned across nodes"
    count = instance.gpu_count
    memory = ctx.memory_of(count * nodes)
    capacity = gpu.memory_gib * GIB
    if memory.total_bytes > capacity * ctx.options.headroom:
        rate, _ = _cluster_speed(ctx, instance, gpu, nodes)
        hours = ctx.samples / rate / 3600 + SETUP_HOURS
        cost = _cheapest_cost(instance, ctx.options, hours)
        blocked += [] if cost is None else [nodes * cost]
        return (
            f"needs {memory.total_bytes / GIB:.1f} GiB per GPU on {nodes} nodes,"
            f" {gpu.name} has {gpu.memory_gib:g} GiB"
        )
    rate, notes = _cluster_speed(ctx, instance, gpu, nodes)
    hours = ctx.samples / rate / 3600 + SETUP_HOURS
    deadline = ctx.options.deadline_hours
    if deadline is not None and hours > deadline:
        return f"takes {hours:.1f} h on {nodes} nodes, past the deadline"
    if hours > MAX_JOB_HOURS:
        return f"takes {hours:,.0f} h, more than a year"
    used, precision_note = effective_precision(gpu, ctx.job.precision)
    notes = ([precision_note] if precision_note else []) + notes
    tokens, mfu = ctx.speed.llm_figures(gpu, used, rate / (count * nodes))
    fraction = memory.total_bytes / capacity
    return Fit(memory, fraction, rate, hours, used, tuple(notes), tokens, mfu)


def spot_clusters_of(cloud: str) -> bool:
    """Whether `cloud` can run a cluster on spot capacity (its optional `spot_clusters`)."""
    from orchestrator import clouds
    from orchestrator.errors import OrchError

    try:
        return bool(getattr(clouds.get(cloud), "spot_clusters", True))
    except OrchError:  # a cloud the registry does not know: nothing says it cannot
        return True


def cluster_market(cloud: str, spot: bool) -> bool:
    """Whether a plan may offer a cluster of `cloud` in this market: on-demand always, spot
    only where the cloud runs spot clusters. The one rule for cluster rows, the nothing-fits
    hint (planning.py) and the JSON `scaling` rows."""
    return not spot or spot_clusters_of(cloud)


def _cluster_candidates(
    ctx: _Context, rejected: dict[str, str], blocked: list[float]
) -> list[Candidate]:
    """Every priced (instance, region, market) at each node count above 1 that fits; the job
    costs of clusters ruled out by memory alone go to `blocked`."""
    found: list[Candidate] = []
    for instance in instances_for(ctx.options):
        gpu = ctx.gpus[instance.gpu]
        if (ctx.options.gpus is not None and instance.gpu_count != ctx.options.gpus) or not (
            gpu_supports(gpu, ctx.job.precision)
        ):
            continue
        for nodes in node_counts(ctx.options.nodes):
            if nodes == 1:
                continue
            fit = _cluster_fit(ctx, instance, gpu, nodes, blocked)
            if isinstance(fit, str):
                rejected.setdefault(f"{nodes} × {instance.name}", fit)
                continue
            for row in _priced_candidates(instance, gpu, ctx.options, fit, ctx.storage_bytes):
                if not cluster_market(row.cloud, row.market == "spot"):
                    continue  # `up` could not launch it (the cloud's spot_clusters says why)
                row.nodes = nodes
                if row.cost is not None and row.price_per_hour is not None:
                    row.cost = round(nodes * row.price_per_hour * fit.hours, 2)
                found.append(row)
    return found


def node_scaling(job: JobSpec, options: PlanOptions, choice: Candidate) -> list[dict[str, object]]:
    """The winner's type at 1, 2, 4 and 8 nodes in its region and market: per-GPU memory,
    whether it fits, samples/s, hours and cost for the job (JSON `scaling`). Node counts the
    planner would not offer (no fixed network bandwidth; a spot winner on a cloud without
    spot clusters, `cluster_market`) have no samples/s, hours or cost."""
    from orchestrator.catalog import find_instance
    from orchestrator.catalog.network import network_of
    from orchestrator.sizing.nodes import SCALING_NODES

    ctx = _Context.of(job, options)
    instance = find_instance(choice.cloud, choice.instance_type)
    gpu = ctx.gpus[instance.gpu]
    spot = choice.market == "spot"
    price = instance.price(choice.region, spot=spot)
    # What _cluster_candidates would offer across nodes: a fixed network, and spot only where
    # the cloud runs spot clusters.
    clustered = network_of(instance.cloud, instance.name) is not None and cluster_market(
        instance.cloud, spot
    )
    rows: list[dict[str, object]] = []
    for nodes in SCALING_NODES:
        memory = ctx.memory_of(instance.gpu_count * nodes)
        row: dict[str, object] = {
            "nodes": nodes,
            "memory_per_gpu_bytes": memory.total_bytes,
            "fits": memory.total_bytes <= gpu.memory_gib * GIB * options.headroom,
            "samples_per_s": None,
            "hours": None,
            "cost": None,
        }
        if nodes > 1 and not clustered:
            rows.append(row)  # not planned across nodes
            continue
        rate, _ = _cluster_speed(ctx, instance, gpu, nodes)
        hours = ctx.samples / rate / 3600 + SETUP_HOURS
        row.update(samples_per_s=significant(rate), hours=round(hours, 3))
        row["cost"] = None if price is None else round(nodes * price * hours, 2)
        rows.append(row)
    return rows


def _rank_key(
    c: Candidate, allow_unverified: bool = False
) -> tuple[int, int, float, float, str, str]:
    # Unpriced types (no public price) sort after every priced one, then by time; unverified
    # prices after verified ones unless the user allows them.
    unverified = not (c.price_verified or allow_unverified)
    return (c.cost is None, unverified, c.cost or 0.0, c.hours, c.instance_type, c.region)


def unverified_allowed(options: PlanOptions) -> bool:
    """Unverified prices may win: allowed explicitly, or the user named one cloud (its boxes
    are ranked whatever their prices' source; under `--cloud any` they never beat verified)."""
    return options.allow_unverified_prices or options.cloud != "any"


def winners(ranking: Ranking, options: PlanOptions) -> list[Candidate]:
    """The candidates that may win a plan: priced, and verified unless allowed, in rank order."""
    allow = unverified_allowed(options)
    return [c for c in ranking.candidates if c.cost is not None and (c.price_verified or allow)]
