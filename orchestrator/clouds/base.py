"""The Cloud seam: one protocol every cloud implements, the values clouds return, a registry.

Everything outside `orchestrator/clouds/` reaches a cloud only through `get(name)` and
`names()`; nothing else names one. A cloud is a package under `orchestrator/clouds/` (or, for a
plugin, any importable module) whose object satisfies `Cloud`, registered by name:

    register("aws", "orchestrator.clouds.aws.cloud:AwsCloud")   # lazy: imported on first get()

Plugins: ORCH_CLOUD_PLUGINS="pkg.module:attr[,other.module:attr]" names extra clouds (an
entry-point style reference to a Cloud object, or to a class or function returning one); they
are imported on the first `names()` / `get()` and registered under their `name`. The suite's
test-only cloud reaches `orch` subprocesses this way (docs/adding-a-cloud.md).

This module imports nothing of orch above it (only `orchestrator.errors`), so any layer may use
it; cloud SDKs are imported inside the cloud packages' functions, never at registration.
"""

from __future__ import annotations

import enum
import importlib
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from orchestrator.errors import EXIT_FAILURE, OrchError, UsageError

PLUGINS_ENV = "ORCH_CLOUD_PLUGINS"

# Tags on everything a box creates: how `down` and `orch sweep` find what a box left.
BOX_TAG = "orch:box"
OWNER_TAG = "orch:owner"
EXPIRES_TAG = "orch:expires-at"
MANAGED_BY_TAG = "orch:managed-by"
ORCH_TAG_PREFIX = "orch:"
# Warm-pool boxes (orch pool): the pool's name, and where its record lives ("local" or s3://...),
# so the sweeper can tell a pool box whose pool is gone.
POOL_TAG = "orch:pool"
POOL_STORE_TAG = "orch:pool-store"


# --------------------------------------------------------------------------------- values


class ErrorKind(enum.Enum):
    """What a failed cloud call means for the caller."""

    CAPACITY = "capacity"  # no stock for this type/market/zone now: try the next candidate
    QUOTA = "quota"  # the account's limit: the next candidate (another type/region) may fit
    RETRYABLE = "retryable"  # throttling, busy resources, eventual consistency: try again
    PERMANENT = "permanent"  # bad input, bad credentials, missing permission: stop

    @property
    def fails_over(self) -> bool:
        return self in (ErrorKind.CAPACITY, ErrorKind.QUOTA)


class CloudError(OrchError):
    """A cloud API call failed; `code` is the API's error code ("" when there was no answer)."""

    def __init__(
        self,
        message: str,
        code: str = "",
        hint: str | None = None,
        kind: ErrorKind = ErrorKind.PERMANENT,
    ):
        super().__init__(message, hint=hint)
        self.code = code
        self.kind = kind


class NoCredentials(CloudError):
    """The cloud's standard credential chain found nothing: `orch sweep --cloud all` skips it."""


class Unreachable(OrchError):
    """The box did not answer; worth retrying until the deadline."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message, exit_code=EXIT_FAILURE, hint=hint)


@dataclass(slots=True)
class CommandResult:
    """What a command run on a box returned, whichever transport ran it."""

    exit_code: int
    stdout: str
    stderr: str
    status: str = ""  # the agent's own verdict where it has one (Cloud Assistant: "Success")

    @property
    def output(self) -> str:
        """stdout and stderr as one text (what agents that merge the two return)."""
        return self.stdout + self.stderr


@dataclass(slots=True)
class TaggedResource:
    """A resource found in the cloud by its orch tags (for `down` and the sweeper)."""

    kind: str  # "instance", "security_group", "key_pair", "vswitch", "vpc", ... (per cloud)
    id: str  # what the cloud deletes it by
    name: str  # instance type, group name, key name, ...
    tags: dict[str, str] = field(default_factory=dict)
    region: str = ""
    state: str = ""  # instance state where the cloud has one
    vpc_id: str = ""  # network resources: the VPC they belong to

    @property
    def box(self) -> str:
        return self.tags.get(BOX_TAG, "")

    @property
    def expires_at(self) -> str:
        return self.tags.get(EXPIRES_TAG, "")

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "id": self.id, "name": self.name}


@dataclass(frozen=True, slots=True)
class InstanceState:
    """What the cloud says of a box's instance now (for `orch run`'s watch and recovery).

    `state` is normalised across clouds: "pending", "running", "stopping", "stopped",
    "terminated" (shutting down or gone for good) or "missing" (the cloud no longer lists it).
    `reason` is the cloud's own code for the last change ("Server.SpotInstanceTermination" on
    EC2, "Recycling" on ECS spot), or "".
    """

    state: str
    reason: str = ""
    spot_reclaimed: bool = False  # the cloud's spot service took it back

    @property
    def lost(self) -> bool:
        """The instance will not run the job again (a stopped box counts: its disk may stay,
        but a stopped spot box is not coming back by itself)."""
        return self.state in ("stopping", "stopped", "terminated", "missing")


@dataclass(frozen=True, slots=True)
class ObjectStore:
    """A cloud's S3-compatible object store, as a user reaches it through AWS_ENDPOINT_URL(_S3):
    what it can do that orch relies on."""

    title: str  # for people: "Alibaba OSS"
    # PutObject with If-Match / If-None-Match evaluated atomically (compare-and-swap): what a
    # pool record needs (orchestrator/pool/store.py).
    conditional_writes: bool
    path_style: bool  # it serves path-style requests (https://ENDPOINT/BUCKET/KEY)


@dataclass(frozen=True, slots=True)
class LocalSetup:
    """What this machine has configured for a cloud, read offline (environment and config
    files only: no SDK, no network), so `orch plan --cloud any` can rank what the user can
    actually launch first."""

    usable: bool  # credentials (or a profile that names them) are present
    basis: str = ""  # where they come from: "AWS_PROFILE", "~/.aws/credentials", ...
    region: str | None = None  # the configured default region
    region_basis: str = ""  # where the region comes from: "AWS_REGION", "~/.aws/config", ...


@dataclass(frozen=True, slots=True)
class Credentials:
    """What the cloud's SDK credential chain resolves on this machine, without an API call
    (`orch up`/`run` preflight, `orch doctor`, `orch sweep`'s per-cloud skip)."""

    found: bool
    source: str = ""  # where they come from: "env", "shared-credentials-file", "iam-role", ...
    problem: str = ""  # why none were found, one line
    hint: str = ""  # what to set


@dataclass(frozen=True, slots=True)
class VcpuQuota:
    """An account's vCPU limit for one instance family and market (`orch doctor --online`)."""

    name: str  # the quota's name in the cloud's quota service
    code: str  # its code there ("L-DB2E81BA" in AWS Service Quotas)
    limit: float | None  # vCPUs; None when the service does not say
    source: str = ""  # the API that answered


@dataclass(frozen=True, slots=True)
class ImageChoice:
    """Which image a candidate boots: the plan's `image` query, login user, root volume."""

    query: dict[str, str]
    ssh_user: str
    base_volume_gib: int  # smallest root volume the image boots with, plus room for the OS


class AgentTransport(Protocol):
    """A cloud's in-guest agent running a script (SSM, Cloud Assistant): no inbound port."""

    description: str

    def run(self, script: str, timeout: float) -> CommandResult: ...


class BoxRequest(Protocol):
    """What a cloud's Terraform mapping reads (provision.render.RenderRequest has it)."""

    name: str
    owner: str
    candidate: Any  # orchestrator.plan.Candidate
    ssh_public_key: str
    ssh_ingress_cidrs: list[str]
    user_data: str
    expires_at: str | None
    allow_world_ssh: bool
    tags: dict[str, str]
    spot_max_price: float | None
    subnet_id: str | None
    zone: str | None  # the zone `orch up` chose; None: the cloud's module picks
    identity: Any  # orchestrator.clouds.identity.BoxIdentity: the box's own role

    def orch_tags(self) -> dict[str, str]: ...


# ---------------------------------------------------------------------------------- cloud


# Prices per region and market, as a price API returns them: {type: {region: {market: $/h}}}.
PriceTable = dict[str, dict[str, dict[str, float | None]]]


@dataclass(frozen=True, slots=True)
class PriceApi:
    """A cloud's price API, as `orch catalog refresh` uses it (SDK code loads inside fetch).

    Its API reference, which refreshed prices cite, is catalog data: `[price_api]` in the
    cloud's catalog file.
    """

    name: str  # shown while fetching: "DescribePrice"
    fetch: Callable[[list[str], list[str]], PriceTable]  # (regions, instance types) -> prices
    source: Callable[[str], str]  # region -> the source line an overlay entry records


@runtime_checkable
class Cloud(Protocol):
    """What plan, select, provision, sweep and check need from a cloud."""

    name: str  # registry key, plan.json "cloud", box.json "cloud"
    title: str  # for people: "AWS"
    # Tag key prefixes the cloud reserves (users may not set tags with them).
    reserved_tag_prefixes: tuple[str, ...]
    # `orch check --via <agent_via>` uses the cloud's in-guest agent; None: the cloud has none.
    agent_via: str | None
    # Optional capabilities are the small protocols below (HasKeyType, WatchesInstances,
    # ServesObjectStore, KnowsVcpuQuota, ResolvesImages, ServesBoxMetadata), checked with
    # isinstance by the *_of helpers.

    # -- catalog and planning (offline: no SDK may load here)
    def catalog_file(self) -> Path | None:
        """The TOML file of its instance types, or None for the shipped catalog/data/<name>.toml."""
        ...

    def image_for(self, instance: Any) -> ImageChoice:
        """The image a catalog InstanceType boots."""
        ...

    def price_api(self) -> PriceApi | None:
        """The API `orch catalog refresh` reads current prices from; None: it has none."""
        ...

    # -- Terraform
    def module_dir(self) -> Path:
        """The Terraform module a box root module calls (copied into each box dir)."""
        ...

    def templates_dir(self) -> Path:
        """Folder with main.tf.j2, variables.tf.j2, outputs.tf.j2 for a box root module."""
        ...

    def outputs(self) -> tuple[str, ...]:
        """Root module outputs; instance_id, public_ip, private_ip, ssh_user at least."""
        ...

    def tfvars(self, request: BoxRequest) -> dict[str, Any]:
        """Values of the root module's variables for one box (validated: UsageError)."""
        ...

    def runtime_env(self) -> dict[str, str]:
        """Extra environment for Terraform, derived from standard variables at each run."""
        ...

    def local_setup(self) -> LocalSetup:
        """Credentials and default region configured on this machine (offline: no SDK)."""
        ...

    def credentials(self) -> Credentials:
        """Resolve the SDK's credential chain now (environment, files, instance role) without
        calling an API; never raises for missing credentials. `orch up`/`run` refuse to start
        Terraform when nothing is found."""
        ...

    # -- capacity
    def zones_with_stock(self, region: str, instance_type: str, spot: bool) -> list[str] | None:
        """Zones that can launch the type now, best first; None when the cloud cannot tell."""
        ...

    def error_kind(self, code: str) -> ErrorKind:
        """Classify one of the cloud's API error codes."""
        ...

    def failover_codes(self) -> tuple[str, ...]:
        """Codes (capacity and quota) that make `orch up` try the next candidate."""
        ...

    # -- what a box left behind
    def list_tagged(self, region: str, box: str | None = None) -> list[TaggedResource]:
        """Live resources carrying orch:box (of `box`, when given), all pages.

        Raises NoCredentials when the credential chain is empty, CloudError otherwise."""
        ...

    def delete_tagged(self, region: str, resources: list[TaggedResource]) -> None:
        """Delete what `list_tagged` found (one box's), in dependency order."""
        ...

    # -- check --via
    def agent_transport(self, instance_id: str, region: str) -> AgentTransport:
        """The transport for `orch check --via <agent_via>`."""
        ...


# Optional capabilities: a cloud has one when it has the member (checked with isinstance;
# runtime_checkable protocols test that the members exist, not their signatures).


@runtime_checkable
class HasKeyType(Protocol):
    """The SSH key type its key-pair API accepts: "ed25519" (the default) or "rsa"."""

    ssh_key_type: str


@runtime_checkable
class WatchesInstances(Protocol):
    """What the cloud says of an instance now (a cloud without it is watched over SSH alone)."""

    def instance_state(self, region: str, instance_id: str) -> InstanceState:
        """Raises CloudError on API errors."""
        ...


@runtime_checkable
class ServesObjectStore(Protocol):
    """The cloud's object store, when `host` (an S3 endpoint's host name) is one of its
    endpoints; None otherwise."""

    def object_store(self, host: str) -> ObjectStore | None: ...


@runtime_checkable
class KnowsVcpuQuota(Protocol):
    """The account's vCPU limit for the type's family and market (online); None when it
    cannot tell."""

    def vcpu_quota(self, region: str, instance_type: str, spot: bool) -> VcpuQuota | None: ...


@runtime_checkable
class ResolvesImages(Protocol):
    """The image to boot now for a plan image that names a moving target (AWS: the newest
    PyTorch DLAMI): an object with `image` and `note` (one line saying what was chosen), or
    None to boot the plan's image as it is."""

    def resolve_image(self, region: str, image: dict[str, Any]) -> Any: ...


@runtime_checkable
class ServesBoxMetadata(Protocol):
    """Its instance metadata service as the box-side checkpoint agent reads it (base URL,
    token headers, the paths of spot notices, role credentials and region): a JSON-serialisable
    mapping, written next to the agent (orchestrator/boxside/)."""

    box_metadata: dict[str, object]


def instance_state_of(cloud: Cloud, region: str, instance_id: str) -> InstanceState | None:
    """The cloud's `instance_state(region, instance_id)` where it has one; None otherwise."""
    if not isinstance(cloud, WatchesInstances):
        return None
    return cloud.instance_state(region, instance_id)


def object_store_at(host: str) -> ObjectStore | None:
    """The object store a cloud serves at endpoint host `host` (its optional `object_store`);
    None when no registered cloud claims the host (AWS S3 itself, or a store of its own such
    as MinIO)."""
    for cloud in all_clouds():
        found = cloud.object_store(host) if isinstance(cloud, ServesObjectStore) else None
        if found is not None:
            return found
    return None


def resolve_image_of(cloud: Cloud, region: str, image: dict[str, Any]) -> Any:
    """The cloud's `resolve_image(region, image)` where it has one, else None: the plan's
    image is booted as it is."""
    return cloud.resolve_image(region, image) if isinstance(cloud, ResolvesImages) else None


def vcpu_quota_of(cloud: Cloud, region: str, instance_type: str, spot: bool) -> VcpuQuota | None:
    """The cloud's `vcpu_quota(...)` where it has one; None when it has none or cannot tell."""
    if not isinstance(cloud, KnowsVcpuQuota):
        return None
    return cloud.vcpu_quota(region, instance_type, spot)


def ssh_key_type_of(cloud: Cloud) -> str:
    """The key type a cloud's boxes get: its `ssh_key_type`, else ed25519."""
    return str(cloud.ssh_key_type) if isinstance(cloud, HasKeyType) else "ed25519"


# ------------------------------------------------------------------------------- registry

_entries: dict[str, str | Callable[[], Any] | Any] = {}
_loaded: dict[str, Cloud] = {}
_catalogs: dict[str, Path | None] = {}
_plugins_read: str | None = None


def register(
    name: str, cloud: str | Callable[[], Any] | Any, *, catalog_file: Path | None = None
) -> None:
    """Register a cloud: "module:attr" (imported on first use), a factory, or the object.

    `catalog_file` is known without importing the cloud (offline commands read the catalog of
    every cloud); for an object it defaults to the object's own `catalog_file()`.
    """
    if not name or not name.replace("-", "").replace("_", "").isalnum() or name != name.lower():
        raise ValueError(f"bad cloud name {name!r}")
    if catalog_file is None and hasattr(cloud, "catalog_file") and not isinstance(cloud, type):
        catalog_file = cloud.catalog_file()
    _entries[name] = cloud
    _catalogs[name] = catalog_file
    _loaded.pop(name, None)


def unregister(name: str) -> None:
    _entries.pop(name, None)
    _loaded.pop(name, None)
    _catalogs.pop(name, None)


def catalog_file(name: str) -> Path | None:
    """The catalog TOML a registered cloud brings; None: the shipped catalog/data/<name>.toml."""
    _read_plugins()
    if name not in _entries:
        raise UsageError(f"unknown cloud {name!r} (expected one of {', '.join(_entries)})")
    return _catalogs.get(name)


def _resolve(target: str | Callable[[], Any] | Any, what: str) -> Any:
    """A "module:attr" reference -> its object; classes and functions are called."""
    if isinstance(target, str):
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                raise OrchError(
                    f"orch cannot provision {what} boxes yet: {module_name} is missing"
                ) from None
            raise
        try:
            target = getattr(module, attr) if attr else module
        except AttributeError:
            raise OrchError(f"{module_name} has no {attr!r} (cloud {what})") from None
    if isinstance(target, type) or (callable(target) and not hasattr(target, "name")):
        target = target()
    return target


def _read_plugins() -> None:
    """Register the clouds ORCH_CLOUD_PLUGINS names (again only when the variable changed)."""
    global _plugins_read
    raw = os.environ.get(PLUGINS_ENV, "")
    if raw == _plugins_read:
        return
    _plugins_read = raw
    for ref in (part.strip() for part in raw.split(",")):
        if not ref:
            continue
        if ":" not in ref:
            raise UsageError(f"{PLUGINS_ENV}: {ref!r} is not module:attr")
        cloud = _resolve(ref, ref)
        name = getattr(cloud, "name", "")
        if not isinstance(name, str) or not name:
            raise UsageError(f"{PLUGINS_ENV}: {ref} has no cloud name")
        register(name, cloud)
        _loaded[name] = cloud


def names() -> tuple[str, ...]:
    """Registered cloud names, built-in ones first (no cloud module is imported for this)."""
    _read_plugins()
    return tuple(_entries)


def get(name: str) -> Cloud:
    """The cloud registered as `name`; UsageError naming the choices when there is none."""
    _read_plugins()
    if name not in _entries:
        raise UsageError(f"unknown cloud {name!r} (expected one of {', '.join(_entries)})")
    if name not in _loaded:
        _loaded[name] = _resolve(_entries[name], name)
    return _loaded[name]


def all_clouds() -> list[Cloud]:
    """Every registered cloud (imports each one's light module)."""
    return [get(name) for name in names()]


def check_name(name: str, extra: Iterable[str] = ()) -> str:
    """`name` if it is a registered cloud (or one of `extra`, e.g. "any"), else UsageError."""
    choices = (*names(), *extra)
    if name not in choices:
        raise UsageError(f"unknown cloud {name!r} (choose {', '.join(choices)})")
    return name


# ------------------------------------------------------------------------------ helpers

# How long to keep retrying a delete that another resource still blocks (DependencyViolation),
# and the longest pause between tries.
DEPENDENCY_RETRY_S = 120.0
DEPENDENCY_PAUSE_S = 10.0


def retry_while(
    blocked: Callable[[CloudError], bool],
    call: Callable[[], None],
    timeout_s: float | None = None,
    pause_s: float | None = None,
) -> None:
    """Call `call` until it stops failing with an error `blocked` accepts (or time runs out).

    A released instance holds its security group for a while, a subnet holds its network:
    deleting in order still meets these for seconds to minutes.
    """
    timeout_s = DEPENDENCY_RETRY_S if timeout_s is None else timeout_s
    pause_s = DEPENDENCY_PAUSE_S if pause_s is None else pause_s
    deadline = time.monotonic() + timeout_s
    pause = min(1.0, pause_s)
    while True:
        try:
            call()
            return
        except CloudError as exc:
            if not blocked(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, pause_s)
