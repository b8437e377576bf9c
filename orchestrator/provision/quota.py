"""Quota before launch (issue 24): a cluster of N nodes needs N x the type's vCPUs of the
account's vCPU quota for its instance family and market. `up` asks before any instance exists,
through the cloud's optional `vcpu_quota` (AWS: Service Quotas, clouds/aws/quotas.py), and
drops a candidate the quota cannot hold; when none is left it refuses, naming the quota and
the number to request. A multi-node launch then never waits on nodes the account may not run
(SkyPilot #502).

One box (nodes = 1) is not checked here: its launch error says the same at once, and `orch
doctor --online` checks it ahead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orchestrator import clouds
from orchestrator.clouds.registry import vcpu_quota_of
from orchestrator.clouds.values import VcpuQuota
from orchestrator.errors import OrchError
from orchestrator.plan import Candidate

Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Shortfall:
    """A candidate the account's vCPU quota cannot hold."""

    candidate: Candidate
    needed: int  # vCPUs: nodes x the type's
    quota: VcpuQuota

    def line(self) -> str:
        c = self.candidate
        limit = self.quota.limit or 0
        return (
            f"{c.nodes} x {c.instance_type} {c.market} in {c.region} needs {self.needed} vCPUs; "
            f"{self.quota.name} ({self.quota.code}) is {limit:g}: request {self.needed} or more"
        )


def shortfall(candidate: Candidate, say: Say) -> Shortfall | None:
    """Why `candidate` (a cluster) cannot launch under the account's quota, or None when it
    can, is one box, or the quota cannot be read (then the launch itself will tell)."""
    if candidate.nodes <= 1:
        return None
    from orchestrator.catalog import find_instance

    cloud = clouds.get(candidate.cloud)
    try:
        vcpus = find_instance(candidate.cloud, candidate.instance_type).vcpus
        quota = vcpu_quota_of(
            cloud, candidate.region, candidate.instance_type, candidate.market == "spot"
        )
    except OrchError as exc:  # CloudError and an unknown type are OrchErrors
        say(f"cannot read the vCPU quota for {candidate.instance_type}: {exc.one_line()}")
        return None
    if quota is None or quota.limit is None:
        return None
    needed = candidate.nodes * vcpus
    return Shortfall(candidate, needed, quota) if quota.limit < needed else None


def within_quota(candidates: list[Candidate], say: Say) -> list[Candidate]:
    """The candidates the account's vCPU quotas can hold, in order; OrchError (exit 1) naming
    each quota and the number to request when none can."""
    kept: list[Candidate] = []
    short: list[Shortfall] = []
    for candidate in candidates:
        found = shortfall(candidate, say)
        if found is None:
            kept.append(candidate)
        else:
            short.append(found)
    if not kept:
        raise OrchError(
            "the vCPU quota cannot hold the cluster: " + "; ".join(s.line() for s in short),
            hint="ask for the increase in the cloud's quota console; nothing was created",
        )
    for found in short:
        say(f"skipping {found.line()}")
    return kept
