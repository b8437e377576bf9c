"""The sweeper: find orch's resources in the cloud by tag and destroy the expired ones.

A box leaks when nobody runs `orch down`: a CI job is cancelled, a laptop goes away, the local
state is deleted. Its resources still carry the tags orch puts on everything it creates
(`orch:box`, `orch:expires-at`), so the sweeper works from the cloud's view and needs no local
state at all. Resources are grouped per (cloud, region, box name); a group whose expiry has
passed is destroyed in dependency order (instances; once the cloud has released them, key pairs,
security groups, vSwitches, VPCs); a group with a future expiry, or none, is left alone.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from orchestrator.errors import OrchError, UsageError

CLOUDS = ("aws", "aliyun")
# Deletion order within a box: what holds a resource goes before it.
KIND_ORDER = {"instance": 0, "security_group": 1, "key_pair": 2, "vswitch": 3, "vpc": 4}
# How long to keep retrying a delete that another resource still blocks (DependencyViolation),
# and the longest pause between tries.
DEPENDENCY_RETRY_S = 120.0
DEPENDENCY_PAUSE_S = 10.0


@dataclass
class Resource:
    kind: str  # "instance" | "security_group" | "key_pair" | "vswitch" | "vpc"
    id: str
    name: str
    tags: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "id": self.id, "name": self.name}


class CloudSweeper(Protocol):
    cloud: str

    def list(self, region: str) -> list[Resource]: ...

    def destroy(self, region: str, resources: list[Resource]) -> None: ...


@dataclass
class BoxGroup:
    cloud: str
    region: str
    box: str
    resources: list[Resource]
    expires_at: str | None  # the latest expiry among the resources' tags
    expired: bool
    action: str = "kept"  # "kept" | "destroyed" | "would-destroy" | "failed"
    error: str | None = None
    local_record: str | None = None  # "marked-destroyed" when a local box dir was updated

    def to_dict(self) -> dict[str, Any]:
        return {
            "cloud": self.cloud,
            "region": self.region,
            "box": self.box,
            "expires_at": self.expires_at,
            "expired": self.expired,
            "action": self.action,
            "error": self.error,
            "local_record": self.local_record,
            "resources": [r.to_dict() for r in self.resources],
        }


@dataclass
class SweepReport:
    now: str
    dry_run: bool
    regions: dict[str, list[str]]
    groups: list[BoxGroup] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # cloud -> why

    @property
    def failed(self) -> list[BoxGroup]:
        return [g for g in self.groups if g.action == "failed"]

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for group in self.groups:
            counts[group.action] = counts.get(group.action, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "now": self.now,
            "dry_run": self.dry_run,
            "regions": self.regions,
            "skipped": self.skipped,
            "counts": self.counts(),
            "boxes": [g.to_dict() for g in self.groups],
        }


# ------------------------------------------------------------------------------ expiry


def parse_expiry(text: str) -> datetime | None:
    """orch:expires-at value -> aware datetime; None when empty or unreadable."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def group_resources(
    cloud: str, region: str, resources: list[Resource], now: datetime
) -> list[BoxGroup]:
    by_box: dict[str, list[Resource]] = {}
    for resource in resources:
        box = resource.tags.get("orch:box", "")
        if box:
            by_box.setdefault(box, []).append(resource)
    groups = []
    for box, members in sorted(by_box.items()):
        members.sort(key=lambda r: (KIND_ORDER.get(r.kind, 9), r.id))
        expiries = [e for r in members if (e := parse_expiry(r.tags.get("orch:expires-at", "")))]
        latest = max(expiries) if expiries else None
        groups.append(
            BoxGroup(
                cloud,
                region,
                box,
                members,
                latest.strftime("%Y-%m-%dT%H:%M:%SZ") if latest else None,
                expired=latest is not None and latest < now,
            )
        )
    return groups


# ------------------------------------------------------------------------ cloud adapters


class AwsSweeper:
    cloud = "aws"

    def list(self, region: str) -> list[Resource]:
        from orchestrator.clouds import aws

        return [Resource(r.kind, r.id, r.name, r.tags) for r in aws.list_tagged_resources(region)]

    def destroy(self, region: str, resources: list[Resource]) -> None:
        from orchestrator.clouds import aws

        aws.terminate_instances(region, [r.id for r in resources if r.kind == "instance"])
        for resource in resources:
            if resource.kind == "security_group":
                retry_while_blocked(lambda g=resource.id: aws.delete_security_group(region, g))
            elif resource.kind == "key_pair":
                aws.delete_key_pair(region, resource.name)


class AliyunSweeper:
    """Instances, security groups, key pairs, vSwitches and VPCs by their orch:box tag."""

    cloud = "aliyun"

    def list(self, region: str) -> list[Resource]:
        from orchestrator.clouds import aliyun

        wanted: dict[str, str | None] = {"orch:box": None}
        found = [
            Resource("instance", i.id, i.instance_type, dict(i.tags))
            for i in aliyun.list_tagged_instances(region, wanted)
        ]
        for lister in (
            aliyun.list_tagged_security_groups,
            aliyun.list_tagged_key_pairs,
            aliyun.list_tagged_vswitches,
            aliyun.list_tagged_vpcs,
        ):
            found += [Resource(r.kind, r.id, r.name, dict(r.tags)) for r in lister(region, wanted)]
        return found

    def destroy(self, region: str, resources: list[Resource]) -> None:
        from orchestrator.clouds import aliyun

        def ids(kind: str) -> list[str]:
            return [r.id for r in resources if r.kind == kind]

        instances = ids("instance")
        for instance_id in instances:
            aliyun.release_instance(region, instance_id)
        # Security groups and vSwitches stay busy until ECS has released the instances.
        aliyun.wait_instances_released(region, instances)
        aliyun.delete_key_pairs(region, ids("key_pair"))
        for group_id in ids("security_group"):
            retry_while_blocked(lambda g=group_id: aliyun.delete_security_group(region, g))
        for vswitch_id in ids("vswitch"):
            retry_while_blocked(lambda v=vswitch_id: aliyun.delete_vswitch(region, v))
        for vpc_id in ids("vpc"):
            retry_while_blocked(lambda v=vpc_id: aliyun.delete_vpc(region, v))


def _blocked(code: str) -> bool:
    """An error that goes away once what holds the resource is gone."""
    return code.startswith(("DependencyViolation", "Incorrect")) or code == "OperationConflict"


def retry_while_blocked(
    delete: Callable[[], None],
    timeout_s: float | None = None,
    pause_s: float | None = None,
) -> None:
    """Call `delete` until it stops failing with DependencyViolation (or a busy status).

    A released instance holds its security group and vSwitch for a while, a vSwitch holds its
    VPC; anything else, or the same error after `timeout_s`, is raised.
    """
    timeout_s = DEPENDENCY_RETRY_S if timeout_s is None else timeout_s
    pause_s = DEPENDENCY_PAUSE_S if pause_s is None else pause_s
    deadline = time.monotonic() + timeout_s
    pause = min(1.0, pause_s)
    while True:
        try:
            delete()
            return
        except OrchError as exc:
            if not _blocked(getattr(exc, "code", "")) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, pause_s)


def sweeper_for(cloud: str) -> CloudSweeper:
    if cloud == "aws":
        return AwsSweeper()
    if cloud == "aliyun":
        return AliyunSweeper()
    raise UsageError(f"unknown cloud {cloud!r} (expected aws, aliyun or all)")


# -------------------------------------------------------------------------------- regions


def default_regions(cloud: str) -> list[str]:
    """Every region the catalog prices for this cloud, plus those of local boxes."""
    regions: set[str] = set()
    with contextlib.suppress(OrchError, ImportError):
        from orchestrator.catalog import load_instances

        for instance in load_instances(cloud):
            regions.update(instance.prices)
    with contextlib.suppress(OrchError, ImportError):
        from orchestrator.provision.boxes import list_boxes

        regions.update(b.region for b in list_boxes() if b.cloud == cloud)
    return sorted(regions)


# ---------------------------------------------------------------------------------- sweep


def _mark_local(group: BoxGroup) -> None:
    """A local record of a swept box says destroyed, so `orch status` tells the truth."""
    from orchestrator.provision.boxes import box_exists, box_lock, load_box

    try:
        if not box_exists(group.box):
            return
    except UsageError:  # a tag value that is no valid local box name: no local record
        return
    try:
        with box_lock(group.box, timeout=5):
            box = load_box(group.box)
            if box.cloud != group.cloud or box.region != group.region:
                return  # same name, different box
            box.state = "destroyed"
            box.error = f"destroyed by `orch sweep`: expired at {group.expires_at}"
            box.save()
            group.local_record = "marked-destroyed"
    except OrchError as exc:
        group.local_record = f"not updated: {exc.one_line()}"


def sweep(
    clouds: list[str],
    regions: list[str] | None = None,
    *,
    dry_run: bool = False,
    now: datetime | None = None,
    explicit_cloud: bool = True,
    sweepers: dict[str, CloudSweeper] | None = None,
) -> SweepReport:
    """Find tagged resources in every (cloud, region) and destroy the expired boxes.

    A cloud without credentials is skipped (and reported) unless it was named explicitly.
    """
    now = now or datetime.now(UTC)
    report = SweepReport(now.strftime("%Y-%m-%dT%H:%M:%SZ"), dry_run, {})
    for cloud in clouds:
        sweeper = (sweepers or {}).get(cloud) or sweeper_for(cloud)
        cloud_regions = list(regions) if regions else default_regions(cloud)
        report.regions[cloud] = cloud_regions
        for region in cloud_regions:
            try:
                resources = sweeper.list(region)
            except OrchError as exc:
                if explicit_cloud or "credentials" not in exc.message:
                    raise
                report.skipped[cloud] = exc.one_line()
                break
            for group in group_resources(cloud, region, resources, now):
                report.groups.append(group)
                if not group.expired:
                    continue
                if dry_run:
                    group.action = "would-destroy"
                    continue
                try:
                    sweeper.destroy(region, group.resources)
                except OrchError as exc:
                    group.action, group.error = "failed", exc.one_line()
                    print(f"orch: sweep of {group.box} failed: {group.error}", file=sys.stderr)
                    continue
                group.action = "destroyed"
                _mark_local(group)
    return report
