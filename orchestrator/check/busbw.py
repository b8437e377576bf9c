"""Bus bandwidth of an all_reduce across a cluster, what the interconnect should give, and the
verdict (`orch check CLUSTER`).

nccl-tests' definitions (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md,
"AllReduce"): algbw = S / t for S bytes reduced in t seconds; busbw = algbw x 2(n-1)/n for n
ranks, a figure that can be compared with the hardware's link rate whatever n is.

What a cluster should reach: a ring all_reduce over N nodes moves 2(N-1)/N x S bytes in and
out of each node, so with B bytes/s of network per node, algbw <= B x N / (2(N-1)) and
busbw <= B x (n-1)/n x N/(N-1) (about B on many nodes; up to 2B on two, which is why two
p4d.24xlarge, 50 GB/s of EFA each, show 77 GB/s busbw: SkyPilot PR #8966, 2026-02-28). The
GPUs inside a node share the same ring, so the box's own collective bandwidth (catalog
interconnect.toml) bounds it too. B is the type's network figure from the catalog (EFA on
p4d/p4de/p5/p5en/p6 and the larger g-types; ENA/TCP otherwise). A measurement below
MIN_FRACTION of that is not a slow network but a wrong path: NCCL on TCP sockets where EFA
was expected, as in SkyPilot #8391 (about 20 GB/s where 77.9 was expected on 2 x p4de).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.errors import OrchError

# Below this fraction of the expected bus bandwidth, a cluster fails its check.
MIN_FRACTION = 0.5
GB = 1e9  # nccl-tests' GB/s are 1e9 bytes per second
MAX_BYTES = 1 << 40
MAX_WORLD = 64 * 64  # MAX_NODES x GPUs

_NETWORK = re.compile(r"^\s*(up to\s+)?(\d+(?:\.\d+)?)\s*(gigabit|gbps|gbit/s)\s*$", re.IGNORECASE)


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


def network_gbit(text: str) -> tuple[float, bool] | None:
    """("400 Gigabit" -> (400.0, False)), ("Up to 25 Gigabit" -> (25.0, True)); None when
    the catalog's network text is not a rate."""
    match = _NETWORK.match(text or "")
    if not match:
        return None
    return float(match.group(2)), bool(match.group(1))


def cluster_ceiling_gbps(node_gbps: float, nodes: int, world_size: int) -> float:
    """busbw a ring all_reduce reaches when each node's network (GB/s) is the bottleneck."""
    if nodes < 2:
        raise ValueError("a cluster has at least two nodes")
    return node_gbps * (world_size - 1) / world_size * nodes / (nodes - 1)


def expected_for(
    instance: Any,
    nodes: int,
    world_size: int,
    box_busbw_gbps: float | None = None,
) -> Expectation:
    """What `nodes` boxes of the catalog type `instance` (an InstanceType) should reach."""
    rate = network_gbit(instance.network)
    link = "EFA" if instance.efa else "ENA (TCP)"
    source = f"{instance.source.url} ({instance.source.date})"
    if rate is None:
        basis = f"{instance.name}: no network rate in the catalog ({instance.network!r})"
        return Expectation(None, basis, instance.efa, source)
    gbit, burst = rate
    if burst:
        basis = (
            f"{instance.name}: {instance.network} {link} is a burst rate, not a floor;"
            " no expectation (give one with --expect-busbw)"
        )
        return Expectation(None, basis, instance.efa, source)
    ceiling = cluster_ceiling_gbps(gbit / 8, nodes, world_size)
    basis = f"{nodes} x {instance.name}, {instance.network} {link} per node"
    if box_busbw_gbps is not None and world_size > nodes and box_busbw_gbps < ceiling:
        ceiling = box_busbw_gbps
        basis += f", bounded by the box's own {box_busbw_gbps:g} GB/s between its GPUs"
    return Expectation(round(ceiling, 3), basis, instance.efa, source)


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
