"""Aliyun stock: which zones of a region can launch an instance type now
(DescribeAvailableResource, DestinationResource=InstanceType)."""

from __future__ import annotations

from orchestrator.clouds.aliyun.client import call, ecs_client
from orchestrator.clouds.aliyun.errors import CapacityError


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
    body = call(
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
