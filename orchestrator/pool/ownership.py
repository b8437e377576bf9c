"""Is this box really one of the pool's? Asked before a pool resets, destroys or hands out a box.

The pool record is shared, and whoever can write the store can write an entry naming any box
this machine knows (a forged `ready` entry naming an ordinary box made `reconcile` destroy
it). So a pool acts on a box only when both say it is this pool's, in this store:

- the box's own record here: the tags `orch up` rendered for it (terraform.tfvars.json,
  written by this machine, or rebuilt from the pool's state prefix and checked against the
  box's name) carry orch:pool = the pool's name and orch:pool-store = this store;
- the cloud: every resource it lists for the box carries the same two tags.

Anything else is not the pool's: its entry is dropped and reported, and the box is left alone.
"""

from __future__ import annotations

from typing import Any

from orchestrator import jsontext
from orchestrator.clouds.base import POOL_STORE_TAG, POOL_TAG
from orchestrator.errors import OrchError
from orchestrator.provision.boxes import Box


class Unverified(OrchError):
    """The cloud could not say whose the box is: nothing is done to it this time."""


def not_ours(box: Box, pool: str, store_tag: str) -> str | None:
    """Why `box` is not a box of pool `pool` kept in the store whose orch:pool-store tag is
    `store_tag` (None: it is). Raises Unverified when the cloud cannot be asked."""
    from orchestrator import clouds

    expected = {POOL_TAG: pool, POOL_STORE_TAG: store_tag}
    recorded = _rendered_tags(box)
    if any(recorded.get(key) != value for key, value in expected.items()):
        return "its record here does not name this pool and store"
    try:
        cloud = clouds.get(box.cloud)
        listed = cloud.list_tagged(box.region, box.name)
    except OrchError as exc:
        raise Unverified(
            f"cannot tell whether box {box.name} is this pool's: its tags could not be read "
            f"({exc.one_line()}); it was left alone"
        ) from None
    for resource in listed:
        if any(resource.tags.get(key) != value for key, value in expected.items()):
            return f"its {resource.kind} {resource.id} in {cloud.title} is not tagged for it"
    return None


def _rendered_tags(box: Box) -> dict[str, Any]:
    from orchestrator.provision.render import TFVARS_FILE

    try:
        values = jsontext.loads((box.directory / TFVARS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    tags = values.get("tags") if isinstance(values, dict) else None
    return tags if isinstance(tags, dict) else {}
