"""`orch down NAME --forget`: remove a box's local record once its cloud confirms nothing
carries the box's `orch:box` tag, or, with `force`, when the cloud cannot be asked.

For records that `down` cannot clear: a box whose creation failed before Terraform made
anything, or one whose cloud credentials are gone. What the cloud still lists is never
forgotten: `orch down NAME` destroys it. A forced forget names what may remain, so it can be
found later (`orch sweep` finds it by tag once the cloud can be asked).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable

from orchestrator import clouds
from orchestrator.errors import OrchError
from orchestrator.provision import ssh_alias
from orchestrator.provision.boxes import Box, box_exists, box_lock, load_box, validate_box_name


class StillInCloud(OrchError):
    """The cloud lists resources of the box: forgetting it would leak them."""


def _what_may_remain(box: Box) -> str:
    outputs = box.outputs or {}
    ids = [str(outputs[k]) for k in ("instance_id", "security_group_id") if outputs.get(k)]
    shown = ", ".join(ids) if ids else "anything tagged orch:box=" + box.name
    where = f"{box.cloud} {box.region}"
    state = f"; its Terraform state in {box.state_url} is kept" if box.state_url else ""
    return f"{shown} in {where}{state}"


def forget(name: str, force: bool, warn: Callable[[str], None]) -> Box:
    """Remove box `name`'s record; returns it. StillInCloud when the cloud lists something of
    it; OrchError when the cloud cannot be asked and `force` is not given."""
    validate_box_name(name)
    with box_lock(name):
        if not box_exists(name):
            from orchestrator.provision.teardown import NoSuchBox

            raise NoSuchBox(f"no box named {name!r}", hint="see `orch list`")
        box = load_box(name)
        cloud = clouds.get(clouds.check_name(box.cloud))
        try:
            left = cloud.list_tagged(box.region, box.name)
        except OrchError as exc:  # NoCredentials, an API error, no network
            if not force:
                raise OrchError(
                    f"cannot ask {box.cloud} whether box {name} left anything: {exc.one_line()}",
                    hint="--force forgets the record anyway",
                ) from None
            warn(
                f"forgetting box {name} without asking {box.cloud} ({exc.one_line()}): "
                f"may remain: {_what_may_remain(box)}"
            )
        else:
            if left:
                shown = ", ".join(f"{r.kind} {r.id}" for r in left[:5])
                raise StillInCloud(
                    f"box {name}: {box.cloud} {box.region} still lists {shown}; not forgotten",
                    hint=f"`orch down {name}` destroys it",
                )
        shutil.rmtree(box.directory)
        ssh_alias.remove_alias(name)
        return box
