"""The values a cloud's online calls return: command results, tagged resources, instance
states, object stores, credentials, quotas and price APIs. Planning never makes such a call,
so `orch plan` never loads this module (the offline values, LocalSetup and ImageChoice, are in
clouds/base.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from orchestrator.clouds.base import BOX_TAG, EXPIRES_TAG


@dataclass(slots=True)
class CommandResult:
    """What a command run on a box returned, whichever transport ran it."""

    exit_code: int
    stdout: str
    stderr: str
    status: str = ""  # the agent's own verdict where it has one (Cloud Assistant: "Success")

    @property
    def output(self) -> str:
        """stdout and stderr as one text (what agents that merge the two return)."""
        return self.stdout + self.stderr


@dataclass(slots=True)
class TaggedResource:
    """A resource found in the cloud by its orch tags (for `down` and the sweeper)."""

    kind: str  # "instance", "security_group", "key_pair", "vswitch", "vpc", ... (per cloud)
    id: str  # what the cloud deletes it by
    name: str  # instance type, group name, key name, ...
    tags: dict[str, str] = field(default_factory=dict)
    region: str = ""
    state: str = ""  # instance state where the cloud has one
    vpc_id: str = ""  # network resources: the VPC they belong to

    @property
    def box(self) -> str:
        return self.tags.get(BOX_TAG, "")

    @property
    def expires_at(self) -> str:
        return self.tags.get(EXPIRES_TAG, "")

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "id": self.id, "name": self.name}


@dataclass(frozen=True, slots=True)
class InstanceState:
    """What the cloud says of a box's instance now (for `orch run`'s watch and recovery).

    `state` is normalised across clouds: "pending", "running", "stopping", "stopped",
    "terminated" (shutting down or gone for good) or "missing" (the cloud no longer lists it).
    `reason` is the cloud's own code for the last change ("Server.SpotInstanceTermination" on
    EC2, "Recycling" on ECS spot), or "".
    """

    state: str
    reason: str = ""
    spot_reclaimed: bool = False  # the cloud's spot service took it back

    @property
    def lost(self) -> bool:
        """The instance will not run the job again (a stopped box counts: its disk may stay,
        but a stopped spot box is not coming back by itself)."""
        return self.state in ("stopping", "stopped", "terminated", "missing")


@dataclass(frozen=True, slots=True)
class ObjectStore:
    """A cloud's S3-compatible object store, as a user reaches it through AWS_ENDPOINT_URL(_S3):
    what it can do that orch relies on."""

    title: str  # for people: "Alibaba OSS"
    # PutObject with If-Match / If-None-Match evaluated atomically (compare-and-swap): what a
    # pool record needs (orchestrator/pool/store.py).
    conditional_writes: bool
    path_style: bool  # it serves path-style requests (https://ENDPOINT/BUCKET/KEY)


@dataclass(frozen=True, slots=True)
class Credentials:
    """What the cloud's SDK credential chain resolves on this machine, without an API call
    (`orch up`/`run` preflight, `orch doctor`, `orch sweep`'s per-cloud skip)."""

    found: bool
    source: str = ""  # where they come from: "env", "shared-credentials-file", "iam-role", ...
    problem: str = ""  # why none were found, one line
    hint: str = ""  # what to set


@dataclass(frozen=True, slots=True)
class VcpuQuota:
    """An account's vCPU limit for one instance family and market, and the vCPUs its running
    instances already hold of it (`orch up`'s cluster check, `orch doctor --online`)."""

    name: str  # the quota's name in the cloud's quota service
    code: str  # its code there ("L-DB2E81BA" in AWS Service Quotas)
    limit: float | None  # vCPUs; None when the service does not say
    source: str = ""  # the API that answered
    in_use: float | None = None  # vCPUs of running instances under it; None when unknown
    in_use_problem: str = ""  # why `in_use` is None, one line ("" when it was not asked)

    def free(self) -> float | None:
        """What is left for new instances: the limit minus what is in use (the limit alone
        when the use is unknown); None without a limit."""
        if self.limit is None:
            return None
        return self.limit - (self.in_use or 0.0)


class AgentTransport(Protocol):
    """A cloud's in-guest agent running a script (SSM, Cloud Assistant): no inbound port."""

    description: str

    def run(self, script: str, timeout: float) -> CommandResult: ...


# Prices per region and market, as a price API returns them: {type: {region: {market: $/h}}}.
PriceTable = dict[str, dict[str, dict[str, float | None]]]


@dataclass(frozen=True, slots=True)
class PriceApi:
    """A cloud's price API, as `orch catalog refresh` uses it (SDK code loads inside fetch).

    Its API reference, which refreshed prices cite, is catalog data: `[price_api]` in the
    cloud's catalog file.
    """

    name: str  # shown while fetching: "DescribePrice"
    fetch: Callable[[list[str], list[str]], PriceTable]  # (regions, instance types) -> prices
    source: Callable[[str], str]  # region -> the source line an overlay entry records
