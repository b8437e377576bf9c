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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from orchestrator import clouds
from orchestrator.clouds.base import (
    BOX_TAG,
    EXPIRES_TAG,
    POOL_STORE_TAG,
    POOL_TAG,
    ErrorKind,
    NoCredentials,
    retry_while,
)
from orchestrator.clouds.registry import Cloud
from orchestrator.clouds.values import TaggedResource
from orchestrator.errors import OrchError, UsageError

ALL = "any"  # `orch sweep --cloud any`: every registered cloud
# Deletion order within a box when a cloud lists a box's resources: what holds one goes first.
KIND_ORDER = {
    "instance": 0,
    "security_group": 1,
    "key_pair": 2,
    "elastic_ip": 2,
    "launch_template": 2,
    "placement_group": 2,
    "deployment_set": 2,
    "vswitch": 3,
    "vpc": 4,
    "instance_profile": 5,
    "iam_role": 6,
    "ram_role": 7,
    "ram_policy": 8,
}

Resource = TaggedResource  # what the sweeper groups: the clouds' own value type


def retry_while_blocked(
    delete: Callable[[], None],
    timeout_s: float | None = None,
    pause_s: float | None = None,
) -> None:
    """Call `delete` until it stops failing with a retryable error (DependencyViolation, a busy
    status); anything else, or the same error after `timeout_s`, is raised."""
    retry_while(lambda exc: exc.kind is ErrorKind.RETRYABLE, delete, timeout_s, pause_s)


@dataclass(slots=True)
class BoxGroup:
    cloud: str
    region: str
    box: str
    resources: list[Resource]
    expires_at: str | None  # the latest expiry among the resources' tags
    expired: bool
    action: str = "kept"  # "kept" | "destroyed" | "would-destroy" | "failed"
    error: str | None = None
    reason: str = ""  # why it is (not) reaped, where it is not just its expiry
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
            "reason": self.reason,
            "local_record": self.local_record,
            "resources": [r.to_dict() for r in self.resources],
        }


@dataclass(slots=True)
class SweepReport:
    now: str
    dry_run: bool
    regions: dict[str, list[str]]
    groups: list[BoxGroup] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # cloud -> why

    @property
    def nothing_swept(self) -> bool:
        """No cloud could be asked at all (each was skipped)."""
        return not self.regions and bool(self.skipped)

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
        box = resource.tags.get(BOX_TAG, "")
        if box:
            by_box.setdefault(box, []).append(resource)
    groups = []
    for box, members in sorted(by_box.items()):
        members.sort(key=lambda r: (KIND_ORDER.get(r.kind, 9), r.id))
        expiries = [e for r in members if (e := parse_expiry(r.tags.get(EXPIRES_TAG, "")))]
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


def clouds_for(choice: str) -> list[str]:
    """`--cloud` value -> cloud names ("any": every registered cloud)."""
    if choice == ALL:
        return list(clouds.names())
    return [clouds.check_name(choice, extra=(ALL,))]


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
    cloud_names: list[str],
    regions: list[str] | None = None,
    *,
    dry_run: bool = False,
    now: datetime | None = None,
    sweepers: dict[str, Cloud] | None = None,
) -> SweepReport:
    """Find tagged resources in every (cloud, region) and destroy the expired boxes.

    A cloud without credentials (its `credentials()` finds none, or a listing raises
    NoCredentials) is skipped and reported in `skipped`, named or not: `orch sweep` says so
    and exits 1 when no cloud could be swept. A box whose deletion fails is marked "failed"
    with its error in the report; nothing is printed here.
    """
    now = now or datetime.now(UTC)
    report = SweepReport(now.strftime("%Y-%m-%dT%H:%M:%SZ"), dry_run, {})
    pools: dict[tuple[str, str], dict[str, Any] | None] = {}  # (store, pool) -> record
    for name in cloud_names:
        cloud = (sweepers or {}).get(name) or clouds.get(name)
        missing = _no_credentials(cloud)
        if missing:
            report.skipped[name] = missing
            continue
        cloud_regions = list(regions) if regions else default_regions(name)
        report.regions[name] = cloud_regions
        for region in cloud_regions:
            try:
                resources = cloud.list_tagged(region)
            except NoCredentials as exc:
                report.skipped[name] = f"no credentials ({exc.one_line()})"
                report.regions.pop(name, None)
                break
            for group in group_resources(name, region, resources, now):
                report.groups.append(group)
                if _reap(group, now, pools):
                    _destroy_group(cloud, group, dry_run)
    return report


def _no_credentials(cloud: Cloud) -> str:
    """Why `cloud` cannot be swept for lack of credentials ("" when it has some)."""
    check = getattr(cloud, "credentials", None)
    if check is None:  # a sweeper without the check: its listing says (NoCredentials)
        return ""
    found = check()
    if found.found:
        return ""
    why = "; ".join(part for part in (found.problem, found.hint) if part)
    return "no credentials" + (f" ({why})" if why else "")


def _reap(
    group: BoxGroup, now: datetime, pools: dict[tuple[str, str], dict[str, Any] | None]
) -> bool:
    """Whether the sweeper destroys `group`: an expired box; for a pool box (orch:pool), also
    one whose pool record or entry is gone (nobody will ever lease or destroy it), but never
    one under a lease that has not ended, whatever its expiry.

    The record is read as the pool reads it (pool/entries.py): one that is not a pool's is
    unreadable (kept), a damaged entry is one the pool no longer lists. A pool in a local
    store lives on the machine that made its boxes: elsewhere (no record of the box here) its
    record cannot be read, and a pool of the same name here is another pool."""
    tags = next((r.tags for r in group.resources if r.tags.get(POOL_TAG)), None)
    if tags is None:
        return group.expired
    from orchestrator.pool.entries import entry_problem
    from orchestrator.pool.record import check_record, lease_expired, record_key
    from orchestrator.pool.store import open_store

    pool, store_url = tags[POOL_TAG], tags.get(POOL_STORE_TAG, "local")
    if store_url == "local" and not _made_here(group.box):
        group.reason = f"pool {pool} is kept on another machine (a local store); by its expiry"
        return group.expired
    if (store_url, pool) not in pools:
        try:
            store = open_store(None if store_url == "local" else store_url)
            found = store.read(record_key(pool))
            pools[(store_url, pool)] = None if found is None else check_record(found.data, pool)
        except OrchError as exc:
            group.reason = f"pool {pool}: record unreadable ({exc.one_line()}); kept"
            return False
    record = pools[(store_url, pool)]
    entry = None if record is None else record["boxes"].get(group.box)
    if record is None or entry is None:
        group.reason = f"pool {pool} " + ("is gone" if record is None else "no longer lists it")
        return True
    damaged = entry_problem(pool, group.box, entry)
    if damaged is not None:
        group.reason = f"pool {pool}'s entry is damaged (it {damaged}): no longer listed"
        return True
    if entry["state"] == "leased" and not lease_expired(entry, now):
        group.reason = f"leased from pool {pool} until {entry['lease']['expires_at']}"
        return False
    return group.expired


def _made_here(box: str) -> bool:
    """Whether this machine has a record of box `box` (a tag value: any text)."""
    from orchestrator.provision.boxes import box_exists

    try:
        return box_exists(box)
    except UsageError:
        return False


def _destroy_group(cloud: Cloud, group: BoxGroup, dry_run: bool) -> None:
    if dry_run:
        group.action = "would-destroy"
        return
    try:
        cloud.delete_tagged(group.region, group.resources)
        left = cloud.list_tagged(group.region, group.box)  # the cloud is the truth
    except OrchError as exc:
        group.action, group.error = "failed", exc.one_line()
        return
    if left:
        group.action = "failed"
        group.error = "still in the cloud: " + ", ".join(f"{r.kind} {r.id}" for r in left[:5])
        return
    group.action = "destroyed"
    _mark_local(group)
