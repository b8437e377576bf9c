"""`orch pool`: a warm pool of checked boxes that CI jobs lease, release and share.

Every change to the pool goes through `store.update` on its one record (a conditional write
on the record's ETag), and slow work (Terraform, SSH) happens between two such writes, under
a state that says who is doing it: a box is added as `provisioning` before `up` runs, turned
`leased` (or `ready`) after its check; a released box is `resetting` while it is wiped. So a
crashed worker leaves a named, dated entry that `reconcile` finishes, never a box nobody knows.

Boxes are ordinary orch boxes named POOL-xxxxxx, tagged orch:pool and orch:pool-store. With an
S3 store their Terraform state lives under the same prefix and their SSH key is kept in the
store (server-side encrypted), so a runner on another machine can lease, reach and destroy
them; with the local store they live in this machine's ORCH_HOME.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from orchestrator.clouds.base import POOL_STORE_TAG, POOL_TAG
from orchestrator.errors import EXIT_FAILURE, OrchError, UsageError
from orchestrator.plan import Plan
from orchestrator.pool import entries as pool_entries
from orchestrator.pool import health, members
from orchestrator.pool import record as pool_record
from orchestrator.pool.handle import NoBoxFree, Pool, open_pool
from orchestrator.pool.members import provision, provision_entry
from orchestrator.pool.ownership import Unverified
from orchestrator.pool.store import Conflict, NoRecord, store_tag
from orchestrator.provision.boxes import Box
from orchestrator.provision.display import box_summary

__all__ = ["NoBoxFree", "Pool", "open_pool", "provision", "provision_entry"]
Say = Callable[[str], None]
POLL_S = 2.0


# ------------------------------------------------------------------------------ create


def create(pool: Pool, plan: Plan, settings: dict[str, Any]) -> dict[str, Any]:
    """Write the record (refused when the pool exists), then start --min boxes."""
    store_url = store_tag(pool.store)
    data = pool_record.new_record(pool.name, plan.to_dict(), store_url=store_url, **settings)
    try:
        pool.store.create(pool.key, data)
    except Conflict:
        raise UsageError(
            f"pool {pool.name} already exists in {pool.store.url}",
            hint=f"`orch pool status {pool.name}`, or `orch pool delete {pool.name}`",
        ) from None
    started = top_up(pool)
    return {"pool": pool.name, "store": pool.store.url, "started": started}


# ------------------------------------------------------------------------------ lease


def lease(pool: Pool, wait_s: float, lease_ttl_s: float | None) -> dict[str, Any]:
    """A checked box reserved for the caller: a ready one, else one started now while the
    pool is under --max; otherwise wait for a release until `wait_s` has passed."""
    deadline = time.monotonic() + wait_s
    said_waiting = False
    while True:
        data, outcome = pool.change(lambda d: _take(pool, d, lease_ttl_s))
        if outcome["kind"] == "ready":
            box = _verified_for_lease(pool, outcome["box"], outcome["lease"], data)
            if outcome["box"] in pool.foreign:
                members.drop(pool, outcome["box"])
                continue
            return _lease_answer(pool, data, outcome["box"], outcome["lease"], box)
        if outcome["kind"] == "new":
            pool.say(f"pool {pool.name}: no ready box; starting {outcome['box']} for this lease")
            # The lease TTL counts from the moment the box is ours, after it came up.
            taken = provision_entry(
                pool, outcome["box"], lease_for=pool.holder, lease_ttl_s=outcome["ttl"]
            )
            assert taken is not None
            return _lease_answer(pool, pool.read(), outcome["box"], taken)
        if time.monotonic() >= deadline:
            raise NoBoxFree(
                f"no box free in pool {pool.name} within {wait_s:g} s "
                f"({outcome['leased']} leased, --max {outcome['max']})",
                exit_code=EXIT_FAILURE,
                hint="retry later, raise the pool's --max, or release boxes",
            )
        if not said_waiting:
            pool.say(f"pool {pool.name}: all {outcome['max']} boxes are busy; waiting")
            said_waiting = True
        time.sleep(min(POLL_S * random.uniform(0.5, 1.5), max(0.1, deadline - time.monotonic())))


def _take(pool: Pool, data: dict[str, Any], lease_ttl_s: float | None) -> dict[str, Any]:
    """Within one conditional write: lease a ready box, or add one to start, or say full."""
    ttl = float(lease_ttl_s or data["lease_ttl_s"])
    name = pool_record.pick_ready(data, ttl)
    if name is not None:
        return {"kind": "ready", "box": name,
                "lease": pool_record.lease_box(data, name, pool.holder, ttl)}  # fmt: skip
    if pool_record.counted(data) < int(data["max"]):
        name = pool_record.new_box_name(pool.name)
        data["boxes"][name] = pool_record.entry("provisioning", pool.holder)
        return {"kind": "new", "box": name, "ttl": ttl}
    leased = sum(1 for b in data["boxes"].values() if b.get("state") == "leased")
    return {"kind": "full", "leased": leased, "max": data["max"]}


def _verified_for_lease(pool: Pool, box_name: str, lease: dict, data: dict[str, Any]) -> Box | None:
    """The leased box, once it is known to be this pool's. When it cannot be had here (whose
    it is cannot be told now, its state or key cannot be read from the store, an interrupt),
    nobody will ever learn the lease's id: the lease is undone (the box is ready again) and
    the error raised."""
    try:
        return members.materialize(pool, box_name, data)
    except BaseException:

        def undo(d: dict[str, Any]) -> None:
            entry = d["boxes"].get(box_name)
            if entry is not None and (entry.get("lease") or {}).get("id") == lease["id"]:
                pool_record.set_state(entry, "ready")

        with contextlib.suppress(OrchError):  # the store failing too: the lease runs out
            pool.change(undo)
        raise


def _lease_answer(
    pool: Pool, data: dict[str, Any], box_name: str, lease: dict, box: Box | None = None
) -> dict:
    box = box or members.materialize(pool, box_name, data)
    summary = dict(data["boxes"][box_name].get("box") or {})
    answer = {
        "pool": pool.name,
        "box": box_name,
        "lease_id": lease["id"],
        "lease_expires_at": lease["expires_at"],
        **{k: summary.get(k) for k in ("instance_type", "instance_id", "public_ip", "ssh_user")},
        "box_dir": str(box.directory) if box else None,
    }
    if box is not None:
        answer["ssh_command"] = box_summary(box).get("ssh_command")
    return answer


# ------------------------------------------------------------------------------ release


def release(
    pool: Pool, box_name: str, lease_id: str | None, dirty: bool, force: bool = False
) -> str:
    """Give a leased box back: reset and ready again, or destroyed when dirty or the reset
    fails. Only its lease's holder, or whoever names the lease id, may; or anyone with
    `force`. Returns what became of it."""

    def begin(data: dict[str, Any]) -> None:
        entry = data["boxes"].get(box_name)
        if entry is None or entry.get("state") != "leased":
            raise UsageError(f"box {box_name} is not leased from pool {pool.name}")
        lease = entry["lease"]
        if lease_id and lease["id"] != lease_id:
            raise UsageError(f"box {box_name} is leased under another lease now")
        if not lease_id and lease["holder"] != pool.holder and not force:
            raise UsageError(
                f"box {box_name} is leased by {pool_entries.shown(lease['holder'])} until "
                f"{lease['expires_at']}: releasing it would reset it under its holder",
                hint="pass the lease id `orch pool lease` printed (--lease ID), or --force",
            )
        pool_record.set_state(entry, "destroying" if dirty else "resetting", pool.holder)

    pool.change(begin)
    if dirty:
        pool.say(f"pool {pool.name}: destroying dirty box {box_name}")
        return "destroyed" if members.destroy(pool, box_name) else "dropped: not a box of this pool"
    return _reset_or_destroy(pool, box_name)


def _reset_or_destroy(pool: Pool, box_name: str) -> str:
    from orchestrator.pool.reset import reset_box

    try:
        box = members.materialize(pool, box_name)
        if box is None and box_name in pool.foreign:
            members.drop(pool, box_name)
            return "dropped: not a box of this pool"
        if box is None:
            raise OrchError(f"no record of box {box_name} here or in the pool's state")
        reset_box(box, members.transport(pool, box), pool.ssh_config, min(pool.check_timeout, 300))
    except Unverified:
        raise  # whose box it is cannot be told now: the entry stays, for a later reconcile
    except OrchError as exc:
        failed = f"pool {pool.name}: box {box_name} failed its reset ({exc.one_line()})"
        if not _end_reset(pool, box_name, "destroying"):
            pool.say(f"{failed}; it was claimed meanwhile, and its claimant destroys it")
            return CLAIMED_MEANWHILE
        pool.say(f"{failed}; destroying it")
        members.destroy(pool, box_name)
        return "destroyed"
    return "ready" if _end_reset(pool, box_name, "ready") else CLAIMED_MEANWHILE


CLAIMED_MEANWHILE = "not made ready: the pool is destroying it"


def _end_reset(pool: Pool, box_name: str, state: str) -> bool:
    """Move a box this holder resets to `state` (ready, or destroying by this holder), unless
    someone claimed it meanwhile (`pool delete` sets every entry `destroying`, a reconcile
    takes a reset silent for over an hour for dead): that claim stands, and its claimant
    destroys the box, so a box being destroyed is never leased, nor destroyed twice. An entry
    or record gone means the claimant has destroyed the box already."""

    def end(data: dict[str, Any]) -> bool:
        entry = data["boxes"].get(box_name)
        if entry is None or entry.get("state") != "resetting" or entry.get("by") != pool.holder:
            return False
        pool_record.set_state(entry, state, pool.holder if state == "destroying" else None)
        if state == "ready":
            entry["released_at"] = pool_record.iso(pool_record.now())
        return True

    try:
        return bool(pool.change(end)[1])
    except NoRecord:  # `pool delete` destroyed every box it claimed, this one too
        return False


# ------------------------------------------------------------------------------ status


def status(pool: Pool) -> dict[str, Any]:
    data = pool.read()
    boxes = []
    for name, entry in sorted(data["boxes"].items()):
        summary = entry.get("box") or {}
        lease = entry.get("lease") or {}
        boxes.append(
            {
                "box": name,
                "state": entry.get("state"),
                "since": entry.get("since"),
                "instance_type": summary.get("instance_type"),
                "market": summary.get("market"),
                "public_ip": summary.get("public_ip"),
                "expires_at": summary.get("expires_at"),
                "lease_holder": lease.get("holder"),
                "lease_expires_at": lease.get("expires_at"),
                "lease_expired": pool_record.lease_expired(entry),
            }
        )
    idle = sum(
        float((e.get("box") or {}).get("price_per_hour") or 0.0)
        for e in data["boxes"].values()
        if e.get("state") == "ready"
    )
    return {
        "pool": pool.name,
        "store": pool.store.url,
        "min": data["min"],
        "max": data["max"],
        "idle_s": data["idle_s"],
        "lease_ttl_s": data["lease_ttl_s"],
        "boxes": boxes,
        "idle_cost_per_hour": round(idle, 4),
        "skipped": [{"box": name, "why": why} for name, why in sorted(pool.skipped.items())],
    }


# ------------------------------------------------------------------------------ reconcile


def top_up(pool: Pool) -> list[str]:
    """Add `provisioning` entries up to --min (within --max), then start them in parallel."""

    def add(data: dict[str, Any]) -> list[str]:
        missing = int(data["min"]) - pool_record.counted(data)
        room = int(data["max"]) - pool_record.counted(data)
        names = [pool_record.new_box_name(pool.name) for _ in range(max(0, min(missing, room)))]
        for name in names:
            data["boxes"][name] = pool_record.entry("provisioning", pool.holder)
        return names

    names = pool.change(add)[1]
    return members.start_boxes(pool, names)


def reconcile(pool: Pool) -> dict[str, Any]:
    """Bring the pool back to its shape: recover expired leases (reset, or destroy), replace
    boxes the cloud lost or that fail to answer, finish work whose worker died, retire boxes
    past their usable life or idle beyond --idle above --min, then top up to --min.

    Each box is handled on its own: one that fails is reported under `failed` and the others
    go on. The boxes to destroy are claimed first (`destroying`), then destroyed all at once,
    each in a child of its own, as `delete` does. Damaged entries and boxes that are not this
    pool's are dropped (`dropped`)."""
    actions: dict[str, list[str]] = {
        "lease_recovered": [], "replaced": [], "stale_removed": [], "idle_destroyed": [],
        "expired_destroyed": [], "started": [], "dropped": [], "failed": [],
    }  # fmt: skip
    claimed: dict[str, str] = {}  # box -> the action its destroy counts under
    data = pool.read()
    at = pool_record.now()
    for name, entry in list(data["boxes"].items()):
        _isolated(pool, actions, name, _recover, pool, name, entry, at, actions, claimed)
    for name, why in _ready_to_replace(pool, actions).items():
        _isolated(pool, actions, name, _replace, pool, name, why, claimed)
    claimed.update(dict.fromkeys(_claim_idle(pool), "idle_destroyed"))
    _destroy_claimed(pool, claimed, actions)
    actions["started"] = top_up(pool)
    dropped = {**pool.skipped, **pool.foreign}
    actions["dropped"] = [f"{name} ({why})" for name, why in sorted(dropped.items())]
    return {"pool": pool.name, "actions": actions, **{"boxes": len(pool.read()["boxes"])}}


def _isolated(pool: Pool, actions: dict[str, list[str]], name: str, work: Callable,
              *args: Any) -> None:  # fmt: skip
    """Run one box's reconcile step; a failure is reported and the others go on."""
    from orchestrator.check.untrusted import printable

    try:
        work(*args)
    except OrchError as exc:
        why = printable(exc.one_line(), None)  # it may carry a box's words
        pool.say(f"pool {pool.name}: {name}: {why}")
        actions["failed"].append(f"{name}: {why}")


def _recover(pool: Pool, name: str, entry: dict[str, Any], at: Any, actions: dict,
             claimed: dict[str, str]) -> None:  # fmt: skip
    """An expired lease: take the box back. Work left in flight too long: claim the box for
    destruction."""
    if pool_record.lease_expired(entry, at):
        if _claim(pool, name, "leased", "resetting", expired_lease=True):
            pool.say(f"pool {pool.name}: lease on {name} expired; taking the box back")
            if not _reset_or_destroy(pool, name).startswith("dropped"):
                actions["lease_recovered"].append(name)
    elif pool_record.stale(entry, at) and _claim(
        pool, name, str(entry.get("state")), "destroying", stale=True
    ):
        pool.say(f"pool {pool.name}: {name} was left {entry.get('state')}; destroying it")
        claimed[name] = "stale_removed"


def _ready_to_replace(pool: Pool, actions: dict[str, list[str]]) -> dict[str, str]:
    """Ready box -> why it should go (pool/health.py): first what the record and the cloud
    say, one box at a time, then the SSH probes of the rest, all at once. A box that turns out
    not to be this pool's is dropped here."""
    verdicts: dict[str, str] = {}
    to_probe: dict[str, Any] = {}  # box name -> its SshTransport
    data = pool.read()  # one read for every box's first look, not one each

    def look(name: str) -> None:
        found = health.first_look(pool, name, data)
        if name in pool.foreign:
            members.drop(pool, name)
        elif isinstance(found, str):
            verdicts[name] = found
        else:
            to_probe[name] = members.transport(pool, found)

    for name, entry in list(data["boxes"].items()):
        if entry.get("state") == "ready":
            _isolated(pool, actions, name, look, name)
    return {**verdicts, **health.probe_all(to_probe)}


def _replace(pool: Pool, name: str, why: str, claimed: dict[str, str]) -> None:
    if _claim(pool, name, "ready", "destroying"):
        pool.say(f"pool {pool.name}: {name} {why}; replacing it")
        claimed[name] = "expired_destroyed" if why.startswith("expires") else "replaced"


def _destroy_claimed(pool: Pool, claimed: dict[str, str], actions: dict[str, list[str]]) -> None:
    """Destroy the boxes this reconcile claimed, all at once (members.destroy_boxes). An entry
    with no box of this pool behind it is only dropped, here."""
    boxes: list[str] = []

    def stage(name: str) -> None:  # a box of this pool to destroy, or only an entry to drop
        if members.materialize(pool, name) is not None:
            boxes.append(name)
        elif members.destroy(pool, name):  # nothing to tear down: the entry goes
            actions[claimed[name]].append(name)

    for name in sorted(claimed):
        _isolated(pool, actions, name, stage, name)
    destroyed, failed = members.destroy_boxes(pool, boxes)
    for name in destroyed:
        actions[claimed[name]].append(name)
    for name in failed:
        actions["failed"].append(f"{name}: its destroy failed (its own error is above)")


def _claim(pool: Pool, name: str, state: str, new: str, **why: bool) -> bool:
    """Move a box from `state` to `new` (this holder's work) unless someone got there first."""

    def move(data: dict[str, Any]) -> bool:
        entry = data["boxes"].get(name)
        if entry is None or entry.get("state") != state:
            return False
        if why.get("expired_lease") and not pool_record.lease_expired(entry):
            return False
        if why.get("stale") and not pool_record.stale(entry):
            return False
        pool_record.set_state(entry, new, pool.holder)
        return True

    return bool(pool.change(move)[1])


def _claim_idle(pool: Pool) -> list[str]:
    """Claim (`destroying`) the ready boxes idle beyond --idle, oldest first, down to --min."""

    def pick(data: dict[str, Any]) -> list[str]:
        limit = pool_record.now() - timedelta(seconds=float(data["idle_s"]))
        idle = sorted(
            (entry.get("since") or "", name)
            for name, entry in data["boxes"].items()
            if entry.get("state") == "ready"
            and (pool_record.parse_iso(entry.get("since")) or limit) <= limit
        )
        surplus = max(0, pool_record.counted(data) - int(data["min"]))
        names = [name for _, name in idle[:surplus]]
        for name in names:
            pool_record.set_state(data["boxes"][name], "destroying", pool.holder)
        return names

    names = pool.change(pick)[1]
    for name in names:
        pool.say(f"pool {pool.name}: {name} idle beyond --idle; destroying it")
    return names


# ------------------------------------------------------------------------------ delete


def delete(pool: Pool, force: bool) -> dict[str, Any]:
    """Destroy every box of the pool and its record; then ask the clouds what still carries
    the pool's tag, and delete that too (the cloud is the truth)."""
    data = pool.read()

    def claim_all(d: dict[str, Any]) -> list[str]:
        """Every entry `destroying`, in the write that checks for leases: a box leased since
        `data` was read is seen here, and refused without --force. Returns those this
        holder destroys: a box still being made is its starter's (record.claim_destroy)."""
        leased = [n for n, e in d["boxes"].items() if e.get("state") == "leased"
                  and not pool_record.lease_expired(e)]  # fmt: skip
        if leased and not force:
            raise UsageError(
                f"pool {pool.name} has leased boxes ({', '.join(sorted(leased))})",
                hint="release them, or `orch pool delete --force`",
            )
        return sorted(n for n, e in d["boxes"].items() if pool_record.claim_destroy(e, pool.holder))

    claimed, names = pool.change(claim_all)
    for name in sorted(set(claimed["boxes"]) - set(names)):
        pool.say(f"pool {pool.name}: {name} is still starting; its starter destroys it")
    # Entries with no box of this pool behind them are only dropped; the boxes are destroyed
    # all at once, each in a child of its own (Terraform runs one to a process).
    boxes = [name for name in names if members.materialize(pool, name, data) is not None]
    for name in names:
        if name not in boxes:
            members.destroy(pool, name, data)
    destroyed, failed = members.destroy_boxes(pool, boxes)
    if failed:
        raise OrchError(
            f"pool {pool.name}: {len(failed)} of {len(boxes)} boxes could not be destroyed "
            f"({', '.join(failed)}); the pool record is kept",
            hint=f"run `orch pool delete {pool.name}` again",
        )
    plan = Plan.from_dict(data["plan"])
    targets = {(c.cloud, c.region) for c in plan.candidates()}
    left = _delete_tagged_pool_resources(pool.name, store_tag(pool.store), targets)
    pool.store.delete(pool.key)
    dropped = {**pool.skipped, **pool.foreign}
    return {"pool": pool.name, "destroyed": destroyed, "deleted_by_tag": left,
            "dropped": [f"{name} ({why})" for name, why in sorted(dropped.items())]}  # fmt: skip


def _delete_tagged_pool_resources(
    name: str, store: str, targets: set[tuple[str, str]]
) -> list[str]:
    """Delete what the clouds still list with this pool's tags: its name and this store."""
    from orchestrator import clouds

    def ours(resource: Any) -> bool:
        return resource.tags.get(POOL_TAG) == name and resource.tags.get(POOL_STORE_TAG) == store

    removed: list[str] = []
    for cloud_name, region in sorted(targets):
        cloud = clouds.get(cloud_name)
        found = [r for r in cloud.list_tagged(region) if ours(r)]
        if not found:
            continue
        for box in sorted({r.box for r in found}):
            mine = [r for r in found if r.box == box]
            cloud.delete_tagged(region, mine)
            removed.extend(f"{r.kind} {r.id}" for r in mine)
        still = [r for r in cloud.list_tagged(region) if ours(r)]
        if still:
            raise OrchError(
                f"pool {name}: {cloud.title} still lists "
                f"{', '.join(f'{r.kind} {r.id}' for r in still)} after deleting by tag"
            )
    return removed
