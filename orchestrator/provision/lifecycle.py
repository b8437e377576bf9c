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

# Error codes that mean "this instance type/market/zone cannot be had right now": try the next
# candidate. AWS EC2 codes first, then Aliyun ECS ones (the same failover serves both clouds).
CAPACITY_ERROR_CODES = (
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "MaxSpotInstanceCountExceeded",
    "SpotMaxPriceTooLow",
    "InvalidSpotPriceLimit.LowerThanPublicPrice",
    "InsufficientFreeAddressesInSubnet",
    "Unsupported",
    "UnsupportedOperation",
    "OperationDenied.NoStock",
    "Zone.NotOnSale",
    "InvalidResourceType.NotSupported",
    "InvalidInstanceType.NotSupported",
    "QuotaExceed",
)
# A code counts only where it stands as a code ("api error Unsupported: ...", "Code: X\n"), so
# Terraform's own "Unsupported argument" or "Unsupported Terraform Core version" do not.
_CAPACITY_RE = re.compile(
    r"(?<![A-Za-z.])("
    + "|".join(re.escape(code) for code in CAPACITY_ERROR_CODES)
    + r")(?=[.:;,\"')\]]|[ \t]*$)",
    re.MULTILINE,
)


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


def is_capacity_error(error: TerraformError) -> str | None:
    """The capacity/quota error code in a Terraform failure, or None."""
    match = _CAPACITY_RE.search(error.text())
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
    with box_lock(name):
        box = _box_for_up(name, candidates[0], location, options, expires_at)
        public_key = _ensure_box_files(box)
        if _has_resources(box) and not _same_target(box.candidate, candidates[0]):
            # A failed earlier `up` aimed elsewhere: clear it with its own config first.
            say(f"removing what the earlier attempt on {_describe(box.candidate)} left")
            _destroy_or_fail(box, progress)
        tried: list[str] = []
        box.attempts = []  # what this run tried; earlier runs' failures are history
        for index, candidate in enumerate(candidates):
            last = index == len(candidates) - 1
            box.candidate, box.cloud, box.region = candidate, candidate.cloud, candidate.region
            box.state, box.error = "creating", None
            box.save()
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
            )
            render_box(box.directory, request)
            # With remote state, publish before applying: if this machine dies mid-apply,
            # `orch down NAME --state ...` elsewhere can still rebuild the box and destroy it.
            _publish(box)
            say(
                f"creating box {name}: {candidate.instance_type} ({candidate.gpu_count}x "
                f"{candidate.gpu}) in {candidate.region}, {candidate.market}"
            )
            terraform = _terraform(box, progress)
            try:
                _init(box, terraform)
                applied = terraform.apply()
            except TerraformError as exc:
                code = is_capacity_error(exc)
                attempt = _describe(candidate)
                box.attempts.append({**_target(candidate), "error": code or exc.message})
                if code and not last:
                    tried.append(f"{attempt}: {code}")
                    say(f"{attempt}: {code}; destroying the partial box, trying the next candidate")
                    box.state = "destroying"
                    box.save()
                    _destroy_or_fail(box, progress, terraform)
                    continue
                box.state, box.error = "failed", exc.message
                box.save()
                _publish(box)
                if code:
                    tried.append(f"{attempt}: {code}")
                    raise OrchError(
                        f"no capacity for any plan candidate ({'; '.join(tried)})",
                        hint=f"`orch down {name}` removes what was created",
                    ) from None
                raise OrchError(
                    f"{exc.message}",
                    hint=f"`orch down {name}` removes what was created; `orch up` retries",
                ) from None
            except Interrupted:
                box.state, box.error = "failed", "interrupted"
                box.save()
                _publish(box)
                raise Interrupted(
                    f"interrupted; box {name} is partly created: `orch down {name}` removes it"
                ) from None
            outputs = applied.outputs()
            box.outputs = outputs if outputs is not None else terraform.output()
            box.state = "up"
            box.save()
            _publish(box)
            return box
    raise OrchError("the plan has no candidates")  # pragma: no cover - Plan always has one


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


def _ensure_box_files(box: Box) -> str:
    from orchestrator.provision.keys import ensure_keypair

    public_key = ensure_keypair(box.key_path, comment=f"orch-{box.name}")
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


def _describe(candidate: Candidate) -> str:
    return f"{candidate.instance_type} {candidate.market} in {candidate.region}"


# ------------------------------------------------------------------------------ down


def down(name: str, state_url: str | None, say: Say, progress: Say | None = None) -> Box:
    """Destroy box `name` and everything it created; returns its last record."""
    validate_box_name(name)
    location = state_backend.parse_state_url(state_url) if state_url else None
    with box_lock(name):
        if box_exists(name):
            box = load_box(name)
            if location and box.state_url and box.state_url != location.url:
                raise UsageError(f"box {name} keeps its state in {box.state_url}, not {state_url}")
        elif location is not None:
            box = restore_box(location, name)
            say(f"rebuilt box {name} from {location.url}")
        else:
            raise UsageError(f"no box named {name!r}", hint="see `orch list`")
        if (box.directory / "main.tf").exists():
            say(f"destroying box {name} ({box.candidate.instance_type} in {box.region})")
            box.state = "destroying"
            box.save()
            try:
                _destroy(box, progress)
            except TerraformError as exc:
                box.state, box.error = "failed", exc.message
                box.save()
                raise OrchError(
                    f"destroying box {name} failed: {exc.message}",
                    hint=f"its directory {box.directory} is kept; re-run `orch down {name}`",
                ) from None
            except Interrupted:
                box.state, box.error = "failed", "interrupted during destroy"
                box.save()
                raise Interrupted(
                    f"interrupted; box {name} is partly destroyed: re-run `orch down {name}`"
                ) from None
        if box.state_url:
            loc = state_backend.parse_state_url(box.state_url)
            state_backend.delete_box_objects(loc, name, state_backend.bucket_region(loc))
        shutil.rmtree(box.directory)
        box.state = "destroyed"
        return box


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


def _init(box: Box, terraform: Terraform) -> None:
    if not box.state_url:
        terraform.init()
        return
    location = state_backend.parse_state_url(box.state_url)
    region = state_backend.bucket_region(location)
    path = box.directory / BACKEND_FILE
    write_json(path, state_backend.backend_config(location, box.name, region))
    terraform.init(backend_config=path)


def _destroy(box: Box, progress: Say | None, terraform: Terraform | None = None) -> None:
    terraform = terraform or _terraform(box, progress)
    _init(box, terraform)
    terraform.destroy()


def _destroy_or_fail(box: Box, progress: Say | None, terraform: Terraform | None = None) -> None:
    """Destroy a partial box during `up`; if that fails, leave it "failed" for `down`."""
    try:
        _destroy(box, progress, terraform)
    except (TerraformError, Interrupted) as exc:
        box.state, box.error = "failed", exc.message
        box.save()
        _publish(box)
        if isinstance(exc, Interrupted):
            raise
        raise OrchError(
            f"could not remove the partial box {box.name}: {exc.message}",
            hint=f"`orch down {box.name}` retries",
        ) from None


def _has_resources(box: Box) -> bool:
    """Whether an earlier attempt may have left resources (conservative: any state at all)."""
    if not (box.directory / "main.tf").exists():
        return False
    if box.state_url:
        return True  # remote state: ask Terraform (destroy of nothing is cheap enough)
    state = box.directory / "terraform.tfstate"
    return state.exists() and '"mode": "managed"' in state.read_text()


def _publish(box: Box) -> None:
    """Store record + rendered module next to the remote state (no-op for local state)."""
    if not box.state_url:
        return
    location = state_backend.parse_state_url(box.state_url)
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
