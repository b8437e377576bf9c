"""The bottom of the cloud seam: the tags orch puts on everything, the errors and error kinds
of cloud calls, the offline values planning reads (LocalSetup, ImageChoice), what a cloud's
Terraform mapping reads (BoxRequest), and a retry helper for deletes.

The `Cloud` protocol, its optional capabilities and the registry of clouds by name are in
clouds/registry.py; the values of online calls (instance states, tagged resources, ...) in
clouds/values.py. This module imports nothing of orch but `orchestrator.errors`, so any layer
may use it.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from orchestrator.errors import EXIT_FAILURE, OrchError

# Tags on everything a box creates: how `down` and `orch sweep` find what a box left.
BOX_TAG = "orch:box"
OWNER_TAG = "orch:owner"
EXPIRES_TAG = "orch:expires-at"
MANAGED_BY_TAG = "orch:managed-by"
ORCH_TAG_PREFIX = "orch:"
# Warm-pool boxes (orch pool): the pool's name, and where its record lives ("local" or s3://...),
# so the sweeper can tell a pool box whose pool is gone.
POOL_TAG = "orch:pool"
POOL_STORE_TAG = "orch:pool-store"


# --------------------------------------------------------------------------------- values


class ErrorKind(enum.Enum):
    """What a failed cloud call means for the caller."""

    CAPACITY = "capacity"  # no stock for this type/market/zone now: try the next candidate
    QUOTA = "quota"  # the account's limit: the next candidate (another type/region) may fit
    RETRYABLE = "retryable"  # throttling, busy resources, eventual consistency: try again
    PERMANENT = "permanent"  # bad input, bad credentials, missing permission: stop

    @property
    def fails_over(self) -> bool:
        return self in (ErrorKind.CAPACITY, ErrorKind.QUOTA)


class CloudError(OrchError):
    """A cloud API call failed; `code` is the API's error code ("" when there was no answer)."""

    def __init__(
        self,
        message: str,
        code: str = "",
        hint: str | None = None,
        kind: ErrorKind = ErrorKind.PERMANENT,
    ):
        super().__init__(message, hint=hint)
        self.code = code
        self.kind = kind


class NoCredentials(CloudError):
    """The cloud's standard credential chain found nothing: `orch sweep --cloud all` skips it."""


class Unreachable(OrchError):
    """The box did not answer; worth retrying until the deadline."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message, exit_code=EXIT_FAILURE, hint=hint)


@dataclass(frozen=True, slots=True)
class LocalSetup:
    """What this machine has configured for a cloud, read offline (environment and config
    files only: no SDK, no network), so `orch plan --cloud any` can rank what the user can
    actually launch first."""

    usable: bool  # credentials (or a profile that names them) are present
    basis: str = ""  # where they come from: "AWS_PROFILE", "~/.aws/credentials", ...
    region: str | None = None  # the configured default region
    region_basis: str = ""  # where the region comes from: "AWS_REGION", "~/.aws/config", ...


@dataclass(frozen=True, slots=True)
class ImageChoice:
    """Which image a candidate boots: the plan's `image` query, login user, root volume."""

    query: dict[str, str]
    ssh_user: str
    base_volume_gib: int  # smallest root volume the image boots with, plus room for the OS


class BoxRequest(Protocol):
    """What a cloud's Terraform mapping reads (provision.render.RenderRequest has it)."""

    name: str
    owner: str
    candidate: Any  # orchestrator.plan.Candidate
    ssh_public_key: str
    ssh_ingress_cidrs: list[str]
    user_data: str
    expires_at: str | None
    allow_world_ssh: bool
    tags: dict[str, str]
    spot_max_price: float | None
    subnet_id: str | None
    zone: str | None  # the zone `orch up` chose; None: the cloud's module picks
    identity: Any  # orchestrator.clouds.identity.BoxIdentity: the box's own role

    def orch_tags(self) -> dict[str, str]: ...


# ------------------------------------------------------------------------------ helpers

# How long to keep retrying a delete that another resource still blocks (DependencyViolation),
# and the longest pause between tries.
DEPENDENCY_RETRY_S = 120.0
DEPENDENCY_PAUSE_S = 10.0


def retry_while(
    blocked: Callable[[CloudError], bool],
    call: Callable[[], None],
    timeout_s: float | None = None,
    pause_s: float | None = None,
) -> None:
    """Call `call` until it stops failing with an error `blocked` accepts (or time runs out).

    A released instance holds its security group for a while, a subnet holds its network:
    deleting in order still meets these for seconds to minutes.
    """
    timeout_s = DEPENDENCY_RETRY_S if timeout_s is None else timeout_s
    pause_s = DEPENDENCY_PAUSE_S if pause_s is None else pause_s
    deadline = time.monotonic() + timeout_s
    pause = min(1.0, pause_s)
    while True:
        try:
            call()
            return
        except CloudError as exc:
            if not blocked(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, pause_s)
