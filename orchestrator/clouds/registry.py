"""The cloud seam: the `Cloud` protocol every cloud implements, its optional capabilities
(small protocols checked with `isinstance`), and the registry of clouds by name.

Everything outside `orchestrator/clouds/` reaches a cloud only through `get(name)` and
`names()`; nothing else names one. A cloud is a package under `orchestrator/clouds/` (or, for a
plugin, any importable module) whose object satisfies `Cloud`, registered by name:

    register("aws", "orchestrator.clouds.aws.cloud:AwsCloud")   # lazy: imported on first get()

Plugins: ORCH_CLOUD_PLUGINS="pkg.module:attr[,other.module:attr]" names extra clouds (an
entry-point style reference to a Cloud object, or to a class or function returning one); they
are imported on the first `names()` / `get()` and registered under their `name`. The suite's
test-only cloud reaches `orch` subprocesses this way (docs/adding-a-cloud.md).

Cloud SDKs are imported inside the cloud packages' functions, never at registration; the
values of online calls (clouds/values.py) load with the calls that return them.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from orchestrator.clouds.base import BoxRequest, ErrorKind, ImageChoice, LocalSetup
from orchestrator.errors import OrchError, UsageError

if TYPE_CHECKING:
    from orchestrator.clouds.values import (
        AgentTransport,
        Credentials,
        InstanceState,
        ObjectStore,
        PriceApi,
        TaggedResource,
        VcpuQuota,
    )

PLUGINS_ENV = "ORCH_CLOUD_PLUGINS"


@runtime_checkable
class Cloud(Protocol):
    """What plan, select, provision, sweep and check need from a cloud."""

    name: str  # registry key, plan.json "cloud", box.json "cloud"
    title: str  # for people: "AWS"
    # Tag key prefixes the cloud reserves (users may not set tags with them).
    reserved_tag_prefixes: tuple[str, ...]
    # Optional capabilities are the small protocols below (HasPriceApi, KnowsZoneStock,
    # HasAgentTransport, HasKeyType, WatchesInstances, ServesObjectStore, KnowsVcpuQuota,
    # ResolvesImages, ServesBoxMetadata, ReplacesNodes),
    # checked with isinstance by the *_of helpers.

    # -- catalog and planning (offline: no SDK may load here)
    def catalog_file(self) -> Path | None:
        """The TOML file of its instance types, or None for the shipped catalog/data/<name>.toml."""
        ...

    def image_for(self, instance: Any) -> ImageChoice:
        """The image a catalog InstanceType boots."""
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


# Optional capabilities: a cloud has one when it has the member (checked with isinstance;
# runtime_checkable protocols test that the members exist, not their signatures).


@runtime_checkable
class HasPriceApi(Protocol):
    """The API `orch catalog refresh` reads current prices from (a cloud without it keeps
    the prices of its catalog file)."""

    def price_api(self) -> PriceApi: ...


@runtime_checkable
class KnowsZoneStock(Protocol):
    """Zones that can launch the type now, best first; None when it cannot tell for this type
    (a cloud without it leaves the zone to its module)."""

    def zones_with_stock(self, region: str, instance_type: str, spot: bool) -> list[str] | None: ...


@runtime_checkable
class HasAgentTransport(Protocol):
    """An in-guest agent (SSM, Cloud Assistant): `orch check --via <agent_via>` runs the check
    through `agent_transport(instance_id, region)` instead of SSH."""

    agent_via: str

    def agent_transport(self, instance_id: str, region: str) -> AgentTransport: ...


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
    """The account's vCPU limit for the type's family and market (online), with the vCPUs
    already in use under it (`in_use`, None when unknown); None when it cannot tell."""

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


@runtime_checkable
class ReplacesNodes(Protocol):
    """The Terraform address, in a box root module, of a cluster's counted instance resource
    (node k is `<node_resource>[k]`): `orch run` replaces one lost node with
    `terraform apply -replace=<node_resource>[k]` (provision/node_replace.py)."""

    node_resource: str


@runtime_checkable
class ChecksSubnetIds(Protocol):
    """Its rule for `--subnet-id` (the id, or UsageError), also asked before a plan has chosen
    the cloud: a job file's box.subnet_id is checked at loading (subnet_id_refusal)."""

    def check_subnet_id(self, subnet_id: str) -> str: ...


def price_api_of(cloud: Cloud) -> PriceApi | None:
    """The cloud's `price_api()` where it has one; None: its catalog's prices are all there is."""
    return cloud.price_api() if isinstance(cloud, HasPriceApi) else None


def zones_with_stock_of(
    cloud: Cloud, region: str, instance_type: str, spot: bool
) -> list[str] | None:
    """The cloud's `zones_with_stock(...)` where it has one; None: the module picks the zone."""
    if not isinstance(cloud, KnowsZoneStock):
        return None
    return cloud.zones_with_stock(region, instance_type, spot)


def agent_via_of(cloud: Cloud) -> str | None:
    """The `--via` name of the cloud's in-guest agent; None: it has none (SSH only)."""
    return str(cloud.agent_via) if isinstance(cloud, HasAgentTransport) else None


def node_resource_of(cloud: Cloud) -> str | None:
    """The cloud's `node_resource` where it has one; None: a lost node means a new cluster."""
    return cloud.node_resource if isinstance(cloud, ReplacesNodes) else None


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


def subnet_id_refusal(subnet_id: str) -> UsageError | None:
    """Why no registered cloud takes `subnet_id` (the first cloud's refusal); None when one
    takes it, or one cannot tell before its launch (it has no check_subnet_id)."""
    refusals: list[UsageError] = []
    for cloud in all_clouds():
        if not isinstance(cloud, ChecksSubnetIds):
            return None
        try:
            cloud.check_subnet_id(subnet_id)
        except UsageError as exc:
            refusals.append(exc)
        else:
            return None
    return refusals[0] if refusals else None


def cloud_subnet_refusal(name: str, subnet_id: str) -> UsageError | None:
    """Why the cloud registered as `name` refuses `subnet_id` (its check_subnet_id's error);
    None when it takes the id, cannot tell before its launch, or no cloud has that name."""
    if name not in names():
        return None
    cloud = get(name)
    if not isinstance(cloud, ChecksSubnetIds):
        return None
    try:
        cloud.check_subnet_id(subnet_id)
    except UsageError as exc:
        return exc
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
