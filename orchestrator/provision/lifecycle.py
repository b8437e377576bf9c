"""`up` and `down` for one box: render, run Terraform, keep the registry, fail over.

up:   lock the name -> refuse a live box -> key, user data, CIDRs -> for each plan candidate
      (choice, then alternatives): render, init, apply; a capacity or quota error destroys the
      partial box and tries the next candidate; any other error leaves the box "failed" (its
      directory and state kept, so `down` can remove what was created and `up` can re-apply).
down: lock the name -> (rebuild the box dir from S3 if this machine has none) -> init,
      destroy -> delete what the cloud still lists with the box's tag (also when destroy
      failed), list again -> delete the remote objects -> delete the box dir. The dir stays
      until the cloud lists nothing of the box (docs/provisioning.md, "What `down`
      guarantees").
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import ipaddress
import json
import os
import re
import shutil
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import clouds
from orchestrator.clouds.identity import BoxIdentity
from orchestrator.errors import OrchError, UsageError
from orchestrator.plan import Candidate, Plan
from orchestrator.plan_validate import SSH_USER_RE, validate_plan
from orchestrator.provision import liveness, ssh_alias, state_backend
from orchestrator.provision.boxes import (
    Box,
    box_directory,
    box_exists,
    box_lock,
    load_box,
    make_private_dir,
    validate_box_name,
)
from orchestrator.provision.render import (
    BACKEND_FILE,
    RENDERED_FILES,
    TFVARS_FILE,
    RenderRequest,
    cloud_runtime_env,
    render_box,
    write_code,
    write_json,
)
from orchestrator.provision.terraform import LOCK_TIMEOUT, Interrupted, Terraform, TerraformError

if TYPE_CHECKING:
    from orchestrator.ci_runner import Registration

Say = Callable[[str], None]

CHECKIP_URL = "https://checkip.amazonaws.com"
MAX_TTL = timedelta(days=30)
MIN_TTL = timedelta(minutes=1)
NO_EXPIRY = "none"  # `--ttl none`: the one spelling of "no expiry" (an empty value is an error)
# The widest --ssh-cidr union allowed without --allow-world-ssh: a /8's worth of IPv4
# addresses. IPv6 blocks are refused outright today (the box modules take IPv4 ingress only);
# the IPv6 figure (a /32's worth) is the rule once they are accepted.
MAX_SSH_ADDRESSES = {4: 2 ** (32 - 8), 6: 2 ** (128 - 32)}


Location = state_backend.StateLocation | None  # where a box's remote state lives, if anywhere


# ------------------------------------------------------------------------------ inputs


def parse_ttl(text: str) -> timedelta:
    """A box lifetime in the one duration format (commands/durations.py); a unit is required."""
    from orchestrator.commands.durations import parse_seconds

    hint = f"use a number and a unit (30m, 2h, 1d), or --ttl {NO_EXPIRY}"
    if not isinstance(text, str) or not text.strip()[-1:].isalpha():
        raise UsageError(f"bad --ttl {text!r}", hint=hint)
    try:
        seconds = parse_seconds(text, "--ttl")
    except UsageError:
        raise UsageError(f"bad --ttl {text!r}", hint=hint) from None
    if seconds < MIN_TTL.total_seconds():
        raise UsageError(f"--ttl {text} is shorter than a minute", hint=hint)
    if seconds > MAX_TTL.total_seconds():
        raise UsageError(f"--ttl {text} is longer than {MAX_TTL.days} days")
    ttl = timedelta(seconds=seconds)
    return ttl


def no_expiry(ttl: str | None) -> bool:
    """Whether `ttl` means "no expiry": not given, or `--ttl none` (never the empty string)."""
    return ttl is None or (isinstance(ttl, str) and ttl.strip().lower() == NO_EXPIRY)


def check_ttl(ttl: str | None) -> None:
    """UsageError unless `ttl` is absent, `none` or a valid lifetime ("" is an error)."""
    if not no_expiry(ttl):
        parse_ttl(ttl)  # type: ignore[arg-type]


def expires_at_for(ttl: str | None, now: datetime | None = None) -> str | None:
    if no_expiry(ttl):
        return None
    moment = (now or datetime.now(UTC)) + parse_ttl(ttl)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def normalise_cidrs(cidrs: list[str], allow_world_ssh: bool) -> list[str]:
    """Validate --ssh-cidr values: IPv4 blocks; the whole internet only when asked for."""
    result: list[str] = []
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for text in cidrs:
        try:
            network = ipaddress.ip_network(text.strip(), strict=False)
        except ValueError:
            raise UsageError(f"bad --ssh-cidr {text!r}: expected e.g. 203.0.113.7/32") from None
        if network.version != 4:
            raise UsageError(f"--ssh-cidr {text!r} is IPv6; give an IPv4 block")
        if network.prefixlen == 0 and not allow_world_ssh:
            raise UsageError(
                f"--ssh-cidr {text} opens SSH to the whole internet",
                hint="add --allow-world-ssh if you really mean it",
            )
        if str(network) not in result:
            result.append(str(network))
            networks.append(network)
    # Judge the union, not each block: 0.0.0.0/1 + 128.0.0.0/1 is the whole internet too.
    for version, limit in MAX_SSH_ADDRESSES.items():
        same = [n for n in networks if n.version == version]
        total = sum(n.num_addresses for n in ipaddress.collapse_addresses(same))  # type: ignore[arg-type]
        if total > limit and not allow_world_ssh:
            prefix = 8 if version == 4 else 32
            raise UsageError(
                f"--ssh-cidr blocks together open SSH to {total:,} addresses "
                f"(more than a /{prefix})",
                hint="narrow them, or add --allow-world-ssh if you really mean it",
            )
    return result


def discover_caller_cidr(timeout: float = 5.0) -> str:
    """This machine's public IPv4 address as a /32, asked of checkip.amazonaws.com."""
    import urllib.request

    try:
        with urllib.request.urlopen(CHECKIP_URL, timeout=timeout) as response:  # noqa: S310
            text = response.read(64).decode("ascii", "replace").strip()
        address = ipaddress.ip_address(text)
    except (OSError, ValueError):
        raise UsageError(
            f"cannot find this machine's public address ({CHECKIP_URL} did not answer)",
            hint="pass --ssh-cidr with the address block allowed to SSH in",
        ) from None
    if address.version != 4:
        raise UsageError(f"public address {address} is IPv6; pass --ssh-cidr with an IPv4 block")
    return f"{address}/32"


def default_owner() -> str:
    explicit = os.environ.get("ORCH_OWNER")
    if explicit:
        return explicit
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def failover_codes(cloud: str | None = None) -> tuple[str, ...]:
    """Capacity and quota codes of `cloud` (of every registered cloud when None), longest
    first so that "QuotaExceed.ElasticQuota" wins over "QuotaExceed"."""
    names = [cloud] if cloud else clouds.names()
    codes = {code for name in names for code in clouds.get(name).failover_codes()}
    return tuple(sorted(codes, key=lambda code: (-len(code), code)))


@functools.cache
def _failover_re(codes: tuple[str, ...]) -> re.Pattern[str]:
    # A code counts only where it stands as a code ("api error Unsupported: ...", "Code: X\n"),
    # so Terraform's own "Unsupported argument" or "Unsupported Terraform Core version" do not.
    return re.compile(
        r"(?<![A-Za-z.])("
        + "|".join(re.escape(code) for code in codes)
        + r")(?=[.:;,\"')\]]|[ \t]*$)",
        re.MULTILINE,
    )


def is_capacity_error(error: TerraformError, cloud: str | None = None) -> str | None:
    """The capacity/quota error code in a Terraform failure, or None."""
    match = _failover_re(failover_codes(cloud)).search(error.text())
    return match.group(1) if match else None


# ------------------------------------------------------------------------------ up


@dataclass(slots=True)
class UpOptions:
    name: str
    ssh_cidrs: list[str]  # already validated (normalise_cidrs / discover_caller_cidr)
    ttl: str | None = None
    allow_world_ssh: bool = False
    state_url: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    spot_max_price: float | None = None
    subnet_id: str | None = None
    owner: str | None = None
    # Zones tried last (a spot box was just reclaimed there: `orch run`'s recovery tries the
    # region's other zones first).
    avoid_zones: tuple[str, ...] = ()
    ssh_alias: bool = False  # write `Host orch-NAME` into the user's ssh_config
    ci_runner: Registration | None = None  # `up --ci-runner`: set by ci_runner.registered
    identity: BoxIdentity = field(default_factory=BoxIdentity)  # the box's own role


def up(plan: Plan, options: UpOptions, say: Say, progress: Say | None = None) -> Box:
    """Create box `options.name` from the first candidate of `plan` that launches."""
    name = validate_box_name(options.name)
    location = state_backend.parse_state_url(options.state_url) if options.state_url else None
    expires_at = expires_at_for(options.ttl)
    # Every plan value is checked before the lock, the box record or any cloud call.
    validate_plan(plan, spot_bid=options.spot_max_price)
    candidates = plan.candidates()
    user_data_for = _user_data_renderer()
    for candidate in candidates:
        _check_values(candidate, options, expires_at)
    with box_lock(name), _give_back_on_failure(location) as hold:
        fresh = not box_exists(name)
        box = hold(_box_for_up(name, candidates[0], location, options, expires_at))
        public_key = _ensure_box_files(box, _key_type_for(candidates))
        if _has_resources(box, location) and not _same_target(box.candidate, candidates[0]):
            # A failed earlier `up` aimed elsewhere: clear it with its own config first.
            say(f"removing what the earlier attempt on {_describe(box.candidate)} left")
            _destroy_or_fail(box, location, progress)
        tried: list[str] = []
        box.attempts = []  # what this run tried; earlier runs' failures are history
        for index, candidate in enumerate(candidates):
            last_candidate = index == len(candidates) - 1
            cloud = clouds.get(candidate.cloud)
            try:
                zones = _zones_to_try(cloud, candidate, options.avoid_zones)
            except clouds.CloudError as exc:  # the stock check: no zone can launch it now
                attempt = _describe(candidate)
                box.attempts.append({**_target(candidate), "error": exc.code or exc.message})
                tried.append(f"{attempt}: {exc.code}")
                if not last_candidate:
                    say(f"{attempt}: {exc.code}; trying the next candidate")
                    continue
                _set_state(box, "failed", exc.message, location)
                raise OrchError(
                    f"no capacity for any plan candidate ({'; '.join(tried)})",
                    hint=f"`orch down {name}` removes what was created",
                ) from None
            candidate = _with_current_image(cloud, candidate, say)
            for zone_index, zone in enumerate(zones):
                request = RenderRequest(
                    name=name,
                    owner=box.owner,
                    candidate=candidate,
                    ssh_public_key=public_key,
                    ssh_ingress_cidrs=options.ssh_cidrs,
                    user_data=user_data_for(
                        box.expires_at, candidate.cloud, _ci_section(options, candidate)
                    ),
                    expires_at=box.expires_at,
                    allow_world_ssh=options.allow_world_ssh,
                    tags=options.tags,
                    backend="s3" if location else "local",
                    spot_max_price=options.spot_max_price,
                    subnet_id=options.subnet_id,
                    zone=zone,
                    identity=options.identity,
                )
                try:
                    _attempt(box, request, location, say, progress)
                    if options.ssh_alias:
                        _write_ssh_alias(box, say)
                    return box
                except TerraformError as exc:
                    code = is_capacity_error(exc, candidate.cloud)
                    attempt = _describe(candidate, zone)
                    box.attempts.append(
                        {**_target(candidate), "zone": zone or "", "error": code or exc.message}
                    )
                    if code:
                        tried.append(f"{attempt}: {code}")
                    # No stock in this zone: the region's other zones first, then the next
                    # candidate. A quota is the account's, whatever the zone.
                    next_zone = (
                        code is not None
                        and cloud.error_kind(code) is clouds.ErrorKind.CAPACITY
                        and zone_index < len(zones) - 1
                    )
                    if code and (next_zone or not last_candidate):
                        where = (
                            f"zone {zones[zone_index + 1]}" if next_zone else "the next candidate"
                        )
                        say(f"{attempt}: {code}; destroying the partial box, trying {where}")
                        _set_state(box, "destroying")
                        _destroy_or_fail(box, location, progress)
                        if next_zone:
                            continue
                        break
                    _set_state(box, "failed", exc.message, location)
                    if code:
                        raise OrchError(
                            f"no capacity for any plan candidate ({'; '.join(tried)})",
                            hint=f"`orch down {name}` removes what was created",
                        ) from None
                    raise OrchError(
                        f"{exc.message}",
                        hint=f"`orch down {name}` removes what was created; `orch up` retries",
                    ) from None
                except Interrupted:
                    _set_state(box, "failed", "interrupted", location)
                    raise Interrupted(
                        f"interrupted; box {name} is partly created: `orch down {name}` removes it"
                    ) from None
                except UsageError:
                    # Refused while rendering (before Terraform ran): leave no phantom record.
                    if fresh and not _has_resources(box, location):
                        shutil.rmtree(box.directory, ignore_errors=True)
                    raise
    raise OrchError("the plan has no candidates")  # pragma: no cover - Plan always has one


def _write_ssh_alias(box: Box, say: Say) -> None:
    user, host = ssh_target(box)
    if not host:
        say(f"box {box.name} has no address yet: no ssh_config entry written")
        return
    path = ssh_alias.write_alias(box, host, user)
    say(f"ssh_config entry: `ssh orch-{box.name}` ({path})")


def _check_values(candidate: Candidate, options: UpOptions, expires_at: str | None) -> None:
    """Let the candidate's cloud map it to module values once, before any cloud call, so that
    what it refuses (a spot bid that rounds to 0, ...) is a usage error with no box record."""
    clouds.get(candidate.cloud).tfvars(
        RenderRequest(
            name=options.name,
            owner=options.owner or "orch",
            candidate=candidate,
            ssh_public_key="",
            ssh_ingress_cidrs=options.ssh_cidrs,
            expires_at=expires_at,
            allow_world_ssh=options.allow_world_ssh,
            tags=options.tags,
            spot_max_price=options.spot_max_price,
            subnet_id=options.subnet_id,
            identity=options.identity,
        )
    )


def _ci_section(options: UpOptions, candidate: Candidate) -> str:
    """The CI runner's user-data section for `candidate`'s login user ("" without one)."""
    return options.ci_runner.user_data(candidate.ssh_user) if options.ci_runner else ""


def _with_current_image(cloud: clouds.Cloud, candidate: Candidate, say: Say) -> Candidate:
    """The candidate with the image its cloud says to boot now (AWS: the newest PyTorch DLAMI,
    clouds/aws/dlami.py); the box record keeps it, so it says which image was used."""
    resolved = clouds.resolve_image_of(cloud, candidate.region, candidate.image)
    if resolved is None:
        return candidate
    say(resolved.note)
    return replace(candidate, image=resolved.image)


def _zones_to_try(
    cloud: clouds.Cloud, candidate: Candidate, avoid: tuple[str, ...] = ()
) -> list[str | None]:
    """The zones to launch `candidate` in, best first: those the cloud says can launch it now,
    `avoid` last; [None] (the module picks) when it cannot tell. Raises CloudError when no
    zone has stock."""
    try:
        zones = cloud.zones_with_stock(
            candidate.region, candidate.instance_type, candidate.market == "spot"
        )
    except clouds.CloudError as exc:
        if exc.kind.fails_over:
            raise
        return [None]  # the stock check itself failed: the launch will tell
    if not zones:
        return [None]
    return sorted(zones, key=lambda zone: zone in avoid)  # stable: the cloud's order otherwise


def _attempt(
    box: Box, request: RenderRequest, location: Location, say: Say, progress: Say | None
) -> None:
    """One candidate: render, (publish), init, apply, record the outputs. Raises
    TerraformError or Interrupted with the box left "creating" for the caller to settle."""
    candidate = request.candidate
    box.candidate, box.cloud, box.region = candidate, candidate.cloud, candidate.region
    previous = box.runner
    _set_state(box, "creating")
    render_box(box.directory, request)
    # With remote state, publish before applying: if this machine dies mid-apply,
    # `orch down NAME --state ...` elsewhere can still rebuild the box and destroy it.
    _publish(box, location)
    say(
        f"creating box {box.name}: {candidate.instance_type} ({candidate.gpu_count}x "
        f"{candidate.gpu}) in {candidate.region}, {candidate.market}"
    )
    terraform = _terraform(box, progress)
    _init(box, terraform, location)
    _tell_state_lock(box, previous, location, say)
    box.applied = True
    applied = terraform.apply()
    outputs = applied.outputs()
    box.outputs = outputs if outputs is not None else terraform.output()
    _set_state(box, "up", None, location)


def _set_state(box: Box, state: str, error: str | None = None, publish: Location = None) -> None:
    """The one place a box's state changes: save the record (and publish it with remote
    state, when `publish` is the box's location)."""
    box.state, box.error = state, error
    if state in ("creating", "destroying"):
        if not box.runner or box.runner.get("pid") != os.getpid():
            box.runner = liveness.this_process("up" if state == "creating" else "down")
    else:
        box.runner = None
    box.save()
    _publish(box, publish)


def _box_for_up(
    name: str,
    first: Candidate,
    location: state_backend.StateLocation | None,
    options: UpOptions,
    expires_at: str | None,
) -> Box:
    state_url = location.url if location else None
    if box_exists(name):
        box = load_box(name)
        if box.state == "up":
            raise UsageError(
                f"box {name} is already up ({box.candidate.instance_type} in {box.region})",
                hint=f"choose another --name, or `orch down {name}` first",
            )
        if box.state_url != state_url:
            where = box.state_url or "local state"
            raise UsageError(
                f"box {name} keeps its state in {where}",
                hint=f"re-run with the same --state, or `orch down {name}` first",
            )
        # Re-running a failed/interrupted box: same key and record, new expiry if asked.
        if expires_at:
            box.expires_at = expires_at
        box.ttl = options.ttl
        if options.ci_runner is not None:
            box.ci_runner = options.ci_runner.record
        if location is not None:
            _claim(box, location, options)
        return box
    claim_id = _claim_new(name, location, options) if location is not None else None
    directory = make_private_dir(box_directory(name))
    box = Box(
        name=name,
        directory=directory,
        cloud=first.cloud,
        region=first.region,
        candidate=first,
        state="creating",
        created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        expires_at=expires_at,
        ttl=options.ttl,
        outputs={},
        owner=options.owner or default_owner(),
        state_url=state_url,
        claim_id=claim_id,
        ci_runner=options.ci_runner.record if options.ci_runner else None,
    )
    box.save()
    return box


def _claim_new(
    name: str, location: state_backend.StateLocation, options: UpOptions, ours: bool = False
) -> str:
    """Check the bucket's permissions, then claim `name` there before anything is applied:
    of two `up`s of one name from two homes, exactly one wins; the other exits 2 at once."""
    import uuid

    region = state_backend.bucket_region(location)
    state_backend.check_permissions(location, name, region)
    claim_id = uuid.uuid4().hex
    claim = {
        "id": claim_id,
        "owner": options.owner or default_owner(),
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


def _claim(box: Box, location: state_backend.StateLocation, options: UpOptions) -> None:
    """Re-running `up` of a box this home created: its claim must still be ours."""
    region = state_backend.bucket_region(location)
    held = state_backend.read_claim(location, box.name, region)
    if held is None:
        box.claim_id = _claim_new(box.name, location, options, ours=True)
        box.save()
    elif held.get("id") != box.claim_id:
        raise UsageError(
            f"box {box.name} in {location.url} is claimed by another home "
            f"({held.get('owner', '?')} on {held.get('host', '?')})",
            hint=f"`orch down {box.name}` here removes only this home's record",
        )


@contextlib.contextmanager
def _give_back_on_failure(location: Location) -> Iterator[Callable[[Box], Box]]:
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


def _target(candidate: Candidate) -> dict[str, str]:
    return {
        "cloud": candidate.cloud,
        "region": candidate.region,
        "instance_type": candidate.instance_type,
        "market": candidate.market,
    }


def _same_target(a: Candidate, b: Candidate) -> bool:
    return _target(a) == _target(b)


def _describe(candidate: Candidate, zone: str | None = None) -> str:
    return f"{candidate.instance_type} {candidate.market} in {zone or candidate.region}"


# ------------------------------------------------------------------------------ down


class NoSuchBox(UsageError):
    """`down` found no record of the box, here or in the --state bucket."""


def down(name: str, state_url: str | None, say: Say, progress: Say | None = None) -> Box:
    """Destroy box `name` and everything it created; returns its last record.

    Ends by asking the box's cloud what still carries its orch:box tag: the cloud is the truth.
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
            say(f"destroying box {name} ({box.candidate.instance_type} in {box.region})")
            previous = box.runner
            _set_state(box, "destroying")
            try:
                tell = functools.partial(_tell_state_lock, box, previous, location, say)
                _destroy(box, location, progress, tell)
            except TerraformError as exc:
                # Terraform cannot refresh or destroy (a broken state, a config the provider
                # now refuses): remove what carries the box's tag directly, through the cloud.
                say(f"Terraform could not destroy box {name} ({exc.message}); deleting by tag")
                _set_state(box, "failed", exc.message)
                _end_on_cloud_truth(box, f"Terraform's destroy failed ({exc.message})")
            except Interrupted:
                _set_state(box, "failed", "interrupted during destroy")
                raise Interrupted(
                    f"interrupted; box {name} is partly destroyed: re-run `orch down {name}`"
                ) from None
            else:
                _end_on_cloud_truth(box, None)
        if box.ci_runner:  # the box is gone: its runner registration goes too (best effort)
            from orchestrator.ci_runner import forget

            forget(box.ci_runner, say)
        if location is not None:
            state_backend.delete_box_objects(location, name, state_backend.bucket_region(location))
        shutil.rmtree(box.directory)
        ssh_alias.remove_alias(name)
        box.state = "destroyed"
        return box


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
            _set_state(box, "failed", f"deleting by tag failed: {exc}")
            raise OrchError(
                f"box {box.name}: deleting {_shown(left)} by tag failed: {exc}",
                hint=f"re-run `orch down {box.name}`",
            ) from None
        left = cloud.list_tagged(box.region, box.name)
    if left:
        why = f" after {destroy_error}" if destroy_error else " after destroy"
        _set_state(box, "failed", f"still in the cloud{why}: {_shown(left)}")
        raise OrchError(
            f"box {box.name}: {box.cloud} still lists {_shown(left)}{why} and deleting by tag",
            hint=f"re-run `orch down {box.name}`, or `orch sweep` once it has expired",
        )


def _shown(resources: list[clouds.TaggedResource]) -> str:
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
        values = json.loads(dict(bundle.get("files") or {})[TFVARS_FILE])
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


# ------------------------------------------------------------------------------ terraform


def _terraform(box: Box, progress: Say | None) -> Terraform:
    def started(pid: int, command: str) -> None:
        # Recorded so `status` can show the live apply (or that its orch is gone).
        if box.runner is not None:
            box.runner.update(
                terraform_pid=pid,
                terraform=command,
                terraform_started=liveness.process_start(pid),
            )
            box.save()

    return Terraform(
        box.directory, env=cloud_runtime_env(box.cloud), progress=progress, on_start=started
    )


def _init(box: Box, terraform: Terraform, location: Location) -> None:
    if location is None:
        terraform.init()
        return
    region = state_backend.bucket_region(location)
    path = box.directory / BACKEND_FILE
    write_json(path, state_backend.backend_config(location, box.name, region))
    terraform.init(backend_config=path)


def _destroy(
    box: Box, location: Location, progress: Say | None, before: Callable[[], None] | None = None
) -> None:
    terraform = _terraform(box, progress)
    _init(box, terraform, location)
    if before is not None:
        before()
    terraform.destroy()


def _tell_state_lock(box: Box, previous: dict | None, location: Location, say: Say) -> None:
    """Before apply/destroy: say who holds Terraform's state lock, instead of waiting silently
    (Terraform waits up to -lock-timeout for it)."""
    orphan = liveness.terraform_alive(previous) if previous else None
    if orphan and not liveness.is_alive(previous or {}):
        say(
            f"waiting for Terraform's state lock of box {box.name}: terraform "
            f"{(previous or {}).get('terraform') or ''} pid {orphan}, left by an orch that is "
            "gone, still holds it"
        )
    if location is None:
        return
    info = state_backend.lock_info(location, box.name, state_backend.bucket_region(location))
    if info is not None:
        say(
            f"waiting for Terraform's state lock of box {box.name}: held by "
            f"{info.get('Who', '?')} ({info.get('Operation', '?')} since "
            f"{info.get('Created', '?')}, lock ID {info.get('ID', '?')}); up to "
            f"{LOCK_TIMEOUT}; a stale lock: see docs/provisioning.md"
        )


def _destroy_or_fail(box: Box, location: Location, progress: Say | None) -> None:
    """Destroy a partial box during `up`; if that fails, leave it "failed" for `down`."""
    try:
        _destroy(box, location, progress)
    except (TerraformError, Interrupted) as exc:
        _set_state(box, "failed", exc.message, location)
        if isinstance(exc, Interrupted):
            raise
        raise OrchError(
            f"could not remove the partial box {box.name}: {exc.message}",
            hint=f"`orch down {box.name}` retries",
        ) from None


def _has_resources(box: Box, location: Location) -> bool:
    """Whether an earlier attempt may have left resources (conservative: any state at all)."""
    if not (box.directory / "main.tf").exists():
        return False
    if location is not None:
        return True  # remote state: ask Terraform (destroy of nothing is cheap enough)
    state = box.directory / "terraform.tfstate"
    return state.exists() and '"mode": "managed"' in state.read_text()


def _publish(box: Box, location: Location) -> None:
    """Store record + rendered module next to the remote state (no-op for local state)."""
    if location is None:
        return
    files = state_backend.collect_files(
        box.directory, [*RENDERED_FILES, TFVARS_FILE, "modules", ".terraform.lock.hcl"]
    )
    state_backend.upload_bundle(
        location,
        box.name,
        state_backend.bucket_region(location),
        {"box": box.to_dict(), "files": files},
    )


def ssh_target(box: Box) -> tuple[str, str | None]:
    """(login user, address) of a box: what its outputs say, else the plan's user; None for an
    address not known yet."""
    outputs = box.outputs or {}
    host = outputs.get("public_ip") or outputs.get("private_ip")
    return str(outputs.get("ssh_user") or box.candidate.ssh_user), str(host) if host else None


def box_summary(box: Box) -> dict[str, object]:
    """The object `orch up --json` prints (and `orch status --json` lists)."""
    outputs = box.outputs or {}
    user, host = ssh_target(box)
    return {
        "name": box.name,
        "state": box.state,
        "cloud": box.cloud,
        "region": box.region,
        "instance_type": box.candidate.instance_type,
        "market": box.candidate.market,
        "gpu": box.candidate.gpu,
        "gpu_count": box.candidate.gpu_count,
        "instance_id": outputs.get("instance_id"),
        "public_ip": outputs.get("public_ip"),
        "private_ip": outputs.get("private_ip"),
        "ssh_user": user,
        "ssh_command": ssh_command(box.key_path, box.known_hosts_path, user, host)
        if host
        else None,  # None too when the record's user or host is not safe to print
        "created_at": box.created_at,
        "expires_at": box.expires_at,
        "ttl": box.ttl,
        "owner": box.owner,
        "state_url": box.state_url,
        "box_dir": str(box.directory),
        "error": box.error,
        "attempts": box.attempts,
        # "creating: terraform apply running, pid N" or "..., but the orch that ran it is gone"
        "activity": liveness.activity(box.name, box.state, box.runner),
    }


def valid_ssh_user(user: object) -> bool:
    return isinstance(user, str) and SSH_USER_RE.fullmatch(user) is not None


def ssh_command(key: Path, known_hosts: Path, user: str, host: str) -> str | None:
    """The command that logs in to the box, or None when the user or host is not safe to print
    (a tampered record): `-l USER -- HOST`, so neither can be read as an ssh option."""
    import shlex

    try:
        address = str(ipaddress.ip_address(str(host)))
    except ValueError:
        return None
    if not valid_ssh_user(user):
        return None
    return shlex.join(
        [
            "ssh",
            "-i",
            str(key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={known_hosts}",
            "-o",
            "StrictHostKeyChecking=accept-new",
            "-l",
            user,
            "--",
            address,
        ]
    )
