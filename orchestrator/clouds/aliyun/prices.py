"""Aliyun prices: DescribePrice, per instance type, region and market."""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.clouds.aliyun.client import call, ecs_client
from orchestrator.clouds.aliyun.errors import CURRENCY_MISMATCH, FATAL_PRICE_CODES, AliyunError
from orchestrator.clouds.values import PriceApi


def describe_price(
    region: str,
    instance_type: str,
    spot: bool,
    system_disk_category: str = "cloud_essd",
    system_disk_size: int = 40,
    currency: str | None = None,
    zone: str | None = None,
) -> float:
    """USD (or the account's currency) per hour for the instance alone, via DescribePrice.

    DescribePrice prices the instance with its system disk; the instance's own line
    (DetailInfo Resource "instanceType") is returned when the API itemises the price.
    With `currency` ("USD"), a price in another currency (a China-site account is billed in
    CNY) raises AliyunError with code CURRENCY_MISMATCH instead of being returned.
    Spot prices differ by zone: `zone` prices that one (ZoneId).
    """
    from alibabacloud_ecs20140526 import models

    request = models.DescribePriceRequest(
        region_id=region,
        resource_type="instance",
        instance_type=instance_type,
        price_unit="Hour",
        period=1,
        spot_strategy="SpotAsPriceGo" if spot else "NoSpot",
        zone_id=zone,
        system_disk=models.DescribePriceRequestSystemDisk(
            category=system_disk_category, size=system_disk_size
        ),
    )
    client = ecs_client(region)
    body = call("DescribePrice", lambda: client.describe_price(request)).body
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
                    # Spot: the price of the zone a box would use (the first with stock).
                    zone = spot_zone(region, instance_type) if spot else None
                    row[market] = describe_price(
                        region, instance_type, spot, currency=currency, zone=zone
                    )
                except AliyunError as exc:
                    if exc.code in FATAL_PRICE_CODES:
                        raise  # no connection or no permission: every other call fails too
                    row[market] = None
            table.setdefault(instance_type, {})[region] = row
    return table


def spot_zone(region: str, instance_type: str) -> str:
    """The zone `orch up` would launch a spot `instance_type` in: the first with stock."""
    from orchestrator.clouds.aliyun.stock import check_stock

    return check_stock(region, instance_type, spot=True)[0]


PRICE_API = PriceApi(
    name="DescribePrice",
    # The catalog is in USD: a price in another currency (a China-site account) is refused.
    fetch=lambda regions, names: refresh_prices(regions, names, currency="USD"),
    source=lambda region: f"Alibaba Cloud DescribePrice API (region {region})",
)
