"""A pool's boxes: started (each in a child `orch pool _provision`), checked and
baselined, found again on another machine (rebuilt from the S3 store), and destroyed; each
slow step between two conditional writes of the pool record (pool/manager.py)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable
from typing import Any, cast

from orchestrator.clouds.base import POOL_STORE_TAG, POOL_TAG
from orchestrator.errors import OrchError
from orchestrator.pool import record as pool_record
from orchestrator.pool.handle import Pool
from orchestrator.pool.ownership import not_ours
from orchestrator.pool.store import NoRecord, store_tag
from orchestrator.provision import launch, teardown
from orchestrator.provision.boxes import Box, box_exists, load_box
from orchestrator.provision.display import ssh_target
from orchestrator.provision.request import SCHEMA as REQUEST_SCHEMA
from orchestrator.provision.request import UpRequest

Say = Callable[[str], None]


def up_request(pool: Pool, data: dict[str, Any], box_name: str) -> UpRequest:
    """The record's launch request for box `box_name`, checked again (the record is shared),
    with the pool's tags and its own expiry. The store tag names where the record was read
    from, never the record's own word for it: a box tagged for another store is not this
    pool's (ownership.not_ours), and would be left running."""
    up = data["up"]
    if up.get("schema") is None:  # a record from before the whole request was kept
        up = {**up, "schema": REQUEST_SCHEMA, "plan": data["plan"], "ttl": data["ttl"]}
    tags = {POOL_TAG: pool.name, POOL_STORE_TAG: store_tag(pool.store)}
    return UpRequest.from_dict({**up, "name": box_name}, extra_tags=tags)


def box_fields(box: Box) -> dict[str, Any]:
    outputs = box.outputs or {}
    user, _ = ssh_target(box)
    return {
        "cloud": box.cloud,
        "region": box.region,
        "instance_type": box.candidate.instance_type,
        "market": box.candidate.market,
        "price_per_hour": box.candidate.price_per_hour,
        "instance_id": outputs.get("instance_id"),
        "public_ip": outputs.get("public_ip"),
        "ssh_user": user,
        "expires_at": box.expires_at,
        "state_url": box.state_url,
    }


def transport(pool: Pool, box: Box):  # noqa: ANN202 - an SshTransport
    from orchestrator.check.transport import resolve_ssh_config
    from orchestrator.run.shell import ssh_transport

    return ssh_transport(box, resolve_ssh_config(pool.ssh_config))


def provision(pool: Pool, box_name: str) -> Box:
    """Create, check and baseline one box whose entry is `provisioning` by this holder."""
    from orchestrator.check.untrusted import printable
    from orchestrator.check.verify import check_box
    from orchestrator.pool.reset import mark_baseline

    data = pool.read()
    request = up_request(pool, data, box_name)
    pool.say(f"pool {pool.name}: starting box {box_name}")
    box = launch.up(request, pool.say, pool.progress).box
    report = check_box(box, ssh_config=pool.ssh_config, timeout=pool.check_timeout)
    if not report.ok:
        problems = "; ".join(printable(c.message) for c in report.failures())
        raise OrchError(f"box {box_name} does not match the pool's plan: {problems}")
    mark_baseline(transport(pool, box))
    if pool.store.kind.shared:
        pool.store.put_secret(pool_record.key_secret(pool.name, box_name), box.key_path.read_text())
    return box


def destroy(pool: Pool, box_name: str, data: dict[str, Any] | None = None) -> bool:
    """Destroy a pool box (its entry is `destroying` or gone), then forget its entry. A box
    that is not this pool's is left alone (False); one whose owner the cloud cannot tell
    (ownership.Unverified), or whose destroy fails or is interrupted, keeps its entry: as
    work left in flight, a later reconcile destroys it again."""
    box = materialize(pool, box_name, data)
    if box is not None:
        teardown.down(box_name, None, pool.say, pool.progress, _forget)
    drop(pool, box_name)
    if pool.store.kind.shared:
        pool.store.delete(pool_record.key_secret(pool.name, box_name))
    return box_name not in pool.foreign


def _forget(record: dict[str, Any], say: Say) -> object:
    """A box's CI runner registration, removed once the box is gone (provision.teardown)."""
    from orchestrator.ci_runner import forget

    return forget(record, say)


def drop(pool: Pool, box_name: str) -> None:
    """Forget a box's entry; with the whole record gone (`pool delete`), it is gone too."""
    with contextlib.suppress(NoRecord):
        pool.change(lambda d: d["boxes"].pop(box_name, None))


def materialize(pool: Pool, box_name: str, data: dict[str, Any] | None = None) -> Box | None:
    """A pool box as this machine can act on it, once its record here and its cloud tags
    both say it is this pool's (else it joins `pool.foreign`). None: nothing is known, or it
    is not this pool's."""
    box = find(pool, box_name, data)
    why = None if box is None else not_ours(box, pool.name, store_tag(pool.store))
    if why is None:
        return box
    if box_name not in pool.foreign:
        pool.foreign[box_name] = why
        pool.say(f"pool {pool.name}: {box_name} is not a box of this pool ({why}): "
                 "dropping its entry and leaving the box alone")  # fmt: skip
    return None


def find(pool: Pool, box_name: str, data: dict[str, Any] | None = None) -> Box | None:
    """This machine's record of a pool box: the local one, or rebuilt from the S3 store (its
    Terraform state bundle, and its key from the pool's secrets). None: nothing is known."""
    if box_exists(box_name):
        return load_box(box_name)
    data = data or pool.read()
    state_url = data["up"].get("state_url")
    if not state_url:
        return None
    from orchestrator.provision import state_backend
    from orchestrator.provision.keys import write_private_key

    try:
        box = teardown.restore_box(state_backend.parse_state_url(state_url), box_name)
    except teardown.NoSuchBox:
        return None
    secret = pool.store.get_secret(pool_record.key_secret(pool.name, box_name))
    if secret:
        write_private_key(box.key_path, secret)
    return box


def start_boxes(pool: Pool, names: list[str]) -> list[str]:
    """Provision boxes in parallel, each in an `orch pool _provision` child (Terraform's
    signal handling needs a main thread of its own); returns those that came up."""
    ssh_config = ["--ssh-config", pool.ssh_config] if pool.ssh_config else []
    codes = _in_children(pool, "_provision", names,
                         [*ssh_config, "--check-timeout", str(pool.check_timeout)])  # fmt: skip
    return [name for name in names if codes[name] == 0]


def destroy_boxes(pool: Pool, names: list[str]) -> tuple[list[str], list[str]]:
    """Destroy boxes whose entries are `destroying`, in parallel, each in an `orch pool
    _destroy` child that checks the box is this pool's again; returns (destroyed, failed).
    A box the child finds is not this pool's is in neither: it joins `pool.foreign`."""
    codes = _in_children(pool, "_destroy", names, [])
    for name in names:
        if codes[name] == NOT_OURS_EXIT:
            pool.foreign.setdefault(name, "not this pool's when its destroy checked again")
    destroyed = [name for name in names if codes[name] == 0]
    return destroyed, [name for name in names if codes[name] not in (0, NOT_OURS_EXIT)]


NOT_OURS_EXIT = 3  # `orch pool _destroy`: the box is not this pool's, and was left alone


def _in_children(pool: Pool, command: str, names: list[str], options: list[str]) -> dict[str, int]:
    """Run `orch pool COMMAND POOL BOX` for every box at once; each box's child's exit code."""
    store = ["--store", pool.store.url] if pool.store.kind.shared else []
    orch = [sys.executable, "-m", "orchestrator", "pool", command, pool.name]
    children = {
        name: subprocess.Popen([*orch, name, *store, *options], stdin=subprocess.DEVNULL)
        for name in names
    }
    return {name: child.wait() for name, child in children.items()}


class _Removed(OrchError):
    """A starting box's entry is gone from the record (provision_entry)."""


_LEFT_TO_US = object()  # provision_entry: the entry was claimed and left to this starter


def provision_entry(
    pool: Pool, box_name: str, *, lease_for: str | None = None, lease_ttl_s: float | None = None
) -> dict | None:
    """Provision the box of a `provisioning` entry; on success make it ready (or leased to
    `lease_for`, returning the lease); on failure destroy what was made and drop the entry
    (kept as `destroying` when that destroy fails, for a later reconcile). A box whose entry
    (or whole record) was removed while it started is destroyed here: nobody else knows of
    it any more, and it would run until its TTL or the sweeper. So is one whose entry was
    claimed for destruction and left to its starter (`pool delete`: record.claim_destroy);
    one claimed by another (a reconcile that took the start for dead) is theirs to destroy."""
    try:
        box = provision(pool, box_name)
    except BaseException as exc:
        pool.say(f"pool {pool.name}: box {box_name} did not come up: {why(exc)}")
        try:
            ours = claim_own_destroy(pool, box_name)
        except NoRecord:
            destroy_removed(pool, box_name)
            raise exc from None
        if ours:
            destroy(pool, box_name)
        raise
    summary = box_fields(box)

    def done(data: dict[str, Any]) -> object:
        entry = data["boxes"].get(box_name)
        if entry is None:
            raise _Removed(f"pool {pool.name}: box {box_name} was removed while it started")
        if pool_record.left_to_starter(entry):  # this process is to destroy it: say so
            pool_record.set_state(entry, "destroying", pool.holder)
            return _LEFT_TO_US
        if entry.get("state") != "provisioning":  # reconcile destroys it
            raise OrchError(
                f"pool {pool.name}: box {box_name} was claimed for destruction while it started"
            )
        entry["box"] = summary
        if lease_for is None:
            pool_record.set_state(entry, "ready")
            return None
        ttl = float(lease_ttl_s or data["lease_ttl_s"])
        return pool_record.lease_box(data, box_name, lease_for, ttl)

    try:
        taken = pool.change(done)[1]
    except (_Removed, NoRecord):
        destroy_removed(pool, box_name)
        raise OrchError(
            f"pool {pool.name}: box {box_name} was removed from the pool while it started; "
            "it was destroyed"
        ) from None
    if taken is not _LEFT_TO_US:
        return cast(dict | None, taken)
    destroy(pool, box_name)
    raise OrchError(
        f"pool {pool.name}: box {box_name} was claimed for destruction while it started; "
        "it was destroyed"
    )


def destroy_removed(pool: Pool, box_name: str) -> None:
    """Destroy box `box_name`, which this process started, once its entry is gone: the same
    `orch down` as `destroy`, without the entry. Nothing here (it was never made, or whoever
    removed the entry destroyed it) is fine; a failed destroy is one line naming the box."""
    pool.say(f"pool {pool.name}: box {box_name} was removed from the pool while it started; "
             "destroying it")  # fmt: skip
    try:
        teardown.down(box_name, None, pool.say, pool.progress, _forget)
    except teardown.NoSuchBox:
        pass
    except OrchError as exc:
        raise OrchError(
            f"pool {pool.name}: box {box_name} was removed from the pool while it started, "
            f"and destroying it failed: {exc.one_line()}",
            exit_code=exc.exit_code,
            hint=f"run `orch down {box_name}`",
        ) from None
    if pool.store.kind.shared:
        pool.store.delete(pool_record.key_secret(pool.name, box_name))


def why(exc: BaseException) -> str:
    return exc.one_line() if isinstance(exc, OrchError) else type(exc).__name__


def claim_own_destroy(pool: Pool, box_name: str) -> bool:
    """After a failed start: whether this starter destroys what it made. Yes while its entry
    is `provisioning` or was left to it (now `destroying` by this holder), or is gone; no
    when another claimed it (a reconcile that took the start for dead destroys it)."""

    def mark(data: dict[str, Any]) -> bool:
        entry = data["boxes"].get(box_name)
        if entry is None:
            return True
        if entry.get("state") != "provisioning" and not pool_record.left_to_starter(entry):
            return False
        pool_record.set_state(entry, "destroying", pool.holder)
        return True

    return bool(pool.change(mark)[1])
