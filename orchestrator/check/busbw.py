"""Bus bandwidth of an all_reduce across a cluster, what the interconnect should give, and the
verdict (`orch check CLUSTER`).

nccl-tests' definitions (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md,
"AllReduce"): algbw = S / t for S bytes reduced in t seconds; busbw = algbw x 2(n-1)/n for n
ranks, a figure that can be compared with the hardware's link rate whatever n is.

What a cluster should reach: a ring all_reduce over N nodes moves 2(N-1)/N x S bytes in and
out of each node, so with B bytes/s of network per node, algbw <= B x N / (2(N-1)) and
busbw <= B x (n-1)/n x N/(N-1) (about B on many nodes; up to 2B on two). B is the rate
`orch plan --nodes` assumed for the type (catalog network.toml at orchestrator/sizing/nodes.py's
fabric efficiency: 80 % of the line rate on EFA, 50 % over TCP and at most 50 Gbit/s), so the
check holds a cluster to what its plan counted on. The GPUs inside a node share the same ring,
so the box's own collective bandwidth (catalog interconnect.toml) bounds it too. For two
p4d.24xlarge (400 Gbit/s EFA, 16 GPUs): B = 40 GB/s, 75 GB/s expected; SkyPilot measured 77
with EFA in use (skypilot-org/skypilot PR #8966, 2026-02-28). A measurement below
MIN_FRACTION of the figure is not a slow network but a wrong path: NCCL on TCP sockets where
EFA was expected, as in skypilot-org/skypilot#8391 (about 20 GB/s where 77.9 was expected on
2 x A100:8).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.errors import OrchError

if TYPE_CHECKING:
    from orchestrator.catalog.network import NodeNetwork

# Below this fraction of the expected bus bandwidth, a cluster fails its check.
MIN_FRACTION = 0.5
GB = 1e9  # nccl-tests' GB/s are 1e9 bytes per second
MAX_BYTES = 1 << 40
MAX_WORLD = 64 * 64  # MAX_NODES x GPUs


def bus_factor(world_size: int) -> float:
    """2(n-1)/n: nccl-tests' all_reduce bus-bandwidth factor."""
    if world_size < 1:
        raise ValueError("world size must be at least 1")
    return 2 * (world_size - 1) / world_size


def algbw_gbps(size_bytes: int, seconds_per_op: float) -> float:
    return size_bytes / seconds_per_op / GB


def busbw_gbps(size_bytes: int, seconds_per_op: float, world_size: int) -> float:
    return algbw_gbps(size_bytes, seconds_per_op) * bus_factor(world_size)


@dataclass(frozen=True, slots=True)
class Measurement:
    """One probe's answer (orchestrator/check/allreduce_probe.py), every field checked."""

    world_size: int
    size_bytes: int
    iters: int
    seconds: float  # the slowest rank's time for all `iters`
    backend: str
    correct: bool
    network: str | None = None  # what NCCL said it used ("AWS Libfabric", "Socket", "IB")

    @property
    def seconds_per_op(self) -> float:
        return self.seconds / self.iters

    @property
    def algbw_gbps(self) -> float:
        return algbw_gbps(self.size_bytes, self.seconds_per_op)

    @property
    def busbw_gbps(self) -> float:
        return busbw_gbps(self.size_bytes, self.seconds_per_op, self.world_size)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "algbw_gbps": round(self.algbw_gbps, 3),
            "busbw_gbps": round(self.busbw_gbps, 3),
        }


def measurement_from(data: Any, network: str | None = None) -> Measurement:
    """The probe's JSON object as a Measurement; OrchError when a field is missing or absurd
    (the line came from a box)."""
    if not isinstance(data, dict):
        raise OrchError("the all_reduce probe's answer is not a JSON object")

    def integer(key: str, low: int, high: int) -> int:
        value = data.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise OrchError(f"the all_reduce probe's {key} is not a whole number {low}..{high}")
        return value

    seconds = data.get("seconds")
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        raise OrchError("the all_reduce probe's seconds is not a number")
    if not math.isfinite(seconds) or seconds <= 0:
        raise OrchError("the all_reduce probe's seconds is not a positive number")
    backend = data.get("backend")
    if backend not in ("nccl", "gloo"):
        raise OrchError("the all_reduce probe's backend is neither nccl nor gloo")
    return Measurement(
        world_size=integer("world_size", 2, MAX_WORLD),
        size_bytes=integer("bytes", 4, MAX_BYTES),
        iters=integer("iters", 1, 100_000),
        seconds=float(seconds),
        backend=str(backend),
        correct=data.get("correct") is True,
        network=network,
    )


@dataclass(frozen=True, slots=True)
class Expectation:
    busbw_gbps: float | None  # None: no floor (a burst-rate network, or no catalog figure)
    basis: str  # how the figure was reached, for the report
    efa: bool = False
    source: str = ""  # URL and date of the catalog fact, or the option that gave it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cluster_ceiling_gbps(node_gbps: float, nodes: int, world_size: int) -> float:
    """busbw a ring all_reduce reaches when each node's network (GB/s) is the bottleneck."""
    if nodes < 2:
        raise ValueError("a cluster has at least two nodes")
    return node_gbps * (world_size - 1) / world_size * nodes / (nodes - 1)


def expected_for(
    instance_type: str,
    network: NodeNetwork | None,
    nodes: int,
    world_size: int,
    box_busbw_gbps: float | None = None,
) -> Expectation:
    """What `nodes` boxes of `instance_type` should reach: the rate the plan assumed for their
    network (catalog network.toml at sizing.nodes' fabric efficiency and TCP ceiling), turned
    into bus bandwidth by the ring bound, and at most the box's own GPU collective rate."""
    from orchestrator.sizing.nodes import effective_bytes_per_s

    if network is None:
        basis = (
            f"{instance_type} has no fixed network figure in the catalog (an 'up to' burst "
            "rate, or not listed); no expectation (give one with --expect-busbw)"
        )
        return Expectation(None, basis)
    source = f"{network.source.url} ({network.source.date})"
    rate = effective_bytes_per_s(network) / GB
    ceiling = cluster_ceiling_gbps(rate, nodes, world_size)
    fabric = "EFA" if network.fabric == "efa" else "TCP"
    basis = (
        f"{nodes} x {instance_type}, {network.gbps:g} Gbit/s {fabric} per node, "
        f"{rate:g} GB/s as planned"
    )
    if box_busbw_gbps is not None and world_size > nodes and box_busbw_gbps < ceiling:
        ceiling = box_busbw_gbps
        basis += f", bounded by the box's own {box_busbw_gbps:g} GB/s between its GPUs"
    return Expectation(round(ceiling, 3), basis, network.fabric == "efa", source)


def given_expectation(busbw: float) -> Expectation:
    """--expect-busbw: a figure from the user (a diagnostic knob; on CPU test nodes, the only
    meaningful one)."""
    return Expectation(busbw, f"--expect-busbw {busbw:g}", False, "--expect-busbw")


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    line: str  # one line: measured vs expected, and the likely cause when it fails
    fraction: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def likely_cause(expectation: Expectation, measurement: Measurement) -> str:
    used = f"NCCL used the {measurement.network!r} network" if measurement.network else ""
    if expectation.efa:
        prefix = f"{used}; " if used else ""
        return (
            prefix + "EFA is likely not in use: check that the EFA driver and the aws-ofi-nccl "
            "plugin are installed and loaded on every node and that FI_PROVIDER=efa "
            "(NCCL_DEBUG=INFO shows 'Using network AWS Libfabric' when they are)"
        )
    prefix = f"{used}; " if used else ""
    figure = "the figure given" if expectation.source == "--expect-busbw" else "the type's"
    return (
        prefix + f"the nodes' network is slower than {figure}: are they in one cluster "
        "placement group, and is another job using the network?"
    )


def verdict(
    measurement: Measurement, expectation: Expectation, min_fraction: float = MIN_FRACTION
) -> Verdict:
    measured = measurement.busbw_gbps
    head = (
        f"all_reduce over {measurement.world_size} ranks ({measurement.backend}, "
        f"{measurement.size_bytes / 2**20:g} MiB): {measured:.2f} GB/s bus bandwidth"
    )
    if not measurement.correct:
        return Verdict(False, head + ", but the reduced values were wrong", None)
    if expectation.busbw_gbps is None:
        return Verdict(True, f"{head}; {expectation.basis}", None)
    fraction = measured / expectation.busbw_gbps
    expected = f"{expectation.busbw_gbps:.2f} GB/s expected"
    shown = f"{head}, {expected} ({fraction:.0%}; {expectation.basis})"
    if fraction >= min_fraction:
        return Verdict(True, shown, fraction)
    floor = f"below {min_fraction:.0%}"
    return Verdict(False, f"{shown}: {floor}; {likely_cause(expectation, measurement)}", fraction)
