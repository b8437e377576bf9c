"""In-memory state of the emulated Alibaba Cloud account, and the rules the real API enforces.

One `AliyunBackend` holds every region. Methods take plain Python values (already parsed from
the RPC parameters by responses/), check them the way ECS/VPC do, change state under one lock,
and raise `SimError(code, message, status)` with the documented error codes.

Time is the real UTC clock plus an offset that tests can advance (`advance_clock`), or a
frozen moment (`freeze_clock`) plus that offset, so that a Pending instance, a finishing
command or auto-release (the cloud releasing an expired box by itself) happens when a test says
so rather than after a sleep. `wait_for` blocks until the state satisfies a condition.

Laid out as moto lays out a service: one module per resource family, each with its records and
a mixin of the backend's calls (`catalogue`, `vpcs`, `key_pairs`, `instances`, `commands`),
`core` (errors, ids, time formats) and `backend` (the account that composes the mixins).
"""

from __future__ import annotations

from tests.sim.aliyun.models.backend import AliyunBackend, Settings
from tests.sim.aliyun.models.catalogue import FAULT_STATUS, CatalogueBackend, Fault
from tests.sim.aliyun.models.commands import CommandAnswer, CommandBackend, Invocation
from tests.sim.aliyun.models.core import (
    MINUTE_FORMAT,
    TIME_FORMAT,
    SimError,
    fmt_minute,
    fmt_time,
    invalid,
    new_id,
    new_request_id,
    not_found,
    parse_release_time,
)
from tests.sim.aliyun.models.deployment_sets import DeploymentSet, DeploymentSetBackend
from tests.sim.aliyun.models.instances import (
    Disk,
    Instance,
    InstanceBackend,
    MarketRequest,
    SystemDiskRequest,
)
from tests.sim.aliyun.models.key_pairs import (
    ACCEPTED_KEY_TYPES,
    KeyPair,
    KeyPairBackend,
    key_fingerprint,
)
from tests.sim.aliyun.models.vpcs import Rule, SecurityGroup, Vpc, VpcBackend, VSwitch

__all__ = [
    "ACCEPTED_KEY_TYPES",
    "AliyunBackend",
    "CatalogueBackend",
    "CommandBackend",
    "DeploymentSet",
    "DeploymentSetBackend",
    "Disk",
    "FAULT_STATUS",
    "Fault",
    "Instance",
    "InstanceBackend",
    "CommandAnswer",
    "Invocation",
    "KeyPair",
    "KeyPairBackend",
    "MINUTE_FORMAT",
    "MarketRequest",
    "Rule",
    "SecurityGroup",
    "Settings",
    "SimError",
    "SystemDiskRequest",
    "TIME_FORMAT",
    "VSwitch",
    "Vpc",
    "VpcBackend",
    "fmt_minute",
    "fmt_time",
    "invalid",
    "key_fingerprint",
    "new_id",
    "new_request_id",
    "not_found",
    "parse_release_time",
]
