"""`up` and `down` for one box: render, run Terraform, keep the registry, fail over.

up:   lock the name -> refuse a live box -> key, user data, CIDRs -> for each plan candidate
      (choice, then alternatives): render, init, apply; a capacity or quota error destroys the
      partial box and tries the next candidate; any other error leaves the box "failed" (its
      directory and state kept, so `down` can remove what was created and `up` can re-apply).
down: lock the name -> (rebuild the box dir from S3 if this machine has none) -> init,
      destroy -> delete the remote objects -> delete the box dir. The dir stays until destroy
      succeeds.
"""

from __future__ import annotations

import functools
import getpass
import ipaddress
import json
import os
import re
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator import clouds
from orchestrator.errors import OrchError, UsageError
from orchestrator.plan import Candidate, Plan
from orchestrator.provision import state_backend
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
from orchestrator.provision.terraform import Interrupted, Terraform, TerraformError

Say = Callable[[str], None]

CHECKIP_URL = "https://checkip.amazonaws.com"
MAX_TTL = timedelta(days=30)
_TTL_RE = re.compile(r"^\s*(\d+)\s*([mhd])\s*$")
_TTL_UNITS = {"m": "minutes", "h": "hours", "d": "days"}

Location = state_backend.StateLocation | None  # where a box's remote state lives, if anywhere


# ------------------------------------------------------------------------------ inputs


def parse_ttl(text: str) -> timedelta:
    match = _TTL_RE.match(text or "")
    if not match or int(match.group(1)) == 0:
        raise UsageError(
            f"bad --ttl {text!r}", hint="use a number and a unit m, h or d: 30m, 2h, 1d"
        )
    ttl = timedelta(**{_TTL_UNITS[match.group(2)]: int(match.group(1))})
    if ttl > MAX_TTL:
        raise UsageError(f"--ttl {text} is longer than {MAX_TTL.days} days")
    return ttl


def expires_at_for(ttl: str | None, now: datetime | None = None) -> str | None:
    if not ttl:
        return None
    moment = (now or datetime.now(UTC)) + parse_ttl(ttl)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def normalise_cidrs(cidrs: list[str], allow_world_ssh: bool) -> list[str]:
    """Validate --ssh-cidr values: IPv4 blocks; the whole internet only when asked for."""
    result = []
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


@dataclass
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


def up(plan: Plan, options: UpOptions, say: Say, progress: Say | None = None) -> Box:
    """Create box `options.name` from the first candidate of `plan` that launches."""
    name = validate_box_name(options.name)
    location = state_backend.parse_state_url(options.state_url) if options.state_url else None
    expires_at = expires_at_for(options.ttl)
    candidates = plan.candidates()
    user_data_for = _user_data_renderer()
    for candidate in candidates:
        _check_values(candidate, options, expires_at)
    with box_lock(name):
        box = _box_for_up(name, candidates[0], location, options, expires_at)
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
                zones = _zones_to_try(cloud, candidate)
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
            for zone_index, zone in enumerate(zones):
                request = RenderRequest(
                    name=name,
                    owner=box.owner,
                    candidate=candidate,
                    ssh_public_key=public_key,
                    ssh_ingress_cidrs=options.ssh_cidrs,
                    user_data=user_data_for(box.expires_at, candidate.cloud),
                    expires_at=box.expires_at,
                    allow_world_ssh=options.allow_world_ssh,
                    tags=options.tags,
                    backend="s3" if location else "local",
                    spot_max_price=options.spot_max_price,
                    subnet_id=options.subnet_id,
                    zone=zone,
                )
                try:
                    _attempt(box, request, location, say, progress)
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
    raise OrchError("the plan has no candidates")  # pragma: no cover - Plan always has one


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
        )
    )


def _zones_to_try(cloud: clouds.Cloud, candidate: Candidate) -> list[str | None]:
    """The zones to launch `candidate` in, best first: those the cloud says can launch it now;
    [None] (the module picks) when it cannot tell. Raises CloudError when no zone has stock."""
    try:
        zones = cloud.zones_with_stock(
            candidate.region, candidate.instance_type, candidate.market == "spot"
        )
    except clouds.CloudError as exc:
        if exc.kind.fails_over:
            raise
        return [None]  # the stock check itself failed: the launch will tell
    return list(zones) if zones else [None]


def _attempt(
    box: Box, request: RenderRequest, location: Location, say: Say, progress: Say | None
) -> None:
    """One candidate: render, (publish), init, apply, record the outputs. Raises
    TerraformError or Interrupted with the box left "creating" for the caller to settle."""
    candidate = request.candidate
    box.candidate, box.cloud, box.region = candidate, candidate.cloud, candidate.region
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
    applied = terraform.apply()
    outputs = applied.outputs()
    box.outputs = outputs if outputs is not None else terraform.output()
    _set_state(box, "up", None, location)


def _set_state(box: Box, state: str, error: str | None = None, publish: Location = None) -> None:
    """The one place a box's state changes: save the record (and publish it with remote
    state, when `publish` is the box's location)."""
    box.state, box.error = state, error
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
        return box
    if location is not None:
        region = state_backend.bucket_region(location)
        if state_backend.download_bundle(location, name, region) is not None:
            raise UsageError(
                f"box {name} already exists in {location.url}",
                hint=f"`orch down {name} --state {location.url}` first, or choose another --name",
            )
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
        outputs={},
        owner=options.owner or default_owner(),
        state_url=state_url,
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


def _user_data_renderer() -> Callable[[str | None, str], str]:
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
            raise UsageError(f"no box named {name!r}", hint="see `orch list`")
        location = _location_of(box, given)
        if (box.directory / "main.tf").exists():
            say(f"destroying box {name} ({box.candidate.instance_type} in {box.region})")
            _set_state(box, "destroying")
            try:
                _destroy(box, location, progress)
            except TerraformError as exc:
                _set_state(box, "failed", exc.message)
                raise OrchError(
                    f"destroying box {name} failed: {exc.message}",
                    hint=f"its directory {box.directory} is kept; re-run `orch down {name}`",
                ) from None
            except Interrupted:
                _set_state(box, "failed", "interrupted during destroy")
                raise Interrupted(
                    f"interrupted; box {name} is partly destroyed: re-run `orch down {name}`"
                ) from None
            _confirm_gone(box)
        if location is not None:
            state_backend.delete_box_objects(location, name, state_backend.bucket_region(location))
        shutil.rmtree(box.directory)
        box.state = "destroyed"
        return box


def _location_of(box: Box, given: Location) -> Location:
    """The box's state location, parsed once (reusing the --state value when it is the same)."""
    if not box.state_url:
        return None
    if given is not None and given.url == box.state_url:
        return given
    return state_backend.parse_state_url(box.state_url)


def _confirm_gone(box: Box) -> None:
    """Ask the cloud what still carries the box's tag; anything left keeps the box "failed"."""
    left = clouds.get(box.cloud).list_tagged(box.region, box.name)
    if left:
        shown = ", ".join(f"{r.kind} {r.id}" for r in left[:5])
        _set_state(box, "failed", f"still in the cloud after destroy: {shown}")
        raise OrchError(
            f"Terraform destroyed box {box.name}, but {box.cloud} still lists {shown}",
            hint=f"re-run `orch down {box.name}`, or `orch sweep` once it has expired",
        )


def restore_box(location: state_backend.StateLocation, name: str) -> Box:
    """Rebuild a box directory from the bundle stored next to its remote state."""
    region = state_backend.bucket_region(location)
    bundle = state_backend.download_bundle(location, name, region)
    if bundle is None:
        raise UsageError(f"no box named {name!r} in {location.url}")
    directory = make_private_dir(box_directory(name))
    box = Box.from_dict(dict(bundle.get("box") or {}), directory)
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


# ------------------------------------------------------------------------------ terraform


def _terraform(box: Box, progress: Say | None) -> Terraform:
    return Terraform(box.directory, env=cloud_runtime_env(box.cloud), progress=progress)


def _init(box: Box, terraform: Terraform, location: Location) -> None:
    if location is None:
        terraform.init()
        return
    region = state_backend.bucket_region(location)
    path = box.directory / BACKEND_FILE
    write_json(path, state_backend.backend_config(location, box.name, region))
    terraform.init(backend_config=path)


def _destroy(box: Box, location: Location, progress: Say | None) -> None:
    terraform = _terraform(box, progress)
    _init(box, terraform, location)
    terraform.destroy()


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


def box_summary(box: Box) -> dict[str, object]:
    """The object `orch up --json` prints (and `orch status --json` lists)."""
    outputs = box.outputs or {}
    user = outputs.get("ssh_user") or box.candidate.ssh_user
    host = outputs.get("public_ip") or outputs.get("private_ip")
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
        else None,
        "created_at": box.created_at,
        "expires_at": box.expires_at,
        "owner": box.owner,
        "state_url": box.state_url,
        "box_dir": str(box.directory),
        "error": box.error,
        "attempts": box.attempts,
    }


def ssh_command(key: Path, known_hosts: Path, user: str, host: str) -> str:
    import shlex

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
            f"{user}@{host}",
        ]
    )
