"""`up` for one box: lock the name -> refuse a live box -> key, user data -> for each plan
candidate (choice, then alternatives) and zone: render, init, apply (provision/failover.py
decides what a failure means). A capacity or quota error destroys the partial box and tries
the next zone or candidate; any other error leaves the box "failed" (its directory and state
kept, so `down` can remove what was created and `up` can re-apply).

`up` trusts its UpRequest: `provision/request.py` checked every value before.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from orchestrator import clouds
from orchestrator.errors import OrchError, UsageError
from orchestrator.plan import Candidate
from orchestrator.provision import failover, ssh_alias
from orchestrator.provision.boxes import (
    Box,
    box_directory,
    box_exists,
    box_lock,
    load_box,
    make_private_dir,
)
from orchestrator.provision.claims import claim_again, claim_new, give_back_on_failure
from orchestrator.provision.display import ssh_target
from orchestrator.provision.inputs import default_owner
from orchestrator.provision.quota import within_quota
from orchestrator.provision.render import RenderRequest, render_box
from orchestrator.provision.request import UpRequest, render_request
from orchestrator.provision.steps import (
    Location,
    destroy_or_fail,
    has_resources,
    init,
    publish,
    set_state,
    tell_state_lock,
    terraform_for,
)
from orchestrator.provision.terraform import Interrupted

Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Launched:
    """What `up` launched: the box, the candidate and zone that had capacity, its price."""

    box: Box
    candidate: Candidate
    zone: str  # "" when the module picked the zone and did not say which
    price_per_hour: float | None


def up(request: UpRequest, say: Say, progress: Say | None = None) -> Launched:
    """Create box `request.name` from the first candidate of its plan that launches."""
    name, location = request.name, request.state
    # A cluster the account's vCPU quota cannot hold: refused before the lock or any instance.
    candidates = within_quota(request.plan.candidates(), say)
    user_data_for = _user_data_renderer()
    with box_lock(name), give_back_on_failure(location) as hold:
        fresh = not box_exists(name)
        box = hold(_box_for_up(request, candidates[0]))
        # A re-run: an earlier `up` may have applied, and its state in the bucket holds what
        # it created, so a failure of this run before apply must not give the name back.
        box.applied = not fresh and has_resources(box, location)
        public_key = _ensure_box_files(box, _key_type_for(candidates))
        if has_resources(box, location) and not failover.same_target(box.candidate, candidates[0]):
            # A failed earlier `up` aimed elsewhere: clear it with its own config first.
            say(f"removing what the earlier attempt on {failover.describe(box.candidate)} left")
            destroy_or_fail(box, location, progress)
        box.attempts = []  # what this run tried; earlier runs' failures are history

        def launch(candidate: Candidate, zone: str | None) -> None:
            render = _render_request(request, box, candidate, zone, public_key, user_data_for)
            try:
                _attempt(box, render, location, say, progress)
            except Interrupted:
                set_state(box, "failed", "interrupted", location)
                raise Interrupted(
                    f"interrupted; box {name} is partly created: `orch down {name}` removes it"
                ) from None
            except UsageError:
                # Refused while rendering (before Terraform ran): leave no phantom record.
                if fresh and not has_resources(box, location):
                    shutil.rmtree(box.directory, ignore_errors=True)
                raise

        def clear() -> None:
            set_state(box, "destroying")
            destroy_or_fail(box, location, progress)

        how = failover.Attempts(
            name=name,
            prepare=functools.partial(_with_current_image, say=say),
            launch=launch,
            clear=clear,
            fail=functools.partial(_fail, box, location),
            attempts=box.attempts,
            say=say,
            in_subnet=bool(request.subnet_id),
        )
        candidate, zone = failover.launch_first(candidates, request.avoid_zones, how)
        if request.ssh_alias:
            _write_ssh_alias(box, say)
        where = zone or str((box.outputs or {}).get("availability_zone") or "")
        return Launched(box, candidate, where, candidate.price_per_hour)


def _with_current_image(candidate: Candidate, say: Say) -> Candidate:
    """The candidate with the image its cloud says to boot now (AWS: the newest PyTorch DLAMI,
    clouds/aws/dlami.py); the box record keeps it, so it says which image was used."""
    cloud = clouds.get(candidate.cloud)
    resolved = clouds.resolve_image_of(cloud, candidate.region, candidate.image)
    if resolved is None:
        return candidate
    say(resolved.note)
    return replace(candidate, image=resolved.image)


def _fail(box: Box, location: Location, message: str) -> None:
    set_state(box, "failed", message, location)


def _render_request(
    request: UpRequest,
    box: Box,
    candidate: Candidate,
    zone: str | None,
    public_key: str,
    user_data_for: Callable[[str | None, str, str], str],
) -> RenderRequest:
    section = request.ci_runner.user_data(candidate.ssh_user) if request.ci_runner else ""
    return render_request(
        request,
        candidate,
        public_key=public_key,
        owner=box.owner,
        expires_at=box.expires_at,
        user_data=user_data_for(box.expires_at, candidate.cloud, section),
        backend="s3" if request.state else "local",
        zone=zone,
    )


def _write_ssh_alias(box: Box, say: Say) -> None:
    user, host = ssh_target(box)
    if not host:
        say(f"box {box.name} has no address yet: no ssh_config entry written")
        return
    path = ssh_alias.write_alias(box, host, user)
    say(f"ssh_config entry: `ssh orch-{box.name}` ({path})")


def _attempt(
    box: Box, request: RenderRequest, location: Location, say: Say, progress: Say | None
) -> None:
    """One candidate: render, (publish), init, apply, record the outputs. Raises
    TerraformError or Interrupted with the box left "creating" for the caller to settle."""
    candidate = request.candidate
    box.candidate, box.cloud, box.region = candidate, candidate.cloud, candidate.region
    previous = box.runner
    set_state(box, "creating")
    render_box(box.directory, request)
    # With remote state, publish before applying: if this machine dies mid-apply,
    # `orch down NAME --state ...` elsewhere can still rebuild the box and destroy it.
    publish(box, location)
    say(
        f"creating box {box.name}: {candidate.label} ({candidate.gpu_count}x "
        f"{candidate.gpu}) in {candidate.region}, {candidate.market}"
    )
    terraform = terraform_for(box, progress)
    init(box, terraform, location)
    tell_state_lock(box, previous, location, say)
    box.applied = True
    applied = terraform.apply()
    outputs = applied.outputs()
    box.outputs = outputs if outputs is not None else terraform.output()
    set_state(box, "up", None, location)


def _box_for_up(request: UpRequest, first: Candidate) -> Box:
    name, location = request.name, request.state
    expires_at = request.expires_at_text()
    if box_exists(name):
        box = load_box(name)
        if box.state == "up":
            raise UsageError(
                f"box {name} is already up ({box.candidate.instance_type} in {box.region})",
                hint=f"choose another --name, or `orch down {name}` first",
            )
        if box.state_url != request.state_url:
            where = box.state_url or "local state"
            raise UsageError(
                f"box {name} keeps its state in {where}",
                hint=f"re-run with the same --state, or `orch down {name}` first",
            )
        # Re-running a failed/interrupted box: same key and record, new expiry if asked.
        if expires_at:
            box.expires_at = expires_at
        box.ttl = request.ttl
        if request.ci_runner is not None:
            box.ci_runner = request.ci_runner.record
        if location is not None:
            claim_again(box, location, request.owner)
        return box
    claim_id = claim_new(name, location, request.owner) if location is not None else None
    box = Box(
        name=name,
        directory=make_private_dir(box_directory(name)),
        cloud=first.cloud,
        region=first.region,
        candidate=first,
        state="creating",
        created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        expires_at=expires_at,
        ttl=request.ttl,
        outputs={},
        owner=request.owner or default_owner(),
        state_url=request.state_url,
        claim_id=claim_id,
        ci_runner=request.ci_runner.record if request.ci_runner else None,
    )
    box.save()
    return box


def _key_type_for(candidates: list[Candidate]) -> str:
    """One key for every candidate: ed25519 unless a candidate's cloud takes only another."""
    wanted = {clouds.ssh_key_type_of(clouds.get(c.cloud)) for c in candidates}
    return "ed25519" if wanted == {"ed25519"} else sorted(wanted - {"ed25519"})[0]


def _ensure_box_files(box: Box, key_type: str) -> str:
    from orchestrator.provision.keys import ensure_keypair

    public_key = ensure_keypair(box.key_path, comment=f"orch-{box.name}", key_type=key_type)
    if not box.known_hosts_path.exists():
        fd = os.open(box.known_hosts_path, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
    return public_key


def _user_data_renderer() -> Callable[[str | None, str, str], str]:
    try:
        from orchestrator.provision.userdata import render_user_data
    except ModuleNotFoundError as exc:
        if exc.name == "orchestrator.provision.userdata":
            raise OrchError(
                "orch installation is incomplete: orchestrator.provision.userdata is missing"
            ) from None
        raise
    return render_user_data
