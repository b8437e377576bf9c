"""What `orch run` reports: each attempt (a box, its price, when the job ran, how it ended),
and the run's totals (recoveries, time lost, cost, the on-demand comparison)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any


@dataclass(slots=True)
class Attempt:
    number: int
    cloud: str
    region: str
    instance_type: str
    market: str
    zone: str
    price_per_hour: float | None
    started: float  # time.time() when its box was asked for (or the run began, for --box)
    job_started: float | None = None
    ended: float | None = None
    outcome: str = "running"  # completed | failed | reclaimed | lost | cancelled | detached
    reason: str = ""
    exit_code: int | None = None
    checkpoint: dict[str, Any] | None = None  # the agent's outcome (checkpoints.AgentOutcome)
    lost_node: int | None = None  # on a cluster: the node whose loss ended this attempt
    # What the recovery after this attempt did (run/recovery.py): "node replaced", "cluster
    # re-provisioned" or "box replaced"; `recovery_note`: why a node was not replaced alone.
    recovery: str = ""
    recovery_note: str = ""

    def cost(self) -> float | None:
        if self.price_per_hour is None or self.ended is None:
            return None
        return (self.ended - self.started) / 3600 * self.price_per_hour

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cost_usd"] = _round(self.cost())
        for key in ("started", "job_started", "ended"):
            data[key] = iso(data[key])
        return data


@dataclass(slots=True)
class RunReport:
    run_id: str
    box: str
    exit_code: int
    attempts: list[Attempt] = field(default_factory=list)
    fetched: list[str] = field(default_factory=list)
    destroyed: bool = False
    error: str | None = None
    on_demand_price_per_hour: float | None = None
    node_logs: list[str] = field(default_factory=list)  # a cluster's nodes' logs, fetched here

    @property
    def recoveries(self) -> int:
        return sum(1 for a in self.attempts if a.outcome in ("reclaimed", "lost"))

    def losses_by_node(self) -> dict[str, int]:
        """On a cluster: how many attempts each node's loss ended, by node index."""
        counts: dict[str, int] = {}
        for attempt in self.attempts:
            if attempt.lost_node is not None and attempt.outcome in ("reclaimed", "lost"):
                key = str(attempt.lost_node)
                counts[key] = counts.get(key, 0) + 1
        return counts

    def recoveries_by_node(self) -> dict[str, dict[str, int]]:
        """On a cluster: per lost node, how often it was lost and what each recovery did
        ({"1": {"lost": 2, "node replaced": 1, "cluster re-provisioned": 1}})."""
        counts: dict[str, dict[str, int]] = {}
        for attempt in self.attempts:
            if attempt.lost_node is None or attempt.outcome not in ("reclaimed", "lost"):
                continue
            node = counts.setdefault(str(attempt.lost_node), {"lost": 0})
            node["lost"] += 1
            if attempt.recovery:
                node[attempt.recovery] = node.get(attempt.recovery, 0) + 1
        return counts

    def time_lost_s(self) -> float:
        """From each lost box's end to the command running again on the next one."""
        lost = 0.0
        for before, after in zip(self.attempts, self.attempts[1:], strict=False):
            if before.ended is not None and after.job_started is not None:
                lost += after.job_started - before.ended
        return lost

    def cost(self) -> float | None:
        costs = [a.cost() for a in self.attempts]
        return None if not costs or any(c is None for c in costs) else sum(costs)  # type: ignore[arg-type]

    def on_demand_cost(self) -> float | None:
        if self.on_demand_price_per_hour is None or not self.attempts:
            return None
        ends = [a.ended for a in self.attempts if a.ended is not None]
        if not ends:
            return None
        # The job on one on-demand box: its working time, without the recoveries.
        wall = max(ends) - self.attempts[0].started - self.time_lost_s()
        return wall / 3600 * self.on_demand_price_per_hour

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "box": self.box,
            "exit_code": self.exit_code,
            "attempts": [a.to_dict() for a in self.attempts],
            "recoveries": self.recoveries,
            "losses_by_node": self.losses_by_node(),
            "recoveries_by_node": self.recoveries_by_node(),
            "node_logs": self.node_logs,
            "time_lost_s": round(self.time_lost_s(), 1),
            "cost_usd": _round(self.cost()),
            "on_demand_cost_usd": _round(self.on_demand_cost()),
            "fetched": self.fetched,
            "box_destroyed": self.destroyed,
            "error": self.error,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def iso(moment: float | None) -> str | None:
    if moment is None:
        return None
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
