"""A box name in a state bucket is claimed before anything is applied, so that of two `up`s
of one name from two homes exactly one wins; a claim is given back when `up` created
nothing."""

from __future__ import annotations

import contextlib
import socket
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from orchestrator.errors import OrchError, UsageError
from orchestrator.provision import state_backend
from orchestrator.provision.boxes import Box
from orchestrator.provision.inputs import default_owner

Location = state_backend.StateLocation | None


def claim_new(
    name: str, location: state_backend.StateLocation, owner: str | None, ours: bool = False
) -> str:
    """Check the bucket's permissions, then claim `name` there before anything is applied:
    of two `up`s of one name from two homes, exactly one wins; the other exits 2 at once."""
    region = state_backend.bucket_region(location)
    state_backend.check_permissions(location, name, region)
    claim_id = uuid.uuid4().hex
    claim = {
        "id": claim_id,
        "owner": owner or default_owner(),
        "host": socket.gethostname(),
        "claimed_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    state_backend.claim_name(location, name, region, claim)
    if not ours and state_backend.download_bundle(location, name, region) is not None:
        # A box from before claims existed (bundle, no claim): it is not ours.
        state_backend.release_claim(location, name, region)
        raise UsageError(
            f"box {name} already exists in {location.url}",
            hint=f"`orch down {name} --state {location.url}` first, or choose another --name",
        )
    return claim_id


def claim_again(box: Box, location: state_backend.StateLocation, owner: str | None) -> None:
    """Re-running `up` of a box this home created: its claim must still be ours."""
    region = state_backend.bucket_region(location)
    held = state_backend.read_claim(location, box.name, region)
    if held is None:
        box.claim_id = claim_new(box.name, location, owner, ours=True)
        box.save()
    elif held.get("id") != box.claim_id:
        raise UsageError(
            f"box {box.name} in {location.url} is claimed by another home "
            f"({held.get('owner', '?')} on {held.get('host', '?')})",
            hint=f"`orch down {box.name}` here removes only this home's record",
        )


@contextlib.contextmanager
def give_back_on_failure(location: Location) -> Iterator[Callable[[Box], Box]]:
    """Around `up`: if it fails before `terraform apply` ever ran, it created nothing, so the
    name is given back (claim and bundle) for another home; the local record stays "failed"."""
    held: list[Box] = []

    def hold(box: Box) -> Box:
        held.append(box)
        return box

    try:
        yield hold
    except BaseException:
        if held:
            _release_if_nothing_created(held[0], location)
        raise


def _release_if_nothing_created(box: Box, location: Location) -> None:
    if location is None or box.applied or not box.claim_id:
        return
    with contextlib.suppress(OrchError):
        state_backend.delete_box_objects(location, box.name, state_backend.bucket_region(location))
        box.claim_id = None
        if box.state == "creating":
            box.state, box.error = "failed", "nothing was created"
            box.runner = None
        if box.directory.exists():  # a refused fresh `up` removed its record: keep it gone
            box.save()
