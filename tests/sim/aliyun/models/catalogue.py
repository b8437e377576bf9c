"""Regions, zones, instance types and images; stock and prices per zone; faults tests inject
(AliyunBackend's catalogue calls)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tests.sim.aliyun.data import (
    INSTANCE_TYPES,
    SYSTEM_IMAGES,
    ImageSpec,
    InstanceTypeSpec,
    zones_of,
)
from tests.sim.aliyun.models.core import SimError, invalid, not_found

# Errors tests can inject, with the HTTP status and message ECS answers them with: RunInstances'
# error table (https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-runinstances:
# 403 Zone.NotOnSale, 403 QuotaExceed.ElasticQuota, 403 OperationDenied.NoStock) and the common
# errors of Alibaba Cloud's RPC APIs (Throttling 400 "Request was denied due to request
# throttling.", ServiceUnavailable 503; the Tea SDK retries neither by default).
FAULT_STATUS: dict[str, tuple[int, str]] = {
    "Zone.NotOnSale": (403, "The specified zone is not available for purchase."),
    "QuotaExceed.ElasticQuota": (
        403,
        "The number of vCPUs assigned to the ECS instances has exceeded the quota in the zone.",
    ),
    "OperationDenied.NoStock": (
        403,
        "Sales of this resource are temporarily suspended in the specified region; "
        "please try again later.",
    ),
    "Throttling": (400, "Request was denied due to request throttling."),
    "NoPermission": (
        403,
        "You are not authorized to do this action. You should be authorized by RAM.",
    ),
    "ServiceUnavailable": (
        503,
        "The request has failed due to a temporary failure of the server.",
    ),
}


@dataclass
class Fault:
    action: str
    code: str
    status: int
    message: str
    zone: str  # "" for any
    times: int


class CatalogueBackend:
    """AliyunBackend's region, zone, type and image checks, stock, prices and injected faults."""

    def check_region(self, region: str | None) -> str:
        if not region:
            raise SimError("MissingParameter", "The input parameter RegionId is mandatory.", 400)
        if not re.fullmatch(r"[a-z]{2}-[a-z]+(-\d+)?", region):
            raise SimError(
                "InvalidRegionId.NotFound", "The specified RegionId does not exist.", 404
            )
        return region

    def check_zone(self, region: str, zone_id: str) -> str:
        if zone_id not in zones_of(region):
            raise SimError("InvalidZoneId.NotFound", "The specified zone does not exist.", 404)
        return zone_id

    def instance_type(self, name: str | None) -> InstanceTypeSpec:
        if not name:
            raise SimError("MissingParameter", "The input parameter InstanceType is mandatory.")
        spec = INSTANCE_TYPES.get(name)
        if spec is None:
            raise not_found("InvalidInstanceType.NotFound", "InstanceType")
        return spec

    def images(self, region: str) -> list[ImageSpec]:
        self.check_region(region)
        return list(SYSTEM_IMAGES)

    def image(self, region: str, image_id: str | None) -> ImageSpec:
        if not image_id:
            raise SimError("MissingParameter", "The input parameter ImageId is mandatory.")
        for image in self.images(region):
            if image.image_id == image_id:
                return image
        raise not_found("InvalidImageId.NotFound", "ImageId")

    # ------------------------------------------------------------------ stock and prices

    def stock_status(self, region: str, zone: str, instance_type: str, spot: bool) -> str:
        """StatusCategory for one zone/type/market: the last matching set_stock rule wins."""
        market = "spot" if spot else "on-demand"
        status = "WithStock"
        for (r, z, t, m), value in self.stock.items():
            if r == region and t == instance_type and z in (zone, "*") and m in (market, "*"):
                status = value
        return status

    def set_stock(
        self, region: str, instance_type: str, status: str, zone: str = "*", market: str = "*"
    ) -> None:
        if status not in ("WithStock", "ClosedWithStock", "WithoutStock", "ClosedWithoutStock"):
            raise invalid(f"unknown stock status {status!r}")
        if market not in ("*", "spot", "on-demand"):
            raise invalid(f"unknown market {market!r}")
        with self.lock:
            key = (region, zone, instance_type, market)
            self.stock.pop(key, None)  # re-inserted last: rules apply in the order they were set
            self.stock[key] = status

    def price(
        self, region: str, spec: InstanceTypeSpec, spot: bool, zone: str | None = None
    ) -> float:
        """Pay-as-you-go price, or the spot price (of `zone` where one was set for it)."""
        on_demand, spot_price = self.prices.get((region, spec.name), (spec.on_demand, spec.spot))
        if spot and zone:
            spot_price = self.zone_spot_prices.get((region, zone, spec.name), spot_price)
        return spot_price if spot else on_demand

    def set_price(
        self,
        region: str,
        instance_type: str,
        on_demand: float,
        spot: float,
        zone: str | None = None,
    ) -> None:
        """Set a type's prices; with `zone`, the spot price of that zone only."""
        self.instance_type(instance_type)
        with self.lock:
            if zone:
                self.check_zone(region, zone)
                self.zone_spot_prices[(region, zone, instance_type)] = spot
            else:
                self.prices[(region, instance_type)] = (on_demand, spot)

    # ------------------------------------------------------------------ injected faults

    def inject_fault(
        self, action: str, code: str, zone: str = "", times: int = 1, message: str = ""
    ) -> None:
        """Make the next `times` calls of `action` (in `zone`, for RunInstances) fail with
        `code`, at the HTTP status the real API answers it with (FAULT_STATUS)."""
        if code not in FAULT_STATUS:
            raise invalid(f"cannot inject {code!r} (choose {', '.join(sorted(FAULT_STATUS))})")
        if times < 1:
            raise invalid("times must be at least 1")
        status, default_message = FAULT_STATUS[code]
        with self.lock:
            self.faults.append(Fault(action, code, status, message or default_message, zone, times))

    def raise_fault(self, action: str, zone: str = "") -> None:
        """Raise the first injected fault that matches this call (and count it used)."""
        with self.lock:
            for fault in self.faults:
                if fault.action == action and fault.zone in ("", zone):
                    fault.times -= 1
                    if fault.times <= 0:
                        self.faults.remove(fault)
                    raise SimError(fault.code, fault.message, fault.status)
