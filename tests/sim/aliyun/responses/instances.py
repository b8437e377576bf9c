"""ECS instances and disks: RunInstances, DescribeInstances, DeleteInstance(s),
ModifyInstanceAutoReleaseTime, DescribeUserData, DescribeDisks, and their response shapes."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from tests.sim.aliyun.data import (
    SYSTEM_DISK_CATEGORIES,
)
from tests.sim.aliyun.models import (
    AliyunBackend,
    Disk,
    Instance,
    MarketRequest,
    SimError,
    SystemDiskRequest,
    fmt_minute,
    fmt_time,
    invalid,
    parse_release_time,
)
from tests.sim.aliyun.responses.params import (
    Params,
    ecs_tags,
    flag,
    indexed,
    indexed_objects,
    integer,
    json_list,
    matches_tags,
    paginate,
    region_of,
    tags_of,
)


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
        "DeploymentSetId": instance.deployment_set_id,
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
        "NetworkInterfaces": {"NetworkInterface": [_primary_network_interface(instance)]},
        # The SDK model: OperationLocks.LockReason[] of {LockReason, LockMsg}
        # (DescribeInstancesResponseBodyInstancesInstanceOperationLocks[LockReason]).
        "OperationLocks": {"LockReason": [{"LockReason": r} for r in instance.lock_reasons]},
        "ImageOptions": {"LoginAsNonRoot": False},
    }


def _primary_network_interface(instance: Instance) -> dict[str, Any]:
    """The instance's one ENI: its id and MAC address derived from the instance id."""
    return {
        "NetworkInterfaceId": "eni-" + instance.id[2:],
        "Type": "Primary",
        "PrimaryIpAddress": instance.private_ip,
        "MacAddress": "00:16:3e:" + ":".join(instance.id[-6:][i : i + 2] for i in (0, 2, 4)),
        "PrivateIpSets": {
            "PrivateIpSet": [{"PrivateIpAddress": instance.private_ip, "Primary": True}]
        },
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
        deployment_set_id=params.get("DeploymentSetId") or "",
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
