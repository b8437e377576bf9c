"""The catalogue: regions, images, zones, available resources (stock), spot and on-demand
prices (DescribePrice)."""

from __future__ import annotations

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
    SimError,
    invalid,
)
from tests.sim.aliyun.responses.params import Params, integer, paginate, region_of


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


# DescribeAvailableResource's stock categories that mean "can be bought now".
IN_STOCK = ("WithStock", "ClosedWithStock")


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
    result = []
    for zone in zones_of(region):
        if zone_filter and zone != zone_filter:
            continue
        statuses = {t: backend.stock_status(region, zone, t, spot) for t in types}
        if not statuses:
            continue
        zone_ok = any(s in IN_STOCK for s in statuses.values())
        resources = _available_resources(destination, zone, zone_ok, statuses)
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


def _available_resources(
    destination: str, zone: str, zone_ok: bool, statuses: dict[str, str]
) -> list[dict[str, Any]]:
    """One zone's AvailableResource list for `destination`: the zone itself (in stock if any
    of the types is), the system disk categories, or else each instance type's stock."""
    if destination == "Zone":
        kind = "Zone"
        supported = [
            {
                "Value": zone,
                "Status": "Available" if zone_ok else "SoldOut",
                "StatusCategory": "WithStock" if zone_ok else "WithoutStock",
            }
        ]
    elif destination == "SystemDisk":
        kind = "SystemDisk"
        supported = [
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
    else:
        kind = "InstanceType"
        supported = [
            {
                "Value": name,
                "Status": "Available" if status in IN_STOCK else "SoldOut",
                "StatusCategory": status,
            }
            for name, status in statuses.items()
        ]
    return [{"Type": kind, "SupportedResources": {"SupportedResource": supported}}]


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
