"""Plan: the decision `orch plan -o plan.json` writes and `orch up --plan` consumes.

plan.json is a stable, versioned contract (`schema`), readable by CI tools:

{
  "schema": "orch.plan/v1",
  "created_at": "2026-12-02T19:00:00Z",
  "job": {... JobSpec fields ...},
  "estimate": {"parameters": 335141888, "memory": {"parameters_bytes": ..., "total_bytes": ...}},
  "choice": Candidate,            # the winner
  "alternatives": [Candidate...], # next-best, in rank order: `orch up` fails over to these
  "cheaper_if": [{"flags": "--grad-checkpointing", "instance_type": ..., "cost": ...,
                  "saving": 0.4, ...}],  # only when a memory lever would cost less
  "warnings": ["..."]             # about the job, not one box (absent when none); the table
}                                 # prints them before the choice's own `warnings`

Candidate (one row of the ranking):
{
  "cloud": <registered cloud: aws, ...>, "region": "us-east-1", "instance_type": "g5.xlarge",
  "market": "on-demand",
  "gpu": "A10G", "gpu_count": 1, "gpu_memory_gib": 24.0,
  "price_per_hour": 1.006, "samples_per_s": 123.4, "hours": 2.3, "cost": 2.31,
  "memory_per_gpu_bytes": 123, "memory_fraction": 0.61,
  "image": {"ssm_parameter": "/aws/service/deeplearning/ami/..."} | {"name_regex": "...",
            "owners": "system"} | {"id": "ami-..."},
  "root_volume_gib": 150, "ssh_user": "ubuntu", "ssh_ingress_cidrs": [],
  "warnings": ["..."],
  "nodes": 1                      # boxes in the cluster (absent in older plans: 1); price_per_hour
}                                 # is one node's, cost = nodes x price_per_hour x hours
An empty `ssh_ingress_cidrs` means "the caller's address /32", resolved by `orch up`.
"""

from __future__ import annotations

import json
import os
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from orchestrator.errors import UsageError

SCHEMA = "orch.plan/v1"
MAX_NODES = 64  # the most boxes one cluster candidate may have (issue 24)


@dataclass(slots=True)
class Candidate:
    """One ranked launch option: a cloud, region, instance type and market, priced and sized."""

    cloud: str
    region: str
    instance_type: str
    market: str  # "on-demand" | "spot"
    gpu: str
    gpu_count: int
    gpu_memory_gib: float
    price_per_hour: float | None
    samples_per_s: float
    hours: float
    cost: float | None
    memory_per_gpu_bytes: int
    memory_fraction: float
    image: dict[str, str]
    root_volume_gib: int
    ssh_user: str
    ssh_ingress_cidrs: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    precision_used: str = ""  # what the GPU runs: amp-bf16 on T4/V100 runs amp-fp16
    price_verified: bool = True  # False: no dated authoritative source for the price
    price_date: str = ""  # when the price's source was read (catalog or `catalog refresh`)
    tokens_per_s_per_gpu: float | None = None  # decoder-only jobs
    mfu: float | None = None  # decoder-only jobs: model FLOPs utilisation (no recompute)
    nodes: int = 1  # boxes of this type run as one cluster (issue 24); cost covers all of them

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def label(self) -> str:
        """The instance type, with the node count of a cluster: `2 × p5.48xlarge`."""
        return f"{self.nodes} × {self.instance_type}" if self.nodes > 1 else self.instance_type

    @property
    def cluster_price_per_hour(self) -> float | None:
        """What every node together costs an hour (price_per_hour is one node's)."""
        return None if self.price_per_hour is None else self.price_per_hour * self.nodes

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "candidate") -> Candidate:
        if not isinstance(data, dict):
            raise UsageError("plan candidate is not an object")
        known = {f.name for f in fields(cls)}
        required = {
            f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
        }
        missing = required - set(data)
        if missing:
            raise UsageError(f"plan candidate is missing {', '.join(sorted(missing))}")
        nodes = data.get("nodes", 1)
        if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
            shown = repr(nodes)[:40]
            raise UsageError(
                f"plan {where}: nodes {shown} is not a whole number from 1 to {MAX_NODES}"
            )
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(slots=True)
class Plan:
    """A plan file: the job, its estimate, the chosen candidate and the ranked alternatives."""

    job: dict[str, Any]
    estimate: dict[str, Any]
    choice: Candidate
    alternatives: list[Candidate]
    created_at: str
    schema: str = SCHEMA
    # Which clouds `plan` considered and how it ranked them (informational; `up` ignores it).
    clouds: list[dict[str, Any]] = field(default_factory=list)
    # "Cheaper if": memory levers whose plan would cost less (sizing/levers.py; informational).
    cheaper_if: list[dict[str, Any]] = field(default_factory=list)
    # What the figures rest on: samples (and whether assumed), shape, set-up hours, price dates.
    assumptions: dict[str, Any] = field(default_factory=dict)
    # The job file the plan came from: {"job_file", "sha256", "git_commit", "git_modified"}.
    source: dict[str, Any] = field(default_factory=dict)
    # The winner's type on 1, 2, 4 and 8 nodes (informational; sizing/select.node_scaling).
    scaling: list[dict[str, Any]] = field(default_factory=list)
    # Warnings about the job rather than one box (a flag that changes nothing, a length past
    # the model's positions, ...): the `warning:` lines the table prints before the choice's.
    warnings: list[str] = field(default_factory=list)

    def candidates(self) -> list[Candidate]:
        """The winner then the alternatives: the failover order for `orch up`."""
        return [self.choice, *self.alternatives]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "created_at": self.created_at,
            "job": self.job,
            "estimate": self.estimate,
            "choice": self.choice.to_dict(),
            "alternatives": [c.to_dict() for c in self.alternatives],
            **({"clouds": self.clouds} if self.clouds else {}),
            **({"cheaper_if": self.cheaper_if} if self.cheaper_if else {}),
            **({"assumptions": self.assumptions} if self.assumptions else {}),
            **({"source": self.source} if self.source else {}),
            **({"scaling": self.scaling} if self.scaling else {}),
            **({"warnings": self.warnings} if self.warnings else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise UsageError(f"not an orch plan (expected schema {SCHEMA!r})")
        try:
            return cls(
                job=dict(data["job"]),
                estimate=dict(data["estimate"]),
                choice=Candidate.from_dict(data["choice"], "choice"),
                alternatives=[
                    Candidate.from_dict(c, f"alternative {i}")
                    for i, c in enumerate(data.get("alternatives", []), 1)
                ],
                created_at=str(data["created_at"]),
                source=dict(data["source"]) if isinstance(data.get("source"), dict) else {},
            )
        except (KeyError, TypeError) as exc:
            raise UsageError(f"plan is incomplete or malformed: {exc}") from None


def write_plan(plan: Plan, path: str | os.PathLike[str]) -> Path:
    """Write atomically, so a reader never sees half a plan. A device or a pipe already at
    `path` (`-o /dev/stdout`) is written through: a file renamed over it would take its place."""
    import tempfile  # heavy (shutil, random): only when a plan is written

    target = Path(path)
    text = json.dumps(plan.to_dict(), indent=2) + "\n"
    try:
        if target.exists() and not target.is_file():  # both follow links; a folder fails
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(text)
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".plan-", dir=target.parent)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except OSError as exc:
        raise UsageError(f"cannot write plan {path}: {exc.strerror or exc}") from None
    return target


def read_plan(path: str | os.PathLike[str]) -> Plan:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read plan {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"plan {path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    return Plan.from_dict(data)
