"""`down` for one box, and rebuilding a box directory from its state bucket.

down: lock the name -> (rebuild the box dir from S3 if this machine has none) -> init,
      destroy -> delete what the cloud still lists with the box's tag (also when destroy
      failed), list again -> delete the remote objects -> delete the box dir. The dir stays
      until the cloud lists nothing of the box (docs/provisioning.md, "What `down`
      guarantees").
"""

from __future__ import annotations

import functools
import re
import shutil
from collections.abc import Callable
from typing import Any

from orchestrator import clouds, jsontext
from orchestrator.check.untrusted import printable, printable_lines
from orchestrator.clouds.values import TaggedResource
from orchestrator.errors import OrchError, UsageError
from orchestrator.provision import ssh_alias, state_backend
from orchestrator.provision.boxes import (
    Box,
    box_directory,
    box_exists,
    box_lock,
    load_box,
    make_private_dir,
    validate_box_name,
)
from orchestrator.provision.render import TFVARS_FILE, write_code, write_json
from orchestrator.provision.steps import Location, destroy, set_state, tell_state_lock
from orchestrator.provision.terraform import LOCK_TIMEOUT, Interrupted, TerraformError

Say = Callable[[str], None]
# Called once the box is gone with its CI runner record (ci_runner.forget), best effort.
ForgetRunner = Callable[[dict[str, Any], Say], object]


# Terraform's (and OpenTofu's) diagnostic when -lock-timeout passed with the lock still held.
STATE_LOCKED = "Error acquiring the state lock"


class NoSuchBox(UsageError):
    """`down` found no record of the box, here or in the --state bucket."""


def down(
    name: str,
    state_url: str | None,
    say: Say,
    progress: Say | None = None,
    forget_runner: ForgetRunner | None = None,
) -> Box:
    """Destroy box `name` and everything it created; returns its last record.

    Ends by asking the box's cloud what still carries its orch:box tag: the cloud is the truth.
    A CI runner registration of the box is handed to `forget_runner` once the box is gone.
    """
    validate_box_name(name)
    given = state_backend.parse_state_url(state_url) if state_url else None
    with box_lock(name):
        if box_exists(name):
            box = load_box(name)
            if given and box.state_url and box.state_url != given.url:
                raise UsageError(f"box {name} keeps its state in {box.state_url}, not {state_url}")
        elif given is not None:
            box = restore_box(given, name)
            say(f"rebuilt box {name} from {given.url}")
        else:
            raise NoSuchBox(f"no box named {name!r}", hint="see `orch list`")
        location = _location_of(box, given)
        if (box.directory / "main.tf").exists():
            shown = printable(f"{box.candidate.instance_type} in {box.region}", limit=None)
            say(f"destroying box {name} ({shown})")
            previous = box.runner
            set_state(box, "destroying")
            try:
                tell = functools.partial(tell_state_lock, box, previous, location, say)
                destroy(box, location, progress, tell)
            except TerraformError as exc:
                _refuse_while_locked(box, exc)
                # Terraform cannot refresh or destroy (a broken state, a config the provider
                # now refuses): remove what carries the box's tag directly, through the cloud.
                # Terraform's diagnostics quote the cloud's words: escaped, line by line.
                why = printable_lines(exc.message)
                say(f"Terraform could not destroy box {name} ({why}); deleting by tag")
                set_state(box, "failed", exc.message)
                _end_on_cloud_truth(box, f"Terraform's destroy failed ({exc.message})")
            except Interrupted:
                set_state(box, "failed", "interrupted during destroy")
                raise Interrupted(
                    f"interrupted; box {name} is partly destroyed: re-run `orch down {name}`"
                ) from None
            else:
                _end_on_cloud_truth(box, None)
        if box.ci_runner and forget_runner is not None:  # the box is gone: its runner too
            forget_runner(box.ci_runner, say)
        if location is not None:
            state_backend.delete_box_objects(location, name, state_backend.bucket_region(location))
        shutil.rmtree(box.directory)
        ssh_alias.remove_alias(name)
        box.state = "destroyed"
        return box


def _refuse_while_locked(box: Box, exc: TerraformError) -> None:
    """Another Terraform holds the box's state lock (an orphan of a killed orch still
    stopping, another home's apply under --state): it may still create what a listing made now
    would miss, so nothing is deleted by tag and the record stays for a later `down`."""
    if STATE_LOCKED not in exc.text():
        return
    why = f"another Terraform still held the state lock after {LOCK_TIMEOUT}"
    set_state(box, "failed", why)
    raise OrchError(
        f"box {box.name}: {why}; nothing was destroyed or deleted",
        hint=f"re-run `orch down {box.name}` once it is done; a stale lock: docs/provisioning.md",
    )


def _location_of(box: Box, given: Location) -> Location:
    """The box's state location, parsed once (reusing the --state value when it is the same)."""
    if not box.state_url:
        return None
    if given is not None and given.url == box.state_url:
        return given
    return state_backend.parse_state_url(box.state_url)


def _end_on_cloud_truth(box: Box, destroy_error: str | None) -> None:
    """What still carries the box's orch:box tag in its cloud is deleted, then listed again;
    anything still there keeps the box "failed" and is named in the error.

    This catches what Terraform's state never held (an instance whose RunInstances was
    cancelled in flight by Ctrl-C, yet launched) and everything when Terraform cannot run.
    """
    from orchestrator.clouds.base import CloudError

    cloud = clouds.get(box.cloud)
    left = cloud.list_tagged(box.region, box.name)
    if left:
        try:
            cloud.delete_tagged(box.region, left)
        except CloudError as exc:
            set_state(box, "failed", f"deleting by tag failed: {exc}")
            raise OrchError(
                f"box {box.name}: deleting {_shown(left)} by tag failed: {exc}",
                hint=f"re-run `orch down {box.name}`",
            ) from None
        left = cloud.list_tagged(box.region, box.name)
    if left:
        why = f" after {destroy_error}" if destroy_error else " after destroy"
        set_state(box, "failed", f"still in the cloud{why}: {_shown(left)}")
        raise OrchError(
            f"box {box.name}: {box.cloud} still lists {_shown(left)}{why} and deleting by tag",
            hint=f"re-run `orch down {box.name}`, or `orch sweep` once it has expired",
        )


def _shown(resources: list[TaggedResource]) -> str:
    shown = ", ".join(f"{r.kind} {r.id}" for r in resources[:5])
    return shown + (f" and {len(resources) - 5} more" if len(resources) > 5 else "")


def restore_box(location: state_backend.StateLocation, name: str) -> Box:
    """Rebuild a box directory from the bundle stored next to its remote state."""
    region = state_backend.bucket_region(location)
    bundle = state_backend.download_bundle(location, name, region)
    if bundle is None:
        raise NoSuchBox(f"no box named {name!r} in {location.url}")
    # The name is the one typed on the command line; the bundle must agree with it.
    state_backend.verify_bundle(bundle, name, location.url)
    record = dict(bundle["box"])
    _check_against_state(location, name, region, record)
    directory = make_private_dir(box_directory(name))
    box = Box.from_dict(record, directory)
    box.name, box.runner, box.claim_id = name, None, None
    if box.ci_runner:  # the bucket's word: `down` sends a token only to a default API then
        box.ci_runner = {**box.ci_runner, "from_bundle": True}
    # Whoever can write the bucket controls the bundle: take only data from it (the tfvars),
    # and render the code that Terraform will run from this installation.
    try:
        values = jsontext.loads(dict(bundle.get("files") or {})[TFVARS_FILE])
    except (KeyError, TypeError, ValueError):
        values = None
    if not isinstance(values, dict):
        raise OrchError(f"the bundle of box {name} in {location.url} has no usable {TFVARS_FILE}")
    write_json(directory / TFVARS_FILE, values)
    write_code(directory, box.cloud, "s3")
    box.state_url = location.url
    box.save()
    return box


def _check_against_state(
    location: state_backend.StateLocation, name: str, region: str, record: dict
) -> None:
    """The bundle's region and cloud must be those of what Terraform's state holds: a bundle
    edited consistently would otherwise destroy nothing (another region, another provider)
    and delete the real state."""
    from orchestrator.provision.render import render_hcl

    zones, providers = state_backend.state_facts(location, name, region)
    where = f"the bundle of box {name} in {location.url}"
    stray = sorted(zone for zone in zones if not zone.startswith(str(record["region"])))
    if stray:
        raise UsageError(
            f"{where} says region {record['region']}, but its state holds resources in "
            f"{', '.join(stray)}; nothing was destroyed or deleted"
        )
    main_tf = render_hcl(str(record["cloud"]), "s3")["main.tf"]
    sources = set(re.findall(r'source\s*=\s*"([\w.-]+/[\w.-]+)"', main_tf))
    if providers - sources:
        raise UsageError(
            f"{where} says cloud {record['cloud']}, but its state holds resources of "
            f"{', '.join(sorted(providers - sources))}; nothing was destroyed or deleted"
        )
