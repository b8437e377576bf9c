"""Checks of a pool record as read from its store, before anything acts on it.

The record is shared: whoever can write the store (a local folder, an S3 prefix) can write
anything into it. So every setting and every box entry is checked here first:

- a damaged setting (`min` a string, a negative `max`, a `lease_ttl_s` of "soon") makes the
  whole record unusable: one line, exit 2, naming the field;
- a damaged entry (not an object, an unknown state, an integer `since`, a lease without an
  expiry, a name that is not POOL-xxxxxx) is skipped and reported; the other entries are
  used as usual, and the next write of the record leaves the damaged ones out. A box whose
  entry is dropped is still found by `orch sweep` (its pool no longer lists it) and powers
  itself off at its expiry.
"""

from __future__ import annotations

import math
import re
from typing import Any

from orchestrator.errors import UsageError
from orchestrator.pool import record as pool_record

# The bounds `orch pool create` enforces (orchestrator/commands/pool.py).
MAX_BOXES = 64
DAY_S = 86400.0
DURATIONS = {"idle_s": (60.0, 30 * DAY_S), "lease_ttl_s": (60.0, 7 * DAY_S)}
_SUMMARY_TEXT = ("cloud", "region", "instance_type", "market", "instance_id", "public_ip",
                 "ssh_user", "expires_at", "state_url")  # fmt: skip


def shown(value: Any) -> str:
    """A value from the record, safe and short for a one-line message."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check(data: dict[str, Any], name: str) -> dict[str, str]:
    """Check pool `name`'s record (UsageError for a damaged one) and remove its damaged
    entries; returns {shown name: why} of those removed."""
    pool_record.check_record(data, name)
    check_settings(data, name)
    return drop_damaged(data, name)


def check_settings(data: dict[str, Any], name: str) -> None:
    """UsageError (exit 2) naming the first damaged setting of pool `name`'s record."""

    def damaged(why: str) -> UsageError:
        return UsageError(
            f"pool {name}: the record is damaged: {why}",
            hint=f"fix pools/{name}/pool.json in the store, or `orch pool delete {name}`",
        )

    sizes = {}
    for key in ("min", "max"):
        value = data.get(key)
        if not _whole(value) or not 0 <= value <= MAX_BOXES:
            raise damaged(f"{key} {shown(value)} is not a whole number from 0 to {MAX_BOXES}")
        sizes[key] = value
    if sizes["min"] > sizes["max"] or sizes["max"] < 1:
        raise damaged(f"min {sizes['min']} and max {sizes['max']} need 0 <= min <= max, max >= 1")
    for key, (low, high) in DURATIONS.items():
        value = data.get(key)
        if not _number(value) or not low <= value <= high:
            raise damaged(f"{key} {shown(value)} is not a number of seconds ({low:g} to {high:g})")
    for key, kind in (("ttl", str), ("store", str), ("plan", dict), ("up", dict)):
        if not isinstance(data.get(key), kind):
            raise damaged(f"{key} {shown(data.get(key))} is not a {kind.__name__}")


def entry_problem(pool: str, name: Any, entry: Any) -> str | None:
    """Why box entry `name` of pool `pool` cannot be used (None: it can)."""
    if not isinstance(name, str) or not re.fullmatch(rf"{re.escape(pool)}-[0-9a-f]{{6}}", name):
        return f"is not a box name of pool {pool}"
    if not isinstance(entry, dict):
        return f"is not an object but {type(entry).__name__}"
    state = entry.get("state")
    if state not in pool_record.STATES:
        return f"has an unknown state {shown(state)}"
    if not _moment(entry.get("since")):
        return f"has a bad since {shown(entry.get('since'))}"
    for key in ("by", "released_at"):
        if entry.get(key) is not None and not isinstance(entry.get(key), str):
            return f"has a bad {key} {shown(entry.get(key))}"
    lease = entry.get("lease")
    if state == "leased" or lease is not None:
        why = _lease_problem(lease)
        if why:
            return why
    return _summary_problem(entry.get("box"))


def drop_damaged(data: dict[str, Any], pool: str) -> dict[str, str]:
    """Remove the damaged entries from `data["boxes"]`; {shown name: why} of those removed."""
    dropped = {}
    for name, entry in list(data["boxes"].items()):
        why = entry_problem(pool, name, entry)
        if why is not None:
            del data["boxes"][name]
            dropped[shown(name).strip("'")] = why
    return dropped


def _lease_problem(lease: Any) -> str | None:
    if not isinstance(lease, dict):
        return f"has a bad lease {shown(lease)}"
    for key in ("id", "holder"):
        value = lease.get(key)
        # Shown to people (`status`, `release`): printable text only, never escapes.
        if not isinstance(value, str) or not value.isprintable() or not 0 < len(value) <= 200:
            return f"has a lease with a bad {key} {shown(value)}"
    if not _moment(lease.get("expires_at")):
        return f"has a lease with a bad expires_at {shown(lease.get('expires_at'))}"
    return None


def _summary_problem(summary: Any) -> str | None:
    if summary is None:
        return None
    if not isinstance(summary, dict):
        return f"has a bad box summary {shown(summary)}"
    for key in _SUMMARY_TEXT:
        value = summary.get(key)
        # Shown to people as text (`status`): printable and short, as a lease's holder.
        if value is not None and not (
            isinstance(value, str) and value.isprintable() and len(value) <= 200
        ):
            return f"has a bad box {key} {shown(value)}"
    if summary.get("expires_at") is not None and not _moment(summary["expires_at"]):
        return f"has a bad box expires_at {shown(summary['expires_at'])}"
    price = summary.get("price_per_hour")
    if price is not None and (not _number(price) or price < 0):
        return f"has a bad box price_per_hour {shown(price)}"
    return None


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _moment(value: Any) -> bool:
    return isinstance(value, str) and pool_record.parse_iso(value) is not None
