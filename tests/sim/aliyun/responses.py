"""RPC action handlers: flat request parameters in, response objects shaped as the API reference.

Parameters arrive flattened the way the SDKs send them (`Tag.1.Key`, `SecurityGroupIds.2`,
`SystemDisk.Category`, `Permissions.1.PortRange`); JSON-array parameters (`InstanceIds`,
`SecurityGroupIds` on DescribeSecurityGroups, `KeyPairNames`, `DiskIds`) are decoded here. Field
names in responses are the ones the alibabacloud-ecs20140526 models map (see
`*_response_body.py` in that package). Every response carries a RequestId.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import re
from collections.abc import Callable
from typing import Any

from tests.sim.aliyun.data import (
    DISK_PRICE_PER_GIB_HOUR,
    INSTANCE_TYPES,
    LOCAL_NAMES,
    REGION_ZONES,
    SYSTEM_DISK_CATEGORIES,
    ImageSpec,
    zones_of,
)
from tests.sim.aliyun.models import (
    AliyunBackend,
    Disk,
    Instance,
    MarketRequest,
    Rule,
    SecurityGroup,
    SimError,
    SystemDiskRequest,
    fmt_minute,
    fmt_time,
    invalid,
    new_request_id,
    parse_release_time,
)

Params = dict[str, str]
Handler = Callable[[AliyunBackend, Params], dict[str, Any]]

# ------------------------------------------------------------------------ parameter parsing


def indexed(params: Params, prefix: str) -> list[str]:
    """`Prefix.1`, `Prefix.2`, ... in index order."""
    found = []
    for key, value in params.items():
        head, _, index = key.rpartition(".")
        if head == prefix and index.isdigit():
            found.append((int(index), value))
    return [value for _, value in sorted(found)]


def indexed_objects(params: Params, prefix: str) -> list[dict[str, str]]:
    """`Prefix.1.Field=...` -> [{"Field": ...}, ...] in index order."""
    objects: dict[int, dict[str, str]] = {}
    start = prefix + "."
    for key, value in params.items():
        if not key.startswith(start):
            continue
        index, _, name = key[len(start) :].partition(".")
        if index.isdigit() and name:
            objects.setdefault(int(index), {})[name] = value
    return [objects[i] for i in sorted(objects)]


def tags_of(params: Params, prefix: str = "Tag") -> dict[str, str]:
    tags = {}
    for item in indexed_objects(params, prefix):
        key = item.get("Key")
        if key:
            if key.startswith(("aliyun", "acs:")):
                raise invalid(
                    "The tag key cannot start with aliyun or acs:.", "InvalidTagKey.Malformed"
                )
            tags[key] = item.get("Value", "")
    return tags


def json_list(params: Params, name: str) -> list[str] | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid(
            f"The specified {name} is not a valid JSON array.", f"Invalid{name}.Malformed"
        )
    return value


def flag(params: Params, name: str) -> bool:
    return str(params.get(name, "")).lower() == "true"


def integer(params: Params, name: str, default: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise invalid(f"The specified {name} is not a valid integer.") from None


def region_of(params: Params) -> str:
    return params.get("RegionId", "")


def paginate(
    items: list[Any], params: Params, *, max_size: int = 100, default_size: int = 10
) -> tuple[list[Any], dict[str, Any]]:
    """PageNumber/PageSize paging, or NextToken/MaxResults when either of those is given."""
    if "NextToken" in params or "MaxResults" in params:
        size = integer(params, "MaxResults", default_size)
        token = params.get("NextToken") or ""
        try:
            start = int(base64.b64decode(token).decode()) if token else 0
        except (binascii.Error, ValueError):
            raise invalid(
                "The specified NextToken is not valid.", "InvalidNextToken.Malformed"
            ) from None
        if not 1 <= size <= max_size:
            raise invalid("The specified MaxResults is out of range.")
        page = items[start : start + size]
        more = start + size < len(items)
        token_out = base64.b64encode(str(start + size).encode()).decode() if more else ""
        return page, {"NextToken": token_out, "TotalCount": len(items), "PageSize": size}
    number = integer(params, "PageNumber", 1)
    size = integer(params, "PageSize", default_size)
    if number < 1 or not 1 <= size <= max_size:
        raise invalid("The specified PageNumber or PageSize is out of range.")
    start = (number - 1) * size
    return items[start : start + size], {
        "PageNumber": number,
        "PageSize": size,
        "TotalCount": len(items),
    }


def ecs_tags(tags: dict[str, str]) -> dict[str, Any]:
    return {"Tag": [{"TagKey": k, "TagValue": v} for k, v in tags.items()]}


def vpc_tags(tags: dict[str, str]) -> dict[str, Any]:
    return {"Tag": [{"Key": k, "Value": v} for k, v in tags.items()]}


def matches_tags(have: dict[str, str], wanted: list[dict[str, str]]) -> bool:
    for item in wanted:
        key = item.get("Key")
        if key is None:
            continue
        if key not in have:
            return False
        if "Value" in item and have[key] != item["Value"]:
            return False
    return True


# ------------------------------------------------------------------------ shapes


def instance_shape(backend: AliyunBackend, instance: Instance) -> dict[str, Any]:
    spec = instance.spec
    image = next(i for i in backend.images(instance.region) if i.image_id == instance.image_id)
    return {
        "InstanceId": instance.id,
        "InstanceName": instance.name,
        "Description": instance.description,
        "HostName": instance.host_name,
        "RegionId": instance.region,
        "ZoneId": instance.zone_id,
        "InstanceType": spec.name,
        "InstanceTypeFamily": spec.family,
        "Cpu": spec.cpu,
        "Memory": int(spec.memory_gib * 1024),
        "GPUAmount": spec.gpu_count,
        "GPUSpec": "" if spec.gpu is None else _gpu_spec(spec.gpu),
        "ImageId": instance.image_id,
        "OSName": image.os_name_en,
        "OSNameEn": image.os_name_en,
        "OSType": "linux",
        "Status": instance.status(backend.now()),
        "CreationTime": fmt_minute(instance.created_at),
        "StartTime": fmt_minute(instance.running_at),
        "ExpiredTime": "2099-12-31T15:59Z",
        "AutoReleaseTime": fmt_time(instance.auto_release_time)
        if instance.auto_release_time
        else "",
        "InstanceChargeType": instance.charge_type,
        "InternetChargeType": instance.internet_charge_type,
        "InternetMaxBandwidthOut": instance.internet_max_bandwidth_out,
        "InternetMaxBandwidthIn": -1,
        "SpotStrategy": instance.spot_strategy,
        "SpotPriceLimit": instance.spot_price_limit,
        "SpotDuration": 0,
        "SpotInterruptionBehavior": instance.spot_interruption_behavior,
        "KeyPairName": instance.key_pair_name,
        "InstanceNetworkType": "vpc",
        "IoOptimized": True,
        "DeletionProtection": instance.deletion_protection,
        "DeviceAvailable": True,
        "Recyclable": False,
        "StoppedMode": "Not-applicable",
        "ResourceGroupId": instance.resource_group_id,
        "VpcAttributes": {
            "VpcId": instance.vpc_id,
            "VSwitchId": instance.vswitch_id,
            "PrivateIpAddress": {"IpAddress": [instance.private_ip]},
            "NatIpAddress": "",
        },
        "PublicIpAddress": {"IpAddress": [instance.public_ip] if instance.public_ip else []},
        "InnerIpAddress": {"IpAddress": []},
        "EipAddress": {
            "AllocationId": "",
            "IpAddress": "",
            "Bandwidth": 0,
            "InternetChargeType": "",
        },
        "SecurityGroupIds": {"SecurityGroupId": list(instance.security_group_ids)},
        "Tags": ecs_tags(instance.tags),
        "MetadataOptions": {
            "HttpTokens": instance.http_tokens,
            "HttpEndpoint": instance.http_endpoint,
            "HttpPutResponseHopLimit": 1,
        },
        "NetworkInterfaces": {
            "NetworkInterface": [
                {
                    "NetworkInterfaceId": "eni-" + instance.id[2:],
                    "Type": "Primary",
                    "PrimaryIpAddress": instance.private_ip,
                    "MacAddress": "00:16:3e:"
                    + ":".join(instance.id[-6:][i : i + 2] for i in (0, 2, 4)),
                    "PrivateIpSets": {
                        "PrivateIpSet": [{"PrivateIpAddress": instance.private_ip, "Primary": True}]
                    },
                }
            ]
        },
        # The SDK model: OperationLocks.LockReason[] of {LockReason, LockMsg}
        # (DescribeInstancesResponseBodyInstancesInstanceOperationLocks[LockReason]).
        "OperationLocks": {"LockReason": [{"LockReason": r} for r in instance.lock_reasons]},
        "ImageOptions": {"LoginAsNonRoot": False},
    }


def _gpu_spec(gpu: str) -> str:
    from tests.sim.aliyun.data import GPUS

    return GPUS[gpu].spec


def disk_shape(disk: Disk) -> dict[str, Any]:
    return {
        "DiskId": disk.id,
        "DiskName": disk.name,
        "Description": disk.description,
        "RegionId": disk.region,
        "ZoneId": disk.zone_id,
        "InstanceId": disk.instance_id,
        "Type": disk.type,
        "Category": disk.category,
        "Size": disk.size,
        "Encrypted": disk.encrypted,
        "KMSKeyId": disk.kms_key_id,
        "PerformanceLevel": disk.performance_level,
        "ImageId": disk.image_id,
        "Status": "In_use",
        "Device": "/dev/xvda",
        "DeleteWithInstance": disk.delete_with_instance,
        "Portable": False,
        "DiskChargeType": "PostPaid",
        "CreationTime": fmt_time(disk.created_at),
        "AttachedTime": fmt_time(disk.created_at),
        "Attachments": {
            "Attachment": [
                {
                    "InstanceId": disk.instance_id,
                    "Device": "/dev/xvda",
                    "AttachedTime": fmt_time(disk.created_at),
                }
            ]
        },
        "Tags": {"Tag": []},
    }


def security_group_shape(group: SecurityGroup, instance_count: int) -> dict[str, Any]:
    return {
        "SecurityGroupId": group.id,
        "SecurityGroupName": group.name,
        "Description": group.description,
        "SecurityGroupType": group.type,
        "VpcId": group.vpc_id,
        "CreationTime": fmt_time(group.created_at),
        "ResourceGroupId": group.resource_group_id,
        "EcsCount": instance_count,
        "RuleCount": len(group.rules),
        "ServiceManaged": False,
        "Tags": ecs_tags(group.tags),
    }


def image_shape(region: str, image: ImageSpec) -> dict[str, Any]:
    return {
        "ImageId": image.image_id,
        "ImageName": image.image_id,
        "ImageFamily": image.family,
        "ImageVersion": image.creation_time[:10].replace("-", ""),
        "Description": "",
        "CreationTime": image.creation_time,
        "Architecture": "x86_64",
        "OSType": "linux",
        "OSName": image.os_name_en,
        "OSNameEn": image.os_name_en,
        "Platform": image.platform,
        "ImageOwnerAlias": "system",
        "IsPublic": True,
        "IsSelfShared": "",
        "IsSubscribed": False,
        "IsCopied": False,
        "IsSupportCloudinit": True,
        "IsSupportIoOptimized": True,
        "Progress": "100%",
        "Size": image.size_gib,
        "Status": "Available",
        "Usage": "instance",
        "ProductCode": "",
        "BootMode": "BIOS",
        "DiskDeviceMappings": {
            "DiskDeviceMapping": [
                {
                    "Device": "/dev/xvda",
                    "Size": str(image.size_gib),
                    "SnapshotId": "",
                    "Type": "system",
                }
            ]
        },
        "Tags": {"Tag": []},
    }


# ------------------------------------------------------------------------ ECS: instances


def enum(params: Params, name: str, allowed: tuple[str, ...], default: str, code: str = "") -> str:
    """A parameter that takes one of `allowed` (ECS: InvalidParameter unless a code is named)."""
    value = params.get(name) or default
    if value not in allowed:
        raise invalid(f"The specified {name} is not valid.", code or "InvalidParameter")
    return value


def decimal(params: Params, name: str, default: float) -> float:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise invalid(f"The specified {name} is not a valid number.") from None


def base64_text(params: Params, name: str, limit: int) -> str:
    """A base64 parameter (UserData), checked as ECS checks it and returned as sent."""
    value = params.get(name) or ""
    if value:
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise invalid(
                f"The specified {name} is not Base64 encoded.",
                f"Invalid{name}.Base64FormatInvalid",
            ) from None
        if len(value) > limit:
            raise invalid(f"The specified {name} exceeds 32 KB.", f"Invalid{name}.SizeExceeded")
    return value


def system_disk_of(params: Params) -> SystemDiskRequest:
    category = enum(
        params,
        "SystemDisk.Category",
        SYSTEM_DISK_CATEGORIES,
        "cloud_efficiency",
        "InvalidSystemDiskCategory.ValueNotSupported",
    )
    size = params.get("SystemDisk.Size")
    return SystemDiskRequest(
        category=category,
        size=integer(params, "SystemDisk.Size", 0) if size else None,
        encrypted=flag(params, "SystemDisk.Encrypted"),
        kms_key_id=params.get("SystemDisk.KMSKeyId") or "",
        performance_level=params.get("SystemDisk.PerformanceLevel") or "",
        name=params.get("SystemDisk.DiskName") or "",
        description=params.get("SystemDisk.Description") or "",
    )


def market_of(params: Params) -> MarketRequest:
    """Charge type and spot strategy, consistent with each other (RunInstances reference:
    spot needs PostPaid; SpotWithPriceLimit needs SpotPriceLimit)."""
    charge_type = enum(params, "InstanceChargeType", ("PostPaid", "PrePaid"), "PostPaid")
    strategy = enum(
        params, "SpotStrategy", ("NoSpot", "SpotWithPriceLimit", "SpotAsPriceGo"), "NoSpot"
    )
    if charge_type == "PrePaid" and strategy != "NoSpot":
        raise invalid("Spot instances must be pay-as-you-go (PostPaid).")
    limit = decimal(params, "SpotPriceLimit", 0.0)
    if strategy == "SpotWithPriceLimit" and limit <= 0:
        raise SimError(
            "MissingParameter",
            "SpotPriceLimit is mandatory when SpotStrategy is SpotWithPriceLimit.",
        )
    return MarketRequest(charge_type=charge_type, spot_strategy=strategy, spot_price_limit=limit)


def run_instances(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    """Parse and check every parameter's format here; the backend checks it against state."""
    region = backend.check_region(region_of(params))
    group_ids = indexed(params, "SecurityGroupIds")
    if params.get("SecurityGroupId"):
        group_ids = [params["SecurityGroupId"], *group_ids]
    bandwidth = integer(params, "InternetMaxBandwidthOut", 0)
    if not 0 <= bandwidth <= 100:
        raise invalid(
            "The specified InternetMaxBandwidthOut is out of range.",
            "InvalidInternetMaxBandwidthOut.Malformed",
        )
    release = params.get("AutoReleaseTime")
    amount = integer(params, "Amount", 1)
    if not 1 <= amount <= 100:
        raise invalid("The specified Amount is out of range.", "InvalidAmount.Malformed")
    market = market_of(params)
    ids = backend.run_instances(
        region=region,
        instance_type=params.get("InstanceType") or "",
        image_id=params.get("ImageId") or "",
        vswitch_id=params.get("VSwitchId") or "",
        zone_id=params.get("ZoneId") or "",
        security_group_ids=group_ids,
        key_pair_name=params.get("KeyPairName") or "",
        system_disk=system_disk_of(params),
        market=market,
        internet_charge_type=params.get("InternetChargeType") or "PayByTraffic",
        internet_max_bandwidth_out=bandwidth,
        user_data=base64_text(params, "UserData", 32 * 1024),
        http_tokens=enum(params, "HttpTokens", ("optional", "required"), "optional"),
        http_endpoint=enum(params, "HttpEndpoint", ("enabled", "disabled"), "enabled"),
        auto_release_time=parse_release_time(release) if release else None,
        amount=amount,
        dry_run=flag(params, "DryRun"),
        deletion_protection=flag(params, "DeletionProtection"),
        client_token=params.get("ClientToken") or "",
        instance_name=params.get("InstanceName") or "",
        description=params.get("Description") or "",
        host_name=params.get("HostName") or "",
        private_ip=params.get("PrivateIpAddress") or "",
        resource_group_id=params.get("ResourceGroupId") or "",
        tags=tags_of(params),
    )
    spec = backend.instance_type(params.get("InstanceType"))
    return {
        "InstanceIdSets": {"InstanceIdSet": ids},
        "OrderId": "",
        "TradePrice": round(backend.price(region, spec, market.spot) * len(ids), 4),
    }


def describe_instances(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = region_of(params)
    items = backend.list_instances(region)
    wanted_ids = json_list(params, "InstanceIds")
    if wanted_ids is not None:
        if len(wanted_ids) > 100:
            raise invalid(
                "InstanceIds accepts at most 100 ids.", "InvalidInstanceIds.ValueNotSupported"
            )
        items = [i for i in items if i.id in wanted_ids]
    simple = {
        "ZoneId": lambda i: i.zone_id,
        "VpcId": lambda i: i.vpc_id,
        "VSwitchId": lambda i: i.vswitch_id,
        "InstanceType": lambda i: i.spec.name,
        "InstanceName": lambda i: i.name,
        "ImageId": lambda i: i.image_id,
        "KeyPairName": lambda i: i.key_pair_name,
        "InstanceChargeType": lambda i: i.charge_type,
        "Status": lambda i: i.status(backend.now()),
    }
    for name, getter in simple.items():
        if params.get(name):
            items = [i for i in items if getter(i) == params[name]]
    if params.get("SecurityGroupId"):
        items = [i for i in items if params["SecurityGroupId"] in i.security_group_ids]
    wanted_tags = indexed_objects(params, "Tag")
    if wanted_tags:
        items = [i for i in items if matches_tags(i.tags, wanted_tags)]
    page, meta = paginate(items, params)
    return {**meta, "Instances": {"Instance": [instance_shape(backend, i) for i in page]}}


def delete_instance(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    instance_id = params.get("InstanceId")
    if not instance_id:
        raise SimError("MissingParameter", "The input parameter InstanceId is mandatory.")
    instance = backend.instances.get(instance_id)
    region = params.get("RegionId") or (instance.region if instance else "")
    backend.delete_instance(region, instance_id, flag(params, "Force"))
    return {}


def delete_instances(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    ids = indexed(params, "InstanceId")
    if not ids:
        raise SimError("MissingParameter", "The input parameter InstanceId is mandatory.")
    region = region_of(params)
    with backend.lock:
        for instance_id in ids:  # all or nothing, like the real batch call
            backend.instance(region, instance_id)
        for instance_id in ids:
            backend.delete_instance(region, instance_id, flag(params, "Force"))
    return {}


def modify_instance_auto_release_time(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    instance_id = params.get("InstanceId")
    if not instance_id:
        raise SimError("MissingParameter", "InstanceId should not be null.")
    instance = backend.instances.get(instance_id)
    region = params.get("RegionId") or (instance.region if instance else "")
    backend.modify_auto_release_time(region, instance_id, params.get("AutoReleaseTime"))
    return {}


def describe_user_data(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = region_of(params)
    instance = backend.instance(region, params.get("InstanceId"))
    return {"InstanceId": instance.id, "RegionId": region, "UserData": instance.user_data}


def describe_disks(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = backend.check_region(region_of(params))
    with backend.lock:
        backend.reap()
        items = sorted(
            (d for d in backend.disks.values() if d.region == region), key=lambda d: d.id
        )
    ids = json_list(params, "DiskIds")
    if ids is not None:
        items = [d for d in items if d.id in ids]
    if params.get("InstanceId"):
        items = [d for d in items if d.instance_id == params["InstanceId"]]
    disk_type = params.get("DiskType", "all")
    if disk_type != "all":
        items = [d for d in items if d.type == disk_type]
    if params.get("ZoneId"):
        items = [d for d in items if d.zone_id == params["ZoneId"]]
    if params.get("Category") and params["Category"] != "all":
        items = [d for d in items if d.category == params["Category"]]
    page, meta = paginate(items, params)
    return {**meta, "Disks": {"Disk": [disk_shape(d) for d in page]}}


# ------------------------------------------------------------------------ ECS: security groups


def create_security_group(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    group = backend.create_security_group(
        region_of(params),
        params.get("VpcId"),
        params.get("SecurityGroupName", ""),
        params.get("Description", ""),
        params.get("SecurityGroupType") or "normal",
        tags_of(params),
    )
    return {"SecurityGroupId": group.id}


def describe_security_groups(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = backend.check_region(region_of(params))
    with backend.lock:
        groups = sorted(
            (g for g in backend.security_groups.values() if g.region == region),
            key=lambda g: (g.created_at, g.id),
        )
        counts = {
            g.id: sum(g.id in i.security_group_ids for i in backend.instances.values())
            for g in groups
        }
    ids = json_list(params, "SecurityGroupIds")
    if ids is not None:
        groups = [g for g in groups if g.id in ids]
    if params.get("SecurityGroupId"):
        groups = [g for g in groups if g.id == params["SecurityGroupId"]]
    if params.get("VpcId"):
        groups = [g for g in groups if g.vpc_id == params["VpcId"]]
    if params.get("SecurityGroupName"):
        groups = [g for g in groups if g.name == params["SecurityGroupName"]]
    wanted_tags = indexed_objects(params, "Tag")
    if wanted_tags:
        groups = [g for g in groups if matches_tags(g.tags, wanted_tags)]
    page, meta = paginate(groups, params, max_size=100)
    return {
        **meta,
        "RegionId": region,
        "SecurityGroups": {"SecurityGroup": [security_group_shape(g, counts[g.id]) for g in page]},
    }


def describe_security_group_attribute(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = region_of(params)
    group = backend.security_group(region, params.get("SecurityGroupId"))
    direction = params.get("Direction") or "all"
    rules = [r for r in group.rules if direction == "all" or r.direction == direction]
    permissions = []
    for rule in rules:
        ingress = rule.direction == "ingress"
        permissions.append(
            {
                "SecurityGroupRuleId": rule.id,
                "Direction": rule.direction,
                "IpProtocol": rule.ip_protocol.upper(),
                "PortRange": rule.port_range,
                "SourceCidrIp": rule.cidr if ingress else "",
                "DestCidrIp": "" if ingress else rule.cidr,
                "Ipv6SourceCidrIp": "",
                "Ipv6DestCidrIp": "",
                "SourceGroupId": "",
                "DestGroupId": "",
                "SourcePortRange": "",
                "Policy": rule.policy.capitalize(),
                "Priority": str(rule.priority),
                "NicType": rule.nic_type,
                "Description": rule.description,
                "CreateTime": fmt_time(rule.created_at),
            }
        )
    return {
        "RegionId": region,
        "SecurityGroupId": group.id,
        "SecurityGroupName": group.name,
        "Description": group.description,
        "VpcId": group.vpc_id,
        "InnerAccessPolicy": group.inner_access_policy,
        "Permissions": {"Permission": permissions},
    }


def rule_of(backend: AliyunBackend, direction: str, raw: dict[str, str]) -> Rule:
    """One Permissions.N entry -> a Rule, with AuthorizeSecurityGroup's format checks."""
    protocol = (raw.get("IpProtocol") or "").lower()
    if protocol not in ("tcp", "udp", "icmp", "icmpv6", "gre", "all"):
        raise invalid("The specified IpProtocol is not valid.", "InvalidIpProtocol.Malformed")
    port_range = raw.get("PortRange") or ("-1/-1" if protocol not in ("tcp", "udp") else "")
    match = re.fullmatch(r"(-?\d+)/(-?\d+)", port_range)
    if not match:
        raise invalid("The specified PortRange is not valid.", "InvalidIpPortRange.Malformed")
    low, high = int(match.group(1)), int(match.group(2))
    if protocol in ("tcp", "udp"):
        if not (1 <= low <= high <= 65535):
            raise invalid("The specified PortRange is not valid.", "InvalidIpPortRange.Malformed")
    elif (low, high) != (-1, -1):
        raise invalid(
            f"Protocol {protocol} only accepts the port range -1/-1.",
            "InvalidIpPortRange.Malformed",
        )
    key = "SourceCidrIp" if direction == "ingress" else "DestCidrIp"
    cidr = raw.get(key) or ""
    if not cidr:
        raise SimError("MissingParameter", f"The input parameter {key} is mandatory.")
    try:
        cidr = str(ipaddress.ip_network(cidr, strict=False))
    except ValueError:
        raise invalid(f"The specified {key} is not valid.", "InvalidParam.CidrIp") from None
    policy = (raw.get("Policy") or "accept").lower()
    if policy not in ("accept", "drop"):
        raise invalid("The specified Policy is not valid.", "InvalidPolicy.Malformed")
    try:
        priority = int(raw.get("Priority") or 1)
    except ValueError:
        priority = 0
    if not 1 <= priority <= 100:
        raise invalid("The specified Priority is not valid.", "InvalidPriority.Malformed")
    return backend.new_rule(
        direction=direction,
        ip_protocol=protocol,
        port_range=port_range,
        cidr=cidr,
        policy=policy,
        priority=priority,
        nic_type=raw.get("NicType") or "intranet",
        description=raw.get("Description") or "",
    )


def _rules_from(backend: AliyunBackend, params: Params, direction: str) -> list[Rule]:
    raws = indexed_objects(params, "Permissions")
    if not raws and params.get("IpProtocol"):  # the older, single-rule parameter style
        raws = [
            {
                k: params[k]
                for k in (
                    "IpProtocol",
                    "PortRange",
                    "SourceCidrIp",
                    "DestCidrIp",
                    "Policy",
                    "Priority",
                    "NicType",
                    "Description",
                )
                if k in params
            }
        ]
    return [rule_of(backend, direction, raw) for raw in raws]


def _authorize(direction: str) -> Handler:
    def handler(backend: AliyunBackend, params: Params) -> dict[str, Any]:
        rules = _rules_from(backend, params, direction)
        if not rules:
            raise SimError("MissingParameter", "The input parameter Permissions is mandatory.")
        backend.authorize(region_of(params), params.get("SecurityGroupId", ""), rules)
        return {}

    return handler


def _revoke(direction: str) -> Handler:
    def handler(backend: AliyunBackend, params: Params) -> dict[str, Any]:
        rule_ids = indexed(params, "SecurityGroupRuleId")
        rules = _rules_from(backend, params, direction) if not rule_ids else []
        if not rule_ids and not rules:
            raise SimError("MissingParameter", "The input parameter Permissions is mandatory.")
        backend.revoke(
            region_of(params), params.get("SecurityGroupId", ""), direction, rules, rule_ids
        )
        return {}

    return handler


def delete_security_group(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    backend.delete_security_group(region_of(params), params.get("SecurityGroupId", ""))
    return {}


# ------------------------------------------------------------------------ ECS: key pairs


def import_key_pair(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    pair = backend.import_key_pair(
        region_of(params),
        params.get("KeyPairName"),
        params.get("PublicKeyBody", ""),
        tags_of(params),
    )
    return {"KeyPairName": pair.name, "KeyPairFingerPrint": pair.fingerprint}


def describe_key_pairs(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    import fnmatch

    region = backend.check_region(region_of(params))
    with backend.lock:
        pairs = sorted(
            (p for p in backend.key_pairs.values() if p.region == region), key=lambda p: p.name
        )
    if params.get("KeyPairName"):
        pairs = [p for p in pairs if fnmatch.fnmatchcase(p.name, params["KeyPairName"])]
    if params.get("KeyPairFingerPrint"):
        pairs = [p for p in pairs if p.fingerprint == params["KeyPairFingerPrint"]]
    wanted_tags = indexed_objects(params, "Tag")
    if wanted_tags:
        pairs = [p for p in pairs if matches_tags(p.tags, wanted_tags)]
    page, meta = paginate(pairs, params, max_size=50)
    return {
        **meta,
        "KeyPairs": {
            "KeyPair": [
                {
                    "KeyPairName": p.name,
                    "KeyPairFingerPrint": p.fingerprint,
                    "PublicKey": p.public_key,
                    "CreationTime": fmt_time(p.created_at),
                    "ResourceGroupId": p.resource_group_id,
                    "Tags": ecs_tags(p.tags),
                }
                for p in page
            ]
        },
    }


def delete_key_pairs(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    names = json_list(params, "KeyPairNames")
    if not names:
        raise SimError("MissingParameter", "The input parameter KeyPairNames is mandatory.")
    backend.delete_key_pairs(backend.check_region(region_of(params)), names)
    return {}


# ------------------------------------------------------------------------ ECS: catalogue


def describe_regions(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    return {
        "Regions": {
            "Region": [
                {
                    "RegionId": region,
                    "LocalName": LOCAL_NAMES.get(region, region),
                    "RegionEndpoint": f"ecs.{region}.aliyuncs.com",
                    "Status": "available",
                }
                for region in REGION_ZONES
            ]
        }
    }


def describe_images(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = region_of(params)
    images = sorted(backend.images(region), key=lambda i: i.creation_time, reverse=True)
    owner = params.get("ImageOwnerAlias")
    if owner and owner != "system":
        images = []  # the emulated account owns no custom, shared or marketplace images
    if params.get("ImageId"):
        ids = {i.strip() for i in params["ImageId"].split(",")}
        images = [i for i in images if i.image_id in ids]
    if params.get("ImageName"):
        images = [i for i in images if i.image_id == params["ImageName"]]
    if params.get("ImageFamily"):
        images = [i for i in images if i.family == params["ImageFamily"]]
    if params.get("OSType") and params["OSType"].lower() != "linux":
        images = []
    if params.get("Architecture") and params["Architecture"] != "x86_64":
        images = []
    status = params.get("Status") or "Available"
    if "Available" not in status.split(","):
        images = []
    page, meta = paginate(images, params, max_size=100)
    return {**meta, "RegionId": region, "Images": {"Image": [image_shape(region, i) for i in page]}}


def _spot(params: Params) -> bool:
    return (params.get("SpotStrategy") or "NoSpot") != "NoSpot"


def describe_zones(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    # Like ECS: every type a zone offers, whatever its stock; stock shows only through
    # DescribeAvailableResource (and RunInstances' NoStock). So data "alicloud_zones", which
    # reads this list, may pick a zone that is sold out.
    region = backend.check_region(region_of(params))
    zones = []
    for zone in zones_of(region):
        types = list(INSTANCE_TYPES)
        zones.append(
            {
                "ZoneId": zone,
                "LocalName": f"{LOCAL_NAMES.get(region, region)} Zone {zone[-1].upper()}",
                "ZoneType": "AvailabilityZone",
                "AvailableInstanceTypes": {"InstanceTypes": types},
                "AvailableDiskCategories": {"DiskCategories": list(SYSTEM_DISK_CATEGORIES)},
                "AvailableVolumeCategories": {"VolumeCategories": ["cloud_essd"]},
                "AvailableResourceCreation": {"ResourceTypes": ["Instance", "Disk", "VSwitch"]},
                "AvailableDedicatedHostTypes": {"DedicatedHostType": []},
            }
        )
    return {"Zones": {"Zone": zones}}


def describe_available_resource(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = backend.check_region(region_of(params))
    destination = params.get("DestinationResource")
    if not destination:
        raise SimError("MissingParameter", "The input parameter DestinationResource is mandatory.")
    if destination not in (
        "Zone",
        "IoOptimized",
        "InstanceType",
        "SystemDisk",
        "DataDisk",
        "Network",
    ):
        raise invalid("The specified DestinationResource is not valid.")
    spot = _spot(params)
    zone_filter = params.get("ZoneId")
    if zone_filter:
        backend.check_zone(region, zone_filter)
    wanted_type = params.get("InstanceType")
    types = [wanted_type] if wanted_type else list(INSTANCE_TYPES)
    types = [t for t in types if t in INSTANCE_TYPES]
    if destination == "SystemDisk" and not wanted_type:
        raise SimError(
            "MissingParameter", "InstanceType is mandatory for DestinationResource SystemDisk."
        )
    available = ("WithStock", "ClosedWithStock")
    result = []
    for zone in zones_of(region):
        if zone_filter and zone != zone_filter:
            continue
        statuses = {t: backend.stock_status(region, zone, t, spot) for t in types}
        if not statuses:
            continue
        zone_ok = any(s in available for s in statuses.values())
        if destination == "Zone":
            resources = [
                {
                    "Type": "Zone",
                    "SupportedResources": {
                        "SupportedResource": [
                            {
                                "Value": zone,
                                "Status": "Available" if zone_ok else "SoldOut",
                                "StatusCategory": "WithStock" if zone_ok else "WithoutStock",
                            }
                        ]
                    },
                }
            ]
        elif destination == "SystemDisk":
            resources = [
                {
                    "Type": "SystemDisk",
                    "SupportedResources": {
                        "SupportedResource": [
                            {
                                "Value": category,
                                "Status": "Available",
                                "StatusCategory": "WithStock",
                                "Min": 20,
                                "Max": 2048,
                                "Unit": "GiB",
                            }
                            for category in SYSTEM_DISK_CATEGORIES
                        ]
                    },
                }
            ]
        else:
            resources = [
                {
                    "Type": "InstanceType",
                    "SupportedResources": {
                        "SupportedResource": [
                            {
                                "Value": name,
                                "Status": "Available" if status in available else "SoldOut",
                                "StatusCategory": status,
                            }
                            for name, status in statuses.items()
                        ]
                    },
                }
            ]
        result.append(
            {
                "ZoneId": zone,
                "RegionId": region,
                "Status": "Available" if zone_ok else "SoldOut",
                "StatusCategory": "WithStock" if zone_ok else "WithoutStock",
                "AvailableResources": {"AvailableResource": resources},
            }
        )
    return {"AvailableZones": {"AvailableZone": result}}


def describe_price(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = backend.check_region(region_of(params))
    resource_type = params.get("ResourceType") or "instance"
    if resource_type != "instance":
        raise invalid(
            "The emulator prices ResourceType=instance only.", "InvalidResourceType.NotSupported"
        )
    spec = backend.instance_type(params.get("InstanceType"))
    unit = params.get("PriceUnit") or "Hour"
    hours = {"Hour": 1, "Week": 24 * 7, "Month": 24 * 30, "Year": 24 * 365}.get(unit)
    if hours is None:
        raise invalid("The specified PriceUnit is not valid.")
    period = integer(params, "Period", 1)
    amount = integer(params, "Amount", 1)
    category = params.get("SystemDisk.Category") or "cloud_efficiency"
    if category not in DISK_PRICE_PER_GIB_HOUR:
        raise invalid(
            "The specified SystemDisk.Category is not valid.",
            "InvalidSystemDiskCategory.ValueNotSupported",
        )
    size = integer(params, "SystemDisk.Size", 40)
    factor = hours * period * amount
    zone = params.get("ZoneId") or ""
    if zone:
        backend.check_zone(region, zone)
    # Spot prices differ by zone; without ZoneId the region's figure.
    instance_price = round(backend.price(region, spec, _spot(params), zone or None) * factor, 4)
    disk_price = round(DISK_PRICE_PER_GIB_HOUR[category] * size * factor, 4)
    total = round(instance_price + disk_price, 4)

    def line(resource: str, price: float) -> dict[str, Any]:
        return {
            "Resource": resource,
            "OriginalPrice": price,
            "DiscountPrice": 0.0,
            "TradePrice": price,
            "SubRules": {"Rule": []},
        }

    return {
        "PriceInfo": {
            "Price": {
                "Currency": "USD",
                "OriginalPrice": total,
                "DiscountPrice": 0.0,
                "TradePrice": total,
                "DetailInfos": {
                    "DetailInfo": [
                        line("instanceType", instance_price),
                        line("systemDisk", disk_price),
                    ]
                },
            },
            "Rules": {"Rule": []},
        }
    }


# ------------------------------------------------------------------------ ECS: cloud assistant


def run_command(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    content = params.get("CommandContent")
    if not content:
        raise SimError("MissingParameter", "The input parameter CommandContent is mandatory.")
    if (params.get("ContentEncoding") or "PlainText") == "Base64":
        try:
            content = base64.b64decode(content, validate=True).decode()
        except (binascii.Error, ValueError):
            raise invalid(
                "CommandContent is not valid Base64.", "InvalidCommandContent.Malformed"
            ) from None
    invocation = backend.run_command(
        region_of(params),
        indexed(params, "InstanceId"),
        params.get("Type", ""),
        content,
        params.get("Name") or "",
        integer(params, "Timeout", 60),
    )
    return {"CommandId": invocation.command_id, "InvokeId": invocation.invoke_id}


def describe_invocation_results(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = region_of(params)
    invocation = backend.invocation(region, params.get("InvokeId"))
    finished = backend.now() >= invocation.finish_at
    encoding = params.get("ContentEncoding") or "Base64"
    results = []
    for instance_id, (output, exit_code) in invocation.results.items():
        if params.get("InstanceId") and params["InstanceId"] != instance_id:
            continue
        text = output if finished else ""
        status = ("Success" if exit_code == 0 else "Failed") if finished else "Running"
        results.append(
            {
                "CommandId": invocation.command_id,
                "InvokeId": invocation.invoke_id,
                "InstanceId": instance_id,
                "InvocationStatus": status,
                "InvokeRecordStatus": "Finished" if finished else "Running",
                "ExitCode": exit_code if finished else None,
                "Output": base64.b64encode(text.encode()).decode()
                if encoding == "Base64"
                else text,
                "ErrorCode": "ExitCodeNonzero" if finished and exit_code else "",
                "ErrorInfo": "The command exited with a non-zero code."
                if finished and exit_code
                else "",
                "StartTime": fmt_time(invocation.created_at),
                "FinishedTime": fmt_time(invocation.finish_at) if finished else "",
                "Dropped": 0,
                "Repeats": 1,
                "Username": "root",
            }
        )
    page, meta = paginate(results, params)
    return {"Invocation": {**meta, "InvocationResults": {"InvocationResult": page}}}


# ------------------------------------------------------------------------ ECS: tags


def _tag_resource_ids(params: Params) -> tuple[str, list[str]]:
    resource_type = params.get("ResourceType") or ""
    ids = indexed(params, "ResourceId")
    if not resource_type or not ids:
        raise SimError("MissingParameter", "ResourceType and ResourceId are mandatory.")
    return resource_type, ids


def tag_resources(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    resource_type, ids = _tag_resource_ids(params)
    tags = tags_of(params)
    with backend.lock:
        for resource_id in ids:
            backend.tag_target(region_of(params), resource_type, resource_id).update(tags)
    return {}


def untag_resources(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    resource_type, ids = _tag_resource_ids(params)
    keys = indexed(params, "TagKey")
    with backend.lock:
        for resource_id in ids:
            target = backend.tag_target(region_of(params), resource_type, resource_id)
            for key in list(target) if flag(params, "All") else keys:
                target.pop(key, None)
    return {}


def list_tag_resources(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = backend.check_region(region_of(params))
    resource_type = (params.get("ResourceType") or "").lower()
    ids = indexed(params, "ResourceId")
    with backend.lock:
        pool: list[tuple[str, dict[str, str]]] = []
        if resource_type == "instance":
            pool = [(i.id, i.tags) for i in backend.instances.values() if i.region == region]
        elif resource_type == "securitygroup":
            pool = [(g.id, g.tags) for g in backend.security_groups.values() if g.region == region]
        elif resource_type == "keypair":
            pool = [(p.name, p.tags) for p in backend.key_pairs.values() if p.region == region]
        else:
            raise invalid(f"The specified ResourceType {resource_type!r} is not supported.")
    wanted = indexed_objects(params, "Tag")
    rows = [
        {"ResourceId": rid, "ResourceType": resource_type, "TagKey": k, "TagValue": v}
        for rid, tags in pool
        if (not ids or rid in ids) and matches_tags(tags, wanted)
        for k, v in tags.items()
    ]
    params = {k: v for k, v in params.items() if k != "PageNumber"}
    params.setdefault("MaxResults", "50")
    page, meta = paginate(rows, params, max_size=1000, default_size=50)
    return {"NextToken": meta.get("NextToken", ""), "TagResources": {"TagResource": page}}


# ------------------------------------------------------------------------ VPC (2016-04-28)


def create_vpc(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    vpc = backend.create_vpc(
        region_of(params),
        params.get("CidrBlock"),
        params.get("VpcName", ""),
        params.get("Description", ""),
        tags_of(params),
    )
    return {
        "VpcId": vpc.id,
        "VRouterId": vpc.vrouter_id,
        "RouteTableId": vpc.route_table_id,
        "ResourceGroupId": vpc.resource_group_id,
    }


def _vpc_shape(backend: AliyunBackend, vpc: Any) -> dict[str, Any]:
    return {
        "VpcId": vpc.id,
        "RegionId": vpc.region,
        "Status": vpc.status,
        "VpcName": vpc.name,
        "Description": vpc.description,
        "CidrBlock": vpc.cidr_block,
        "VRouterId": vpc.vrouter_id,
        "IsDefault": False,
        "CreationTime": fmt_time(vpc.created_at),
        "ResourceGroupId": vpc.resource_group_id,
        "VSwitchIds": {
            "VSwitchId": [v.id for v in backend.vswitches.values() if v.vpc_id == vpc.id]
        },
        "UserCidrs": {"UserCidr": []},
        "Tags": vpc_tags(vpc.tags),
    }


def describe_vpcs(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = backend.check_region(region_of(params))
    with backend.lock:
        vpcs = sorted((v for v in backend.vpcs.values() if v.region == region), key=lambda v: v.id)
        if params.get("VpcId"):
            wanted = {v.strip() for v in params["VpcId"].split(",")}
            vpcs = [v for v in vpcs if v.id in wanted]
        if params.get("VpcName"):
            vpcs = [v for v in vpcs if v.name == params["VpcName"]]
        wanted_tags = indexed_objects(params, "Tag")
        if wanted_tags:
            vpcs = [v for v in vpcs if matches_tags(v.tags, wanted_tags)]
        page, meta = paginate(vpcs, params, max_size=50)
        return {**meta, "Vpcs": {"Vpc": [_vpc_shape(backend, v) for v in page]}}


def describe_vpc_attribute(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        return _vpc_shape(backend, backend.vpc(region_of(params), params.get("VpcId")))


def delete_vpc(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    backend.delete_vpc(region_of(params), params.get("VpcId", ""))
    return {}


def create_vswitch(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    vswitch = backend.create_vswitch(
        region_of(params),
        params.get("VpcId", ""),
        params.get("ZoneId"),
        params.get("CidrBlock"),
        params.get("VSwitchName", ""),
        params.get("Description", ""),
        tags_of(params),
    )
    return {"VSwitchId": vswitch.id}


def _vswitch_shape(backend: AliyunBackend, vswitch: Any) -> dict[str, Any]:

    used = sum(i.vswitch_id == vswitch.id for i in backend.instances.values())
    total = ipaddress.ip_network(vswitch.cidr_block).num_addresses - 4
    return {
        "VSwitchId": vswitch.id,
        "VpcId": vswitch.vpc_id,
        "ZoneId": vswitch.zone_id,
        "RegionId": vswitch.region,
        "CidrBlock": vswitch.cidr_block,
        "VSwitchName": vswitch.name,
        "Description": vswitch.description,
        "Status": vswitch.status,
        "CreationTime": fmt_time(vswitch.created_at),
        "AvailableIpAddressCount": total - used,
        "IsDefault": False,
        "ResourceGroupId": "rg-acfmdefault",
        "Tags": vpc_tags(vswitch.tags),
    }


def describe_vswitches(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = backend.check_region(region_of(params))
    with backend.lock:
        items = sorted(
            (v for v in backend.vswitches.values() if v.region == region), key=lambda v: v.id
        )
        for name, attr in (("VpcId", "vpc_id"), ("VSwitchId", "id"), ("ZoneId", "zone_id")):
            if params.get(name):
                items = [v for v in items if getattr(v, attr) == params[name]]
        if params.get("VSwitchName"):
            items = [v for v in items if v.name == params["VSwitchName"]]
        wanted_tags = indexed_objects(params, "Tag")
        if wanted_tags:
            items = [v for v in items if matches_tags(v.tags, wanted_tags)]
        page, meta = paginate(items, params, max_size=50)
        return {**meta, "VSwitches": {"VSwitch": [_vswitch_shape(backend, v) for v in page]}}


def describe_vswitch_attributes(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        return _vswitch_shape(backend, backend.vswitch(region_of(params), params.get("VSwitchId")))


def delete_vswitch(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    vswitch_id = params.get("VSwitchId", "")
    vswitch = backend.vswitches.get(vswitch_id)
    region = params.get("RegionId") or (vswitch.region if vswitch else "")
    backend.delete_vswitch(region, vswitch_id)
    return {}


# ------------------------------------------------------------------------ routing table

ACTIONS: dict[str, Handler] = {
    # instances
    "RunInstances": run_instances,
    "DescribeInstances": describe_instances,
    "DeleteInstance": delete_instance,
    "DeleteInstances": delete_instances,
    "ModifyInstanceAutoReleaseTime": modify_instance_auto_release_time,
    "DescribeUserData": describe_user_data,
    "DescribeDisks": describe_disks,
    # security groups
    "CreateSecurityGroup": create_security_group,
    "DescribeSecurityGroups": describe_security_groups,
    "DescribeSecurityGroupAttribute": describe_security_group_attribute,
    "AuthorizeSecurityGroup": _authorize("ingress"),
    "AuthorizeSecurityGroupEgress": _authorize("egress"),
    "RevokeSecurityGroup": _revoke("ingress"),
    "RevokeSecurityGroupEgress": _revoke("egress"),
    "DeleteSecurityGroup": delete_security_group,
    # key pairs
    "ImportKeyPair": import_key_pair,
    "DescribeKeyPairs": describe_key_pairs,
    "DeleteKeyPairs": delete_key_pairs,
    # catalogue, stock, prices
    "DescribeRegions": describe_regions,
    "DescribeImages": describe_images,
    "DescribeZones": describe_zones,
    "DescribeAvailableResource": describe_available_resource,
    "DescribePrice": describe_price,
    # cloud assistant
    "RunCommand": run_command,
    "DescribeInvocationResults": describe_invocation_results,
    # tags
    "TagResources": tag_resources,
    "UntagResources": untag_resources,
    "ListTagResources": list_tag_resources,
    # VPC API actions (same names in ECS 2014-05-26 and VPC 2016-04-28)
    "CreateVpc": create_vpc,
    "DescribeVpcs": describe_vpcs,
    "DescribeVpcAttribute": describe_vpc_attribute,
    "DeleteVpc": delete_vpc,
    "CreateVSwitch": create_vswitch,
    "DescribeVSwitches": describe_vswitches,
    "DescribeVSwitchAttributes": describe_vswitch_attributes,
    "DeleteVSwitch": delete_vswitch,
}


def dispatch(
    backend: AliyunBackend, action: str, params: Params, actions: dict[str, Handler] | None = None
) -> dict[str, Any]:
    """Run one action of `actions` (default: ECS and VPC); the caller turns SimError into an
    error response."""
    handler = (ACTIONS if actions is None else actions).get(action)
    if handler is None:
        raise SimError(
            "InvalidAction.NotFound",
            f"Specified api is not found, please check your url and method. ({action})",
            404,
        )
    with backend.lock:
        backend.request_log.append(action)
    try:
        if action != "RunInstances":  # RunInstances checks its faults once its zone is known
            backend.raise_fault(action)
        body = handler(backend, params)
    finally:
        backend.notify()  # wake tests waiting on the state (AliyunBackend.wait_for)
    return {"RequestId": new_request_id(), **body}
