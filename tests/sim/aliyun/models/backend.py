"""The account: every region's state under one lock, the clock, reaping, spot reclaim,
tags and the admin snapshot; the calls of each resource family come from its mixin."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.sim.aliyun.models.catalogue import CatalogueBackend, Fault
from tests.sim.aliyun.models.commands import CommandAnswer, CommandBackend, Invocation
from tests.sim.aliyun.models.core import fmt_time, invalid, not_found
from tests.sim.aliyun.models.deployment_sets import DeploymentSet, DeploymentSetBackend
from tests.sim.aliyun.models.instances import Disk, Instance, InstanceBackend
from tests.sim.aliyun.models.key_pairs import KeyPair, KeyPairBackend
from tests.sim.aliyun.models.vpcs import SecurityGroup, Vpc, VpcBackend, VSwitch


@dataclass
class Settings:
    launch_delay_s: float = 0.5  # Pending -> Running
    command_delay_s: float = 0.3  # RunCommand: Running -> Finished
    # A reclaimed spot instance is released this long after the notice (ECS: 5 minutes).
    spot_release_delay_s: float = 300.0


class AliyunBackend(
    CatalogueBackend,
    VpcBackend,
    KeyPairBackend,
    InstanceBackend,
    CommandBackend,
    DeploymentSetBackend,
):
    """Everything an account holds, in every region."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        # Notified after every API call and clock change: tests wait on it (`wait_for`)
        # instead of sleeping and polling.
        self.changed = threading.Condition(self.lock)
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.settings = Settings()
            self.clock_offset = timedelta()
            self.frozen_at: datetime | None = None  # set: time stands still until advanced
            self.vpcs: dict[str, Vpc] = {}
            self.vswitches: dict[str, VSwitch] = {}
            self.security_groups: dict[str, SecurityGroup] = {}
            self.key_pairs: dict[tuple[str, str], KeyPair] = {}
            self.instances: dict[str, Instance] = {}
            self.deployment_sets: dict[str, DeploymentSet] = {}
            # (region, spot) -> the account's vCPU quota there (DescribeAccountAttributes)
            self.vcpu_quotas: dict[tuple[str, bool], int] = {}
            self.disks: dict[str, Disk] = {}
            self.invocations: dict[str, Invocation] = {}
            self.client_tokens: dict[tuple[str, str], list[str]] = {}
            # (region, zone or "*", instance type, "spot"|"on-demand"|"*") -> StatusCategory
            self.stock: dict[tuple[str, str, str, str], str] = {}
            self.prices: dict[tuple[str, str], tuple[float, float]] = {}
            # (region, zone, instance type) -> spot price there (spot prices differ by zone)
            self.zone_spot_prices: dict[tuple[str, str, str], float] = {}
            self.faults: list[Fault] = []
            self.command_outputs: list[tuple[re.Pattern[str], CommandAnswer]] = []
            # Ids the cloud released by itself (auto-release, spot reclaim), in that order.
            self.released: list[str] = []
            self.request_log: list[str] = []  # actions, in arrival order
            from tests.sim.aliyun.ram import RamState  # ram.py imports this module

            self.ram = RamState()  # RAM is global: the account's roles and policies

    # ------------------------------------------------------------------ clock and reaping

    def now(self) -> datetime:
        base = self.frozen_at if self.frozen_at is not None else datetime.now(UTC)
        return base + self.clock_offset

    def advance_clock(self, seconds: float) -> None:
        """Move the emulated time on: Pending instances start, invocations finish, expired
        instances are released; what a test would otherwise sleep for happens at once."""
        if seconds < 0:
            raise invalid("the clock only moves forward")
        with self.lock:
            self.clock_offset += timedelta(seconds=seconds)
            self.reap()
            self.changed.notify_all()

    def freeze_clock(self) -> None:
        """Stop the emulated time where it is: nothing that waits on time (an instance leaving
        Pending, a command finishing, auto-release) happens until `advance_clock`."""
        with self.lock:
            if self.frozen_at is None:
                self.frozen_at = datetime.now(UTC)

    def thaw_clock(self) -> None:
        """Let the emulated time run with the real clock again, from where it stood."""
        with self.lock:
            if self.frozen_at is not None:
                self.clock_offset = self.now() - datetime.now(UTC)
                self.frozen_at = None
                self.changed.notify_all()

    def wait_for(self, predicate: Callable[[], object], timeout: float) -> bool:
        """Block until `predicate()` (evaluated under the lock after every API call or clock
        change) is true, or `timeout` seconds pass; returns whether it became true."""
        with self.changed:
            return bool(self.changed.wait_for(predicate, timeout))

    def notify(self) -> None:
        with self.lock:
            self.changed.notify_all()

    def reap(self) -> None:
        """Release instances whose auto-release time, or spot termination time, has passed."""
        now = self.now()
        for instance in list(self.instances.values()):
            due = [instance.auto_release_time, instance.spot_termination_at]
            if any(moment is not None and moment <= now for moment in due):
                self._release(instance)
                self.released.append(instance.id)

    # ------------------------------------------------------------------ spot reclaim

    def reclaim_spot(self, instance_id: str, *, stop_now: bool = True) -> datetime:
        """Take a Running spot instance back the way ECS does; returns its termination time.

        ECS locks a spot instance it reclaims with OperationLocks.LockReason "Recycling"
        (DescribeInstances shows it; the instance's metadata item instance/spot/termination-time
        gives the moment), then stops and releases it about 5 minutes later:
        https://www.alibabacloud.com/help/en/ecs/user-guide/query-the-interruption-events-of-preemptible-instances
        https://www.alibabacloud.com/help/en/ecs/user-guide/what-is-a-spot-instance ("released
        5 minutes later"). The emulator stops the instance at the notice already, so that a
        watcher sees it lost at once; `settings.spot_release_delay_s` (300 s) later, on the
        emulator's clock, it is released: gone from DescribeInstances, listed in `released`.
        `stop_now=False` keeps it Running (with the lock) through the notice instead, as ECS
        does: the notice is there for a graceful shutdown on the instance itself
        (https://www.alibabacloud.com/help/en/ecs/user-guide/query-the-interruption-events-of-preemptible-instances,
        "Detect and handle preemptible instance interruptions": react by shutting down
        gracefully or persisting data), and the instance goes at its release.
        Test-only control (no ECS action does this): a ValueError for anything ECS would
        not reclaim.
        """
        with self.lock:
            self.reap()
            instance = self.instances.get(instance_id)
            if instance is None:
                raise ValueError(f"reclaim_spot: no instance {instance_id!r}")
            if instance.spot_strategy == "NoSpot":
                raise ValueError(
                    f"reclaim_spot: {instance_id} is not a spot instance (SpotStrategy NoSpot); "
                    "ECS reclaims spot instances only"
                )
            now = self.now()
            if instance.status(now) != "Running" or "Recycling" in instance.lock_reasons:
                raise ValueError(
                    f"reclaim_spot: {instance_id} is {instance.status(now)}"
                    + (", already being reclaimed" if instance.lock_reasons else "")
                    + "; only a Running spot instance can be reclaimed"
                )
            instance.lock_reasons.append("Recycling")
            instance.stopped = stop_now
            instance.spot_termination_at = now + timedelta(
                seconds=self.settings.spot_release_delay_s
            )
            self.changed.notify_all()
            return instance.spot_termination_at

    # ------------------------------------------------------------------ tags

    def tag_target(self, region: str, resource_type: str, resource_id: str) -> dict[str, str]:
        """The tags dict of a taggable resource (ECS TagResources resource types)."""
        kind = resource_type.lower()
        if kind == "instance":
            return self.instance(region, resource_id).tags
        if kind == "securitygroup":
            return self.security_group(region, resource_id).tags
        if kind == "vpc":
            return self.vpc(region, resource_id).tags
        if kind == "vswitch":
            return self.vswitch(region, resource_id).tags
        if kind == "keypair":
            pair = self.key_pairs.get((region, resource_id))
            if pair is None:
                raise not_found("InvalidKeyPair.NotFound", "KeyPairName")
            return pair.tags
        raise invalid(f"The specified ResourceType {resource_type!r} is not supported.")

    # ------------------------------------------------------------------ admin snapshot

    def summary(self) -> dict[str, Any]:
        """A JSON-able view of what exists, for tests and for humans poking the emulator."""
        with self.lock:
            self.reap()
            now = self.now()
            return {
                "now": fmt_time(now),
                "instances": [
                    {
                        "id": i.id,
                        "region": i.region,
                        "zone": i.zone_id,
                        "type": i.spec.name,
                        "status": i.status(now),
                        "spot_strategy": i.spot_strategy,
                        "lock_reasons": list(i.lock_reasons),
                        "spot_termination_time": fmt_time(i.spot_termination_at)
                        if i.spot_termination_at
                        else "",
                        "tags": i.tags,
                        "auto_release_time": fmt_time(i.auto_release_time)
                        if i.auto_release_time
                        else "",
                    }
                    for i in self.instances.values()
                ],
                "disks": sorted(self.disks),
                "security_groups": sorted(self.security_groups),
                "key_pairs": sorted(f"{r}/{n}" for r, n in self.key_pairs),
                "vpcs": sorted(self.vpcs),
                "vswitches": sorted(self.vswitches),
                "deployment_sets": sorted(self.deployment_sets),
                "released": list(self.released),
                "ram": self.ram.summary(),
            }

    def resource_count(self) -> int:
        with self.lock:
            self.reap()
            return sum(
                len(x)
                for x in (
                    self.instances,
                    self.disks,
                    self.security_groups,
                    self.key_pairs,
                    self.vpcs,
                    self.vswitches,
                    self.deployment_sets,
                )
            )
