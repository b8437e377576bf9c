"""Quota before launch (issue 24): a cluster of N nodes needs N x the type's vCPUs of the
account's vCPU quota for its instance family and market, beyond what the account's running
instances already hold of it. `up` asks before any instance exists, through the cloud's
optional `vcpu_quota` (AWS: Service Quotas and DescribeInstances, clouds/aws/quotas.py;
Aliyun: DescribeAccountAttributes, clouds/aliyun/quotas.py), and drops a candidate the quota
cannot hold (limit - in use < needed); when none is left it refuses, naming the quota, what is
in use and the number to request (in use + needed). A multi-node launch then never waits on
nodes the account may not run (SkyPilot #502). When the use cannot be read, the check falls
back to the limit alone and says so once per quota.

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
        c, quota = self.candidate, self.quota
        limit = quota.limit or 0
        used = "" if quota.in_use is None else f" with {quota.in_use:g} in use"
        return (
            f"{c.nodes} x {c.instance_type} {c.market} in {c.region} needs {self.needed} vCPUs; "
            f"{quota.name} ({quota.code}) is {limit:g}{used}: request {self.request:g} or more"
        )

    @property
    def request(self) -> float:
        """The quota value that would hold the cluster: what is in use plus what it needs."""
        return (self.quota.in_use or 0.0) + self.needed


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
    free = quota.free() if quota is not None else None
    if quota is None or free is None:
        return None
    if quota.in_use is None:
        say(
            f"cannot read the vCPUs in use under {quota.name} ({quota.code}) in "
            f"{candidate.region}: {quota.in_use_problem or 'no number'}; checking against "
            "its limit alone"
        )
    needed = candidate.nodes * vcpus
    return Shortfall(candidate, needed, quota) if free < needed else None


def within_quota(candidates: list[Candidate], say: Say) -> list[Candidate]:
    """The candidates the account's vCPU quotas can hold, in order; OrchError (exit 1) naming
    each quota and the number to request when none can."""
    kept: list[Candidate] = []
    short: list[Shortfall] = []
    said: set[str] = set()

    def say_once(line: str) -> None:
        if line not in said:
            said.add(line)
            say(line)

    for candidate in candidates:
        found = shortfall(candidate, say_once)
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
