"""Alibaba Cloud ECS helpers over the official SDK (alibabacloud-ecs20140526).

Everything here runs only in commands that touch the cloud; the SDK is imported inside
functions so that `orch plan` / `estimate` / `catalog` never load it.

Credentials: ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET (plus
ALIBABA_CLOUD_SECURITY_TOKEN for STS); without them, the SDK's default chain (the
~/.aliyun/config.json / ~/.alibabacloud/credentials profiles, OIDC, an ECS RAM role).

Endpoint override: ALIBABA_CLOUD_ENDPOINT_ECS (and ALIBABA_CLOUD_ENDPOINT_VPC for the VPC API,
default `vpc.<region>.aliyuncs.com`), the variables the alicloud Terraform provider also reads
(connectivity.loadEndpoint: "ALIBABA_CLOUD_ENDPOINT_<PRODUCT>"). A bare host
("ecs.cn-hangzhou.aliyuncs.com") is called over HTTPS; a URL picks its own scheme, so
`http://127.0.0.1:8950` reaches the local emulator (`python -m tests.sim aliyun`).
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.errors import OrchError, UsageError

if TYPE_CHECKING:  # pragma: no cover
    from alibabacloud_ecs20140526.client import Client

ENDPOINT_ENV = "ALIBABA_CLOUD_ENDPOINT_ECS"
VPC_ENDPOINT_ENV = "ALIBABA_CLOUD_ENDPOINT_VPC"
VPC_API_VERSION = "2016-04-28"
# Error codes that mean "no capacity for this type/market here right now": `orch up` fails over.
CAPACITY_CODES = frozenset(
    {
        "OperationDenied.NoStock",
        "Zone.NotOnSale",
        "InvalidResourceType.NotSupported",
        "QuotaExceed.ElasticQuota",
        "InvalidSpotPriceLimit.LowerThanPublicPrice",
    }
)
# Codes after which every further call fails the same way: stop at once.
CURRENCY_MISMATCH = "Orch.CurrencyMismatch"
FATAL_PRICE_CODES = frozenset(
    {
        "",  # no response at all: connection refused, DNS, TLS
        "InvalidAccessKeyId.NotFound",
        "InvalidAccessKeyId.Inactive",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "Forbidden.RAM",
        "Forbidden.AccessKeyDisabled",
        "Forbidden",
        "NoPermission",
        CURRENCY_MISMATCH,
    }
)
T = TypeVar("T")


class AliyunError(OrchError):
    """An Alibaba Cloud API call failed; `code` is the API's error code."""

    def __init__(self, message: str, code: str = "", hint: str | None = None):
        super().__init__(message, hint=hint)
        self.code = code


class CapacityError(AliyunError):
    """The instance type has no stock (or no quota) for this market in the region.

    Its codes are ones `orch up` fails over on (lifecycle.CAPACITY_ERROR_CODES): a caller that
    checks stock before applying should move on to the plan's next candidate.
    """


# ------------------------------------------------------------------------ client


def endpoint_config(variable: str = ENDPOINT_ENV) -> tuple[str, str] | None:
    """(host[:port], protocol) from ALIBABA_CLOUD_ENDPOINT_ECS (or `variable`), or None for the
    SDK's default."""
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return None
    match = re.fullmatch(r"(?:(https?)://)?([^/\s]+)/?", raw)
    if not match:
        raise UsageError(f"{variable}={raw!r} is not a host or an http(s) URL")
    scheme, host = match.groups()
    return host, (scheme or "https").upper()


def ecs_client(region: str) -> Client:
    """An ECS client for `region`, with standard credentials and the endpoint override."""
    return _client(region, endpoint_config())


def vpc_client(region: str) -> Client:
    """A client for the VPC API (2016-04-28) of `region`, for `_vpc_rpc`.

    The VPC SDK is not a dependency: the ECS client's generic `call_api` signs and sends any
    RPC action once its endpoint is fixed, and the API version travels with each call.
    """
    endpoint = endpoint_config(VPC_ENDPOINT_ENV) or (f"vpc.{region}.aliyuncs.com", "HTTPS")
    return _client(region, endpoint)


def _client(region: str, override: tuple[str, str] | None) -> Client:
    from alibabacloud_ecs20140526.client import Client
    from alibabacloud_tea_openapi.models import Config

    config = Config(region_id=region, read_timeout=30_000)
    key_id = os.environ.get("ALIBABA_CLOUD_ACCESS_KEY_ID", "")
    secret = os.environ.get("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "")
    if key_id and secret:
        # Read here, at call time: the credentials package snapshots the environment when it
        # is first imported.
        config.access_key_id, config.access_key_secret = key_id, secret
        config.security_token = os.environ.get("ALIBABA_CLOUD_SECURITY_TOKEN") or None
    else:
        config.credential = _default_credentials()
    if override is not None:
        config.endpoint, config.protocol = override
    return Client(config)


def _default_credentials() -> Any:
    """The SDK's default chain: profiles (~/.aliyun/config.json, ~/.alibabacloud/credentials),
    OIDC, then an ECS RAM role."""
    from alibabacloud_credentials.client import Client as CredentialClient

    try:
        credential = CredentialClient()
        credential.get_credential()  # fail here, with a clear message, rather than mid-call
    except Exception as exc:
        raise OrchError(
            "no Alibaba Cloud credentials found",
            hint="set ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET "
            f"({type(exc).__name__})",
        ) from None
    return credential


def _call(what: str, fn: Callable[[], T]) -> T:
    """Run one SDK call; turn its exceptions into AliyunError / CapacityError."""
    from alibabacloud_tea_openapi.exceptions import AlibabaCloudException

    try:
        return fn()
    except AlibabaCloudException as exc:
        code = str(exc.code or "")
        text = str(exc.message or exc).split(" request id:")[0]
        kind = CapacityError if code in CAPACITY_CODES else AliyunError
        raise kind(f"Alibaba Cloud {what} failed: {code}: {text}", code=code) from None
    except OrchError:
        raise
    except Exception as exc:  # connection refused, DNS, TLS: no response at all
        raise AliyunError(f"Alibaba Cloud {what} failed: {type(exc).__name__}: {exc}") from None


# ------------------------------------------------------------------------ images


@dataclass(frozen=True)
class Image:
    id: str
    name: str
    creation_time: str
    os_name: str


def find_image(region: str, name_regex: str, owners: str = "system") -> Image:
    """The newest image whose name matches `name_regex` (what data "alicloud_images" picks)."""
    from alibabacloud_ecs20140526 import models

    pattern = re.compile(name_regex)
    client = ecs_client(region)
    found: list[Image] = []
    page = 1
    while True:
        request = models.DescribeImagesRequest(
            region_id=region,
            image_owner_alias=owners or None,
            status="Available",
            page_number=page,
            page_size=100,
        )
        body = _call("DescribeImages", lambda r=request: client.describe_images(r)).body
        images = body.images.image if body.images and body.images.image else []
        for item in images:
            if item.image_name and pattern.search(item.image_name):
                found.append(
                    Image(
                        item.image_id,
                        item.image_name,
                        item.creation_time or "",
                        item.osname_en or "",
                    )
                )
        if len(images) < 100:
            break
        page += 1
    if not found:
        raise OrchError(
            f"no {owners or 'visible'} image in {region} matches {name_regex!r}",
            hint="check the image name pattern with `aliyun ecs DescribeImages`",
        )
    return max(found, key=lambda image: image.creation_time)


# ------------------------------------------------------------------------ stock and prices


def check_stock(region: str, instance_type: str, spot: bool, zone: str | None = None) -> list[str]:
    """Zones of `region` where `instance_type` can be bought now, best first.

    Uses DescribeAvailableResource (DestinationResource=InstanceType). Raises CapacityError when
    no zone has stock, so that `orch up` moves on to the next candidate.
    """
    from alibabacloud_ecs20140526 import models

    request = models.DescribeAvailableResourceRequest(
        region_id=region,
        destination_resource="InstanceType",
        resource_type="instance",
        instance_type=instance_type,
        instance_charge_type="PostPaid",
        spot_strategy="SpotAsPriceGo" if spot else "NoSpot",
        io_optimized="optimized",
        zone_id=zone,
    )
    client = ecs_client(region)
    body = _call(
        "DescribeAvailableResource", lambda: client.describe_available_resource(request)
    ).body
    zones: list[tuple[int, str]] = []
    for entry in (body.available_zones.available_zone or []) if body.available_zones else []:
        resources = (
            entry.available_resources.available_resource if entry.available_resources else []
        )
        for resource in resources or []:
            supported = (
                resource.supported_resources.supported_resource
                if resource.supported_resources
                else []
            )
            for item in supported or []:
                if item.value == instance_type and item.status == "Available":
                    # Prefer zones that are open for sale over "closed, but stock left".
                    rank = 0 if item.status_category == "WithStock" else 1
                    zones.append((rank, entry.zone_id))
    if not zones:
        market = "spot" if spot else "on-demand"
        raise CapacityError(
            f"no {market} stock for {instance_type} in {region}"
            + (f" zone {zone}" if zone else ""),
            code="OperationDenied.NoStock",
        )
    return [zone_id for _, zone_id in sorted(zones)]


def describe_price(
    region: str,
    instance_type: str,
    spot: bool,
    system_disk_category: str = "cloud_essd",
    system_disk_size: int = 40,
    currency: str | None = None,
) -> float:
    """USD (or the account's currency) per hour for the instance alone, via DescribePrice.

    DescribePrice prices the instance with its system disk; the instance's own line
    (DetailInfo Resource "instanceType") is returned when the API itemises the price.
    With `currency` ("USD"), a price in another currency (a China-site account is billed in
    CNY) raises AliyunError with code CURRENCY_MISMATCH instead of being returned.
    """
    from alibabacloud_ecs20140526 import models

    request = models.DescribePriceRequest(
        region_id=region,
        resource_type="instance",
        instance_type=instance_type,
        price_unit="Hour",
        period=1,
        spot_strategy="SpotAsPriceGo" if spot else "NoSpot",
        system_disk=models.DescribePriceRequestSystemDisk(
            category=system_disk_category, size=system_disk_size
        ),
    )
    client = ecs_client(region)
    body = _call("DescribePrice", lambda: client.describe_price(request)).body
    price = body.price_info.price if body.price_info else None
    if price is None:
        raise AliyunError(f"DescribePrice returned no price for {instance_type} in {region}")
    if currency and price.currency and price.currency.upper() != currency.upper():
        raise AliyunError(
            f"DescribePrice answered in {price.currency}, not {currency}",
            code=CURRENCY_MISMATCH,
            hint="orch's catalog is in USD: use an international-site (alibabacloud.com) account",
        )
    details = price.detail_infos.detail_info if price.detail_infos else None
    for line in details or []:
        if (line.resource or "").lower() == "instancetype" and line.trade_price is not None:
            return float(line.trade_price)
    return float(price.trade_price)


def refresh_prices(
    regions: Iterable[str], instance_types: Iterable[str], currency: str | None = None
) -> dict[str, dict[str, dict[str, float | None]]]:
    """{instance_type: {region: {"on_demand": x, "spot": y}}} from DescribePrice.

    A type the region does not sell (or cannot price) gets None for that market, so that
    `orch catalog refresh` can keep the old figure and say so. No connection, no permission
    or (with `currency`) a price in another currency raises AliyunError.
    """
    regions = list(regions)
    table: dict[str, dict[str, dict[str, float | None]]] = {}
    for instance_type in instance_types:
        for region in regions:
            row: dict[str, float | None] = {}
            for market, spot in (("on_demand", False), ("spot", True)):
                try:
                    row[market] = describe_price(region, instance_type, spot, currency=currency)
                except AliyunError as exc:
                    if exc.code in FATAL_PRICE_CODES:
                        raise  # no connection or no permission: every other call fails too
                    row[market] = None
            table.setdefault(instance_type, {})[region] = row
    return table


# ------------------------------------------------------------------------ instances by tag


@dataclass(frozen=True)
class TaggedInstance:
    id: str
    region: str
    zone: str
    name: str
    instance_type: str
    status: str
    creation_time: str
    auto_release_time: str
    tags: dict[str, str] = field(default_factory=dict)


def list_tagged_instances(region: str, tags: dict[str, str | None]) -> list[TaggedInstance]:
    """Instances carrying every given tag (value None: any value), all pages.

    The sweeper uses this with {"orch:owner": ...} to find boxes whose state was lost.
    """
    from alibabacloud_ecs20140526 import models

    client = ecs_client(region)
    filters = [
        models.DescribeInstancesRequestTag(key=key, value=value) for key, value in tags.items()
    ]
    found: list[TaggedInstance] = []
    token: str | None = None
    while True:
        request = models.DescribeInstancesRequest(
            region_id=region, tag=filters or None, max_results=100, next_token=token
        )
        body = _call("DescribeInstances", lambda r=request: client.describe_instances(r)).body
        for item in (body.instances.instance or []) if body.instances else []:
            item_tags = (
                {t.tag_key: t.tag_value or "" for t in (item.tags.tag or [])} if item.tags else {}
            )
            found.append(
                TaggedInstance(
                    id=item.instance_id,
                    region=region,
                    zone=item.zone_id or "",
                    name=item.instance_name or "",
                    instance_type=item.instance_type or "",
                    status=item.status or "",
                    creation_time=item.creation_time or "",
                    auto_release_time=item.auto_release_time or "",
                    tags=item_tags,
                )
            )
        token = body.next_token
        if not token:
            return found


def release_instance(region: str, instance_id: str) -> None:
    """Release (force-delete) one pay-as-you-go instance; a missing instance is not an error."""
    from alibabacloud_ecs20140526 import models

    client = ecs_client(region)
    request = models.DeleteInstanceRequest(instance_id=instance_id, force=True)
    try:
        _call("DeleteInstance", lambda: client.delete_instance(request))
    except AliyunError as exc:
        if exc.code != "InvalidInstanceId.NotFound":
            raise


def wait_instances_released(
    region: str, instance_ids: Iterable[str], timeout_s: float = 300, poll_s: float = 5
) -> None:
    """Wait until DescribeInstances no longer lists any of `instance_ids`.

    A released instance keeps its security group and vSwitch busy (DependencyViolation) until
    ECS has finished with it, which takes seconds to a minute after DeleteInstance.
    """
    from alibabacloud_ecs20140526 import models

    pending = sorted(set(instance_ids))
    if not pending:
        return
    client = ecs_client(region)
    deadline = time.monotonic() + timeout_s
    while True:
        still: list[str] = []
        for start in range(0, len(pending), 100):  # InstanceIds takes at most 100 ids
            request = models.DescribeInstancesRequest(
                region_id=region,
                instance_ids=json.dumps(pending[start : start + 100]),
                page_size=100,
            )
            body = _call("DescribeInstances", lambda r=request: client.describe_instances(r)).body
            items = (body.instances.instance or []) if body.instances else []
            still += [item.instance_id for item in items]
        if not still:
            return
        if time.monotonic() > deadline:
            raise AliyunError(
                f"{len(still)} instance(s) not released after {timeout_s:.0f}s: "
                + ", ".join(sorted(still)[:5])
            )
        pending = sorted(still)
        time.sleep(poll_s)


# ------------------------------------------------------------------------ other resources by tag


@dataclass(frozen=True)
class TaggedResource:
    """A security group, key pair, VPC or vSwitch found by tag."""

    kind: str  # "security_group" | "key_pair" | "vpc" | "vswitch"
    id: str  # the key pair's name for key pairs (the API has no other id)
    name: str
    region: str
    tags: dict[str, str] = field(default_factory=dict)
    vpc_id: str = ""  # security groups and vSwitches: the VPC they belong to


def _ecs_tags(item: Any) -> dict[str, str]:
    tags = getattr(getattr(item, "tags", None), "tag", None) or []
    return {t.tag_key: t.tag_value or "" for t in tags}


def list_tagged_security_groups(region: str, tags: dict[str, str | None]) -> list[TaggedResource]:
    """Security groups carrying every given tag (value None: any value), all pages."""
    from alibabacloud_ecs20140526 import models

    client = ecs_client(region)
    filters = [
        models.DescribeSecurityGroupsRequestTag(key=key, value=value) for key, value in tags.items()
    ]
    found: list[TaggedResource] = []
    token: str | None = None
    while True:
        request = models.DescribeSecurityGroupsRequest(
            region_id=region, tag=filters or None, max_results=100, next_token=token
        )
        body = _call(
            "DescribeSecurityGroups", lambda r=request: client.describe_security_groups(r)
        ).body
        groups = (body.security_groups.security_group if body.security_groups else None) or []
        for group in groups:
            found.append(
                TaggedResource(
                    "security_group",
                    group.security_group_id,
                    group.security_group_name or "",
                    region,
                    _ecs_tags(group),
                    group.vpc_id or "",
                )
            )
        token = body.next_token
        if not token:
            return found


def list_tagged_key_pairs(region: str, tags: dict[str, str | None]) -> list[TaggedResource]:
    """Key pairs carrying every given tag (value None: any value), all pages."""
    from alibabacloud_ecs20140526 import models

    client = ecs_client(region)
    filters = [
        models.DescribeKeyPairsRequestTag(key=key, value=value) for key, value in tags.items()
    ]
    found: list[TaggedResource] = []
    page = 1
    while True:
        request = models.DescribeKeyPairsRequest(
            region_id=region, tag=filters or None, page_number=page, page_size=50
        )
        body = _call("DescribeKeyPairs", lambda r=request: client.describe_key_pairs(r)).body
        pairs = (body.key_pairs.key_pair if body.key_pairs else None) or []
        for pair in pairs:
            found.append(
                TaggedResource(
                    "key_pair", pair.key_pair_name, pair.key_pair_name, region, _ecs_tags(pair)
                )
            )
        if len(pairs) < 50 or page * 50 >= int(body.total_count or 0):
            return found
        page += 1


def _vpc_rpc(region: str, action: str, query: dict[str, Any]) -> dict[str, Any]:
    """One VPC API (2016-04-28) call with flat parameters; the response body as a dict."""
    from alibabacloud_tea_openapi.models import OpenApiRequest, Params
    from alibabacloud_tea_openapi.utils import Utils
    from darabonba.runtime import RuntimeOptions

    params = Params(
        action=action,
        version=VPC_API_VERSION,
        protocol="HTTPS",
        pathname="/",
        method="POST",
        auth_type="AK",
        style="RPC",
        req_body_type="formData",
        body_type="json",
    )
    client = vpc_client(region)
    flat = {"RegionId": region, **{k: v for k, v in query.items() if v is not None}}
    request = OpenApiRequest(query=Utils.query(flat))
    response = _call(action, lambda: client.call_api(params, request, RuntimeOptions()))
    return response.get("body") or {}


def _vpc_tag_query(tags: dict[str, str | None]) -> dict[str, str]:
    query: dict[str, str] = {}
    for index, (key, value) in enumerate(tags.items(), start=1):
        query[f"Tag.{index}.Key"] = key
        if value is not None:
            query[f"Tag.{index}.Value"] = value
    return query


def _vpc_tags(raw: Any) -> dict[str, str]:
    items = (raw or {}).get("Tag") or []
    return {item["Key"]: item.get("Value", "") for item in items if "Key" in item}


def _list_vpc_api(
    region: str, action: str, tags: dict[str, str | None], wrapper: str, item: str
) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    page = 1
    while True:
        body = _vpc_rpc(
            region, action, {**_vpc_tag_query(tags), "PageNumber": page, "PageSize": 50}
        )
        items = ((body.get(wrapper) or {}).get(item)) or []
        found += items
        if len(items) < 50 or page * 50 >= int(body.get("TotalCount") or 0):
            return found
        page += 1


def list_tagged_vpcs(region: str, tags: dict[str, str | None]) -> list[TaggedResource]:
    """VPCs carrying every given tag (value None: any value), via the VPC API's DescribeVpcs."""
    return [
        TaggedResource(
            "vpc", raw["VpcId"], raw.get("VpcName", ""), region, _vpc_tags(raw.get("Tags"))
        )
        for raw in _list_vpc_api(region, "DescribeVpcs", tags, "Vpcs", "Vpc")
    ]


def list_tagged_vswitches(region: str, tags: dict[str, str | None]) -> list[TaggedResource]:
    """vSwitches carrying every given tag (value None: any value), via DescribeVSwitches."""
    return [
        TaggedResource(
            "vswitch",
            raw["VSwitchId"],
            raw.get("VSwitchName", ""),
            region,
            _vpc_tags(raw.get("Tags")),
            raw.get("VpcId", ""),
        )
        for raw in _list_vpc_api(region, "DescribeVSwitches", tags, "VSwitches", "VSwitch")
    ]


def _ignore_not_found(codes: tuple[str, ...], fn: Callable[[], Any]) -> None:
    try:
        fn()
    except AliyunError as exc:
        if exc.code not in codes:
            raise


def delete_security_group(region: str, group_id: str) -> None:
    """Delete one security group; a missing one is not an error. DependencyViolation (an
    instance still in it) is raised with that code, for the caller to retry."""
    from alibabacloud_ecs20140526 import models

    client = ecs_client(region)
    request = models.DeleteSecurityGroupRequest(region_id=region, security_group_id=group_id)
    _ignore_not_found(
        ("InvalidSecurityGroupId.NotFound",),
        lambda: _call("DeleteSecurityGroup", lambda: client.delete_security_group(request)),
    )


def delete_key_pairs(region: str, names: Iterable[str]) -> None:
    """Delete key pairs by name (names that do not exist are skipped by the API)."""
    from alibabacloud_ecs20140526 import models

    names = sorted(set(names))
    if not names:
        return
    client = ecs_client(region)
    for start in range(0, len(names), 100):  # KeyPairNames takes at most 100 names
        request = models.DeleteKeyPairsRequest(
            region_id=region, key_pair_names=json.dumps(names[start : start + 100])
        )
        _call("DeleteKeyPairs", lambda r=request: client.delete_key_pairs(r))


def delete_vswitch(region: str, vswitch_id: str) -> None:
    """Delete one vSwitch (VPC API); a missing one is not an error. DependencyViolation (an
    instance still attached) is raised with that code."""
    _ignore_not_found(
        ("InvalidVSwitchId.NotFound", "InvalidVswitchID.NotFound"),
        lambda: _vpc_rpc(region, "DeleteVSwitch", {"VSwitchId": vswitch_id}),
    )


def delete_vpc(region: str, vpc_id: str) -> None:
    """Delete one VPC (VPC API); a missing one is not an error. DependencyViolation.* (vSwitches
    or security groups left in it) is raised with that code."""
    _ignore_not_found(
        ("InvalidVpcID.NotFound", "InvalidVpcId.NotFound"),
        lambda: _vpc_rpc(region, "DeleteVpc", {"VpcId": vpc_id}),
    )


# ------------------------------------------------------------------------ cloud assistant


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    output: str
    status: str  # InvocationStatus: Success, Failed, Timeout, ...


def run_command(
    region: str,
    instance_id: str,
    command: str,
    timeout_s: int = 120,
    poll_s: float = 1.0,
) -> CommandResult:
    """Run a shell command through Cloud Assistant (RunCommand) and wait for its result.

    Polls DescribeInvocationResults until the invocation finishes; the output comes back
    base64-encoded and is decoded here.
    """
    from alibabacloud_ecs20140526 import models

    client = ecs_client(region)
    request = models.RunCommandRequest(
        region_id=region,
        type="RunShellScript",
        command_content=command,
        content_encoding="PlainText",
        instance_id=[instance_id],
        timeout=timeout_s,
        name="orch-check",
    )
    invoke_id = _call("RunCommand", lambda: client.run_command(request)).body.invoke_id
    deadline = time.monotonic() + timeout_s + 30
    while True:
        query = models.DescribeInvocationResultsRequest(
            region_id=region,
            invoke_id=invoke_id,
            instance_id=instance_id,
            content_encoding="Base64",
        )
        body = _call(
            "DescribeInvocationResults", lambda q=query: client.describe_invocation_results(q)
        ).body
        results = _invocation_results(body)
        if results and results[0].invoke_record_status == "Finished":
            item = results[0]
            output = base64.b64decode(item.output or "").decode("utf-8", "replace")
            exit_code = item.exit_code if item.exit_code is not None else -1
            return CommandResult(int(exit_code), output, item.invocation_status or "")
        if time.monotonic() > deadline:
            raise AliyunError(f"command on {instance_id} did not finish within {timeout_s}s")
        time.sleep(poll_s)


def _invocation_results(body: Any) -> list[Any]:
    invocation = body.invocation
    if invocation is None or invocation.invocation_results is None:
        return []
    return list(invocation.invocation_results.invocation_result or [])
