"""data "alicloud_zones" (ECS DescribeAvailableResource + DescribeZones).

Schema: a subset of alicloud/data_source_alicloud_zones.go at v1.289.0. Like the real data
source for ECS: zones that DescribeAvailableResource (DestinationResource=Zone) reports as
available, intersected with DescribeZones (InstanceChargeType, SpotStrategy) entries whose
AvailableInstanceTypes hold available_instance_type and whose AvailableDiskCategories hold
available_disk_category; ids sorted.
"""

from __future__ import annotations

import hashlib

from tests.sim.alicloud_provider.client import ApiError
from tests.sim.alicloud_provider.resources.base import BaseDataSource
from tests.sim.alicloud_provider.schema import Bool, List, Object, String, attr, schema

ZONE = Object(
    {
        "id": String(),
        "local_name": String(),
        "available_instance_types": List(String()),
        "available_resource_creation": List(String()),
        "available_disk_categories": List(String()),
        "multi_zone_ids": List(String()),
        "slb_slave_zone_ids": List(String()),
    }
)


class Zones(BaseDataSource):
    @classmethod
    def get_name(cls) -> str:
        return "zones"

    @classmethod
    def get_schema(cls):
        return schema(
            attr("available_instance_type", String(), optional=True),
            attr("available_resource_creation", String(), optional=True),
            attr("available_disk_category", String(), optional=True),
            attr("multi", Bool(), optional=True),
            attr("instance_charge_type", String(), optional=True),
            attr("network_type", String(), optional=True),
            attr("spot_strategy", String(), optional=True),
            attr("enable_details", Bool(), optional=True),
            attr("output_file", String(), optional=True),
            attr("ids", List(String()), computed=True),
            attr("zones", List(ZONE), computed=True),
        )

    def validate(self, diags, type_name, config):
        super().validate(diags, type_name, config)
        self.check_match(
            diags, config, "available_instance_type", r"^ecs\..*", "prefix must be 'ecs.'"
        )
        self.check_in(
            diags,
            config,
            "available_resource_creation",
            [
                "Instance",
                "Rds",
                "PolarDB",
                "KVStore",
                "VSwitch",
                "Disk",
                "IoOptimized",
                "FunctionCompute",
                "Elasticsearch",
                "Slb",
                "MongoDB",
                "Gpdb",
                "HBase",
                "ADB",
            ],
        )
        self.check_in(
            diags,
            config,
            "available_disk_category",
            [
                "all",
                "cloud",
                "ephemeral_ssd",
                "cloud_essd",
                "cloud_efficiency",
                "cloud_ssd",
                "local_disk",
            ],
        )
        self.check_in(diags, config, "instance_charge_type", ["PrePaid", "PostPaid"])
        self.check_in(diags, config, "network_type", ["Vpc", "Classic"])
        self.check_in(
            diags, config, "spot_strategy", ["NoSpot", "SpotAsPriceGo", "SpotWithPriceLimit"]
        )

    def read(self, ctx, config):
        charge = config.get("instance_charge_type") or "PostPaid"
        spot = config.get("spot_strategy") or "NoSpot"
        try:
            available = self.client.ecs(
                "DescribeAvailableResource",
                {
                    "DestinationResource": "Zone",
                    "IoOptimized": "optimized",
                    "InstanceChargeType": charge,
                    "SpotStrategy": spot,
                },
            )
            described = self.client.ecs(
                "DescribeZones", {"InstanceChargeType": charge, "SpotStrategy": spot}
            )
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "reading data alicloud_zones", exc)
            return None
        valid = {
            z["ZoneId"]
            for z in (available.get("AvailableZones") or {}).get("AvailableZone") or []
            if z.get("Status") == "Available"
        }
        wanted_type = config.get("available_instance_type")
        wanted_disk = config.get("available_disk_category")
        zones = {}
        for zone in (described.get("Zones") or {}).get("Zone") or []:
            if zone["ZoneId"] not in valid:
                continue
            types = (zone.get("AvailableInstanceTypes") or {}).get("InstanceTypes") or []
            disks = (zone.get("AvailableDiskCategories") or {}).get("DiskCategories") or []
            if not types or (wanted_type and wanted_type not in types):
                continue
            if not disks or (wanted_disk and wanted_disk not in disks):
                continue
            zones[zone["ZoneId"]] = zone
        ids = sorted(zones)
        details = bool(config.get("enable_details"))
        rows = []
        for zone_id in ids:
            zone = zones[zone_id]
            rows.append(
                {
                    "id": zone_id,
                    "local_name": zone.get("LocalName", "") if details else None,
                    "available_instance_types": (zone.get("AvailableInstanceTypes") or {}).get(
                        "InstanceTypes"
                    )
                    if details
                    else None,
                    "available_resource_creation": (
                        zone.get("AvailableResourceCreation") or {}
                    ).get("ResourceTypes")
                    if details
                    else None,
                    "available_disk_categories": (zone.get("AvailableDiskCategories") or {}).get(
                        "DiskCategories"
                    )
                    if details
                    else None,
                    "multi_zone_ids": None,
                    "slb_slave_zone_ids": None,
                }
            )
        return {
            **config,
            "id": hashlib.sha256(",".join(ids).encode()).hexdigest()[:16],
            "ids": ids,
            "zones": rows,
        }
