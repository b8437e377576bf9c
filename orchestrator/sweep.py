"""The sweeper: find orch's resources in the cloud by tag and destroy the expired ones.

A box leaks when nobody runs `orch down`: a CI job is cancelled, a laptop goes away, the local
state is deleted. Its resources still carry the tags orch puts on everything it creates
(`orch:box`, `orch:expires-at`), so the sweeper works from the cloud's view and needs no local
state at all. Resources are grouped per (cloud, region, box name); a group whose expiry has
passed is destroyed (instances first, then their security groups and key pairs); a group with
a future expiry, or none, is left alone.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from orchestrator.errors import OrchError, UsageError

CLOUDS = ("aws", "aliyun")
KIND_ORDER = {"instance": 0, "security_group": 1, "key_pair": 2}


@dataclass
class Resource:
    kind: str  # "instance" | "security_group" | "key_pair"
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
                aws.delete_security_group(region, resource.id)
            elif resource.kind == "key_pair":
                aws.delete_key_pair(region, resource.name)


class AliyunSweeper:
    """Instances through orchestrator.clouds.aliyun; security groups and key pairs by tag."""

    cloud = "aliyun"

    def list(self, region: str) -> list[Resource]:
        from orchestrator.clouds import aliyun

        found = [
            Resource("instance", i.id, i.instance_type, dict(i.tags))
            for i in aliyun.list_tagged_instances(region, {"orch:box": None})
        ]
        return found + _aliyun_groups_and_keys(region)

    def destroy(self, region: str, resources: list[Resource]) -> None:
        from orchestrator.clouds import aliyun

        for resource in resources:
            if resource.kind == "instance":
                aliyun.release_instance(region, resource.id)
        _aliyun_delete_groups_and_keys(region, resources)


def _aliyun_tags(item: Any) -> dict[str, str]:
    tags = getattr(getattr(item, "tags", None), "tag", None) or []
    return {t.tag_key: t.tag_value or "" for t in tags}


def _aliyun_groups_and_keys(region: str) -> list[Resource]:
    from alibabacloud_ecs20140526 import models

    from orchestrator.clouds import aliyun

    ecs = aliyun.ecs_client(region)
    found: list[Resource] = []
    token: str | None = None
    while True:  # security groups: token pagination
        request = models.DescribeSecurityGroupsRequest(
            region_id=region,
            tag=[models.DescribeSecurityGroupsRequestTag(key="orch:box")],
            max_results=100,
            next_token=token,
        )
        body = _aliyun_call(
            "DescribeSecurityGroups", lambda r=request: ecs.describe_security_groups(r)
        )
        groups = body.security_groups.security_group if body.security_groups else []
        for group in groups or []:
            found.append(
                Resource(
                    "security_group",
                    group.security_group_id,
                    group.security_group_name or "",
                    _aliyun_tags(group),
                )
            )
        token = body.next_token
        if not token:
            break
    page = 1
    while True:  # key pairs: page-number pagination
        request = models.DescribeKeyPairsRequest(
            region_id=region,
            tag=[models.DescribeKeyPairsRequestTag(key="orch:box")],
            page_number=page,
            page_size=50,
        )
        body = _aliyun_call("DescribeKeyPairs", lambda r=request: ecs.describe_key_pairs(r))
        pairs = (body.key_pairs.key_pair if body.key_pairs else None) or []
        for pair in pairs:
            found.append(
                Resource("key_pair", pair.key_pair_name, pair.key_pair_name, _aliyun_tags(pair))
            )
        if len(pairs) < 50 or page * 50 >= int(body.total_count or 0):
            break
        page += 1
    return found


def _aliyun_delete_groups_and_keys(region: str, resources: list[Resource]) -> None:
    import time

    from alibabacloud_ecs20140526 import models

    from orchestrator.clouds import aliyun

    ecs = aliyun.ecs_client(region)
    for resource in resources:
        if resource.kind != "security_group":
            continue
        request = models.DeleteSecurityGroupRequest(region_id=region, security_group_id=resource.id)
        for attempt in range(30):  # a released instance may hold the group for a while
            try:
                _aliyun_call("DeleteSecurityGroup", lambda r=request: ecs.delete_security_group(r))
                break
            except OrchError as exc:
                code = getattr(exc, "code", "")
                if code == "InvalidSecurityGroupId.NotFound":
                    break
                if code != "DependencyViolation" or attempt == 29:
                    raise
                time.sleep(10)
    names = [r.id for r in resources if r.kind == "key_pair"]
    if names:
        import json

        request = models.DeleteKeyPairsRequest(region_id=region, key_pair_names=json.dumps(names))
        _aliyun_call("DeleteKeyPairs", lambda: ecs.delete_key_pairs(request))


def _aliyun_call(what: str, fn: Callable[[], Any]) -> Any:
    from orchestrator.clouds import aliyun

    return aliyun._call(what, fn).body  # noqa: SLF001 - the Aliyun module's error mapping


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

    with contextlib.suppress(UsageError):
        if not box_exists(group.box):
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
