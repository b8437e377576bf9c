"""A pool's record: its settings and the state of each of its boxes, as one JSON object.

The record is the only shared state: every change is a read, a change and a conditional write
of the whole object (`store.update`, If-Match on the ETag), so two runners never take the same
box and nothing needs a lock server. Functions here are pure: they read and change a record
dict, and the callers write it back.

Box states:
    provisioning  being created by `by` (a lease or a reconcile); not yet usable
    ready         checked, reset, free to lease
    leased        held by `lease` until its `expires_at`
    resetting     being reset by `by` after a lease (wipe, end processes, check again)
    destroying    being destroyed by `by`; with `left_to_starter`, claimed while its box was
                  still being made: the process making it destroys it once `up` ends
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.errors import UsageError

SCHEMA = "orch.pool/v1"
POOL_NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,29}[a-z0-9]|[a-z]")
STATES = ("provisioning", "ready", "leased", "resetting", "destroying")
# Work in flight (provisioning, resetting, destroying) whose owner has said nothing for this
# long is taken to be dead: `reconcile` finishes it (destroys the box).
STALE_WORK_S = 3600.0
# A `destroying` entry claimed while its box was being made: its starter destroys the box.
LEFT_TO_STARTER = "left_to_starter"


def validate_pool_name(name: str) -> str:
    # Box names are NAME-xxxxxx and at most 39 characters (provision.boxes).
    if not isinstance(name, str) or not POOL_NAME_RE.fullmatch(name):
        raise UsageError(
            f"bad pool name {name!r}",
            hint="a lower-case letter first, then at most 30 lower-case letters, digits, '-'",
        )
    return name


def record_key(name: str) -> str:
    return f"pools/{validate_pool_name(name)}/pool.json"


def key_secret(name: str, box: str) -> str:
    """Where a pool box's SSH private key is kept, for lessees on other machines."""
    return f"pools/{validate_pool_name(name)}/keys/{box}"


def now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: object) -> datetime | None:
    """An ISO 8601 moment from the record (UTC when it names no zone); None for anything
    else, an integer or a list included: the record is shared and may be damaged."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def holder_id() -> str:
    """Who is acting: host, pid and a random part (pids repeat across hosts and time)."""
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(3)}"


def new_box_name(pool: str) -> str:
    return f"{pool}-{secrets.token_hex(3)}"


def new_record(
    name: str,
    plan: dict[str, Any],
    *,
    minimum: int,
    maximum: int,
    idle_s: float,
    ttl: str,
    lease_ttl_s: float,
    up: dict[str, Any],
    store_url: str,
) -> dict[str, Any]:
    if not 0 <= minimum <= maximum or not 1 <= maximum <= 64:
        raise UsageError("pool sizes need 0 <= --min <= --max and 1 <= --max <= 64")
    return {
        "schema": SCHEMA,
        "name": validate_pool_name(name),
        "plan": plan,
        "min": minimum,
        "max": maximum,
        "idle_s": idle_s,
        "ttl": ttl,
        "lease_ttl_s": lease_ttl_s,
        "up": up,  # what `orch up` is given for each box: ssh_cidrs, allow_world_ssh, ...
        "store": store_url,
        "created_at": iso(now()),
        "boxes": {},
    }


def check_record(record: dict[str, Any], name: str) -> dict[str, Any]:
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise UsageError(f"pool {name}: not an orch pool record (schema {SCHEMA})")
    if record.get("name") != name or not isinstance(record.get("boxes"), dict):
        raise UsageError(f"pool {name}: the record names another pool or is damaged")
    return record


# ---------------------------------------------------------------------------- box entries


def entry(state: str, by: str | None = None, **extra: Any) -> dict[str, Any]:
    assert state in STATES
    return {"state": state, "since": iso(now()), "by": by, "lease": None, **extra}


def set_state(box: dict[str, Any], state: str, by: str | None = None) -> None:
    assert state in STATES
    box.update(state=state, since=iso(now()), by=by)
    box.pop(LEFT_TO_STARTER, None)  # whoever set this state is to finish it
    if state != "leased":
        box["lease"] = None


def left_to_starter(box: dict[str, Any]) -> bool:
    """Claimed for destruction while its box was being made (claim_destroy): the starter
    destroys the box once `up` ends (pool/members.provision_entry)."""
    return box.get("state") == "destroying" and box.get(LEFT_TO_STARTER) is True


def claim_destroy(box: dict[str, Any], holder: str) -> bool:
    """Claim entry `box` for destruction by `holder`; False when it is left to its starter.

    A box still being made can be known only by the process making it: `up` may not have
    written its record or state yet, and a claimant that found nothing would drop the entry
    while the starter, seeing `destroying`, left the box to the claimant. So an entry still
    `provisioning` becomes `destroying` left to its starter (`by` and `since` kept), as one
    left so already stays; once stale (its starter taken to be dead) the claimant takes it."""
    starting = box.get("state") == "provisioning" or left_to_starter(box)
    if starting and not stale(box):
        box.update(state="destroying", **{LEFT_TO_STARTER: True})
        return False
    set_state(box, "destroying", holder)
    return True


def lease_expired(box: dict[str, Any], at: datetime | None = None) -> bool:
    lease = box.get("lease") or {}
    expires = parse_iso(lease.get("expires_at"))
    return box.get("state") == "leased" and (expires is None or expires <= (at or now()))


def stale(box: dict[str, Any], at: datetime | None = None) -> bool:
    """Work in flight whose owner has been silent for STALE_WORK_S."""
    since = parse_iso(box.get("since"))
    busy = box.get("state") in ("provisioning", "resetting", "destroying")
    return busy and (since is None or (at or now()) - since > timedelta(seconds=STALE_WORK_S))


def usable_until(box: dict[str, Any]) -> datetime | None:
    return parse_iso((box.get("box") or {}).get("expires_at"))


def pick_ready(record: dict[str, Any], lease_ttl_s: float) -> str | None:
    """A ready box that will live through the lease (its TTL), longest-idle first: boxes
    are taken in turn, so a box that sat unused is found and reconciled sooner."""
    horizon = now() + timedelta(seconds=lease_ttl_s)
    ready = [
        (box.get("since") or "", name)
        for name, box in record["boxes"].items()
        if box.get("state") == "ready"
        and (usable_until(box) is None or usable_until(box) > horizon)  # type: ignore[operator]
    ]
    return min(ready)[1] if ready else None


def counted(record: dict[str, Any]) -> int:
    """Boxes that hold (or will hold) a cloud instance: all but those being destroyed."""
    return sum(1 for box in record["boxes"].values() if box.get("state") != "destroying")


def lease_box(record: dict[str, Any], name: str, holder: str, lease_ttl_s: float) -> dict:
    lease = {
        "id": secrets.token_hex(8),
        "holder": holder,
        "taken_at": iso(now()),
        "expires_at": iso(now() + timedelta(seconds=lease_ttl_s)),
    }
    box = record["boxes"][name]
    box.update(state="leased", since=iso(now()), by=None, lease=lease)
    return lease


def idle_cost_per_hour(record: dict[str, Any]) -> float:
    price = float((record.get("plan") or {}).get("choice", {}).get("price_per_hour") or 0.0)
    return sum(price for box in record["boxes"].values() if box.get("state") == "ready")
