"""AWS prices for `orch catalog refresh --cloud aws`: the Price List API and spot price history.

Two calls, both through boto3 (imported inside the functions: `orch plan` never loads it):

- on-demand: `pricing` GetProducts (JSON 1.1 protocol, X-Amz-Target
  AWSPriceListService.GetProducts), one filtered query per instance type, paginated by
  NextToken. Each PriceList item is a JSON *string* holding one product and its terms; the
  hourly price is terms.OnDemand.<offer>.priceDimensions.<rate>.pricePerUnit.USD.
  https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_pricing_GetProducts.html
  https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/reading-service-price-list-file-for-services.html
  The Price List API is served from us-east-1 (also eu-central-1, ap-south-1) whatever
  region is priced, so the client always talks to us-east-1.
- spot: EC2 DescribeSpotPriceHistory (EC2 query protocol) in each region, StartTime = now,
  which returns the price in effect per availability zone; the region's figure is the lowest
  zone's, as in the shipped catalog.
  https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeSpotPriceHistory.html

Credentials and endpoints come from the standard chain (AWS_PROFILE, AWS_ACCESS_KEY_ID, ...,
AWS_ENDPOINT_URL); nothing is stored.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Iterable
from typing import Any

from orchestrator.clouds.values import PriceApi
from orchestrator.errors import OrchError

PRICE_LIST_REGION = "us-east-1"
# The Linux, shared-tenancy, no-preinstalled-software, plain on-demand product of a type: the
# same SKU the shipped snapshot records. `capacitystatus = Used` excludes the capacity
# reservation line items, which price at 0 or as "unused reservation".
BASE_FILTERS = (
    ("operatingSystem", "Linux"),
    ("tenancy", "Shared"),
    ("preInstalledSw", "NA"),
    ("capacitystatus", "Used"),
    ("licenseModel", "No License required"),
)
SPOT_PRODUCT = "Linux/UNIX"
SPOT_PAGE = 1000  # DescribeSpotPriceHistory's largest MaxResults
PRODUCTS_PAGE = 100  # GetProducts' largest MaxResults


class AwsPricingError(OrchError):
    """The price APIs could not be reached or refused the call (one line for the CLI)."""


Table = dict[str, dict[str, dict[str, float | None]]]


def refresh_prices(regions: Iterable[str], instance_types: Iterable[str]) -> Table:
    """{instance_type: {region: {"on_demand": x, "spot": y}}}; None where AWS gave no figure.

    Same shape as `clouds.aliyun.refresh_prices`, so `orch catalog refresh` merges both the
    same way. No connection or no permission raises AwsPricingError.
    """
    regions = sorted(set(regions))
    types = list(dict.fromkeys(instance_types))
    on_demand = on_demand_prices(types, regions)
    spot = {region: spot_prices(region, types) for region in regions}
    return {
        t: {r: {"on_demand": on_demand.get(t, {}).get(r), "spot": spot[r].get(t)} for r in regions}
        for t in types
    }


# ------------------------------------------------------------------------------- on-demand


def on_demand_prices(
    instance_types: Iterable[str], regions: Iterable[str]
) -> dict[str, dict[str, float]]:
    """{instance_type: {region: USD per hour}} from GetProducts, for the regions asked for."""
    wanted = set(regions)
    client = _client("pricing", PRICE_LIST_REGION)
    result: dict[str, dict[str, float]] = {}
    for instance_type in instance_types:
        filters = [{"Type": "TERM_MATCH", "Field": "instanceType", "Value": instance_type}]
        filters += [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in BASE_FILTERS]
        for item in _pages(
            client.get_products,
            "PriceList",
            ServiceCode="AmazonEC2",
            Filters=filters,
            FormatVersion="aws_v1",
            MaxResults=PRODUCTS_PAGE,
        ):
            parsed = parse_product(item)
            if parsed is None:
                continue
            name, region, price = parsed
            if name == instance_type and region in wanted:
                # Two SKUs for one type and region would be a filter gap: keep the lower one.
                best = result.setdefault(name, {}).get(region)
                result[name][region] = price if best is None else min(best, price)
    return result


def parse_product(item: str | dict[str, Any]) -> tuple[str, str, float] | None:
    """(instance type, region code, USD/h) from one PriceList entry; None if it has no
    positive hourly on-demand price (e.g. a reservation line item)."""
    product = json.loads(item) if isinstance(item, str) else item
    try:
        attributes = product["product"]["attributes"]
        name, region = attributes["instanceType"], attributes["regionCode"]
        offers = product["terms"]["OnDemand"]
    except (KeyError, TypeError):
        return None
    prices = []
    for offer in offers.values():
        for dimension in offer.get("priceDimensions", {}).values():
            if dimension.get("unit") != "Hrs":
                continue
            try:
                value = float(dimension["pricePerUnit"]["USD"])
            except (KeyError, TypeError, ValueError):
                continue
            if value > 0:
                prices.append(value)
    return (name, region, min(prices)) if prices else None


# ------------------------------------------------------------------------------------ spot


def spot_prices(region: str, instance_types: Iterable[str]) -> dict[str, float]:
    """{instance_type: lowest current spot price over the region's zones}."""
    types = list(instance_types)
    if not types:
        return {}
    client = _client("ec2", region)
    now = _dt.datetime.now(_dt.UTC)
    return lowest_spot(
        _pages(
            client.describe_spot_price_history,
            "SpotPriceHistory",
            InstanceTypes=types,
            ProductDescriptions=[SPOT_PRODUCT],
            StartTime=now,
            MaxResults=SPOT_PAGE,
        )
    )


def lowest_spot(history: Iterable[dict[str, Any]]) -> dict[str, float]:
    """The latest price per (type, zone), then the lowest zone per type."""
    latest: dict[tuple[str, str], tuple[Any, float]] = {}
    for row in history:
        if not str(row.get("ProductDescription", "")).startswith(SPOT_PRODUCT):
            continue  # SUSE, Windows, Red Hat: not the Linux figure
        try:
            key = (row["InstanceType"], row["AvailabilityZone"])
            price = float(row["SpotPrice"])
        except (KeyError, TypeError, ValueError):
            continue
        stamp = row.get("Timestamp")
        if key not in latest or (stamp is not None and stamp > latest[key][0]):
            latest[key] = (stamp, price)
    lowest: dict[str, float] = {}
    for (instance_type, _zone), (_stamp, price) in latest.items():
        if price > 0:
            lowest[instance_type] = min(price, lowest.get(instance_type, price))
    return lowest


# ---------------------------------------------------------------------------------- plumbing


def _client(service: str, region: str) -> Any:
    try:
        import boto3
    except ImportError:
        raise AwsPricingError(
            "boto3 is not installed", hint="pip install boto3 (or orch's aws extra)"
        ) from None
    return boto3.client(service, region_name=region)


def _pages(call: Any, key: str, **request: Any) -> Iterable[Any]:
    """Every item under `key` across NextToken pages, with SDK errors as AwsPricingError."""
    from botocore.exceptions import BotoCoreError, ClientError
    from botocore.parsers import ResponseParserError

    from orchestrator.clouds.aws.client import ENDPOINT_HINT, unreadable_answer

    token: str | None = None
    while True:
        try:
            page = call(**request, **({"NextToken": token} if token else {}))
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code, message = error.get("Code", "?"), error.get("Message", "")
            raise AwsPricingError(
                f"{exc.operation_name} failed: {code}: {message}",
                hint="needs pricing:GetProducts and ec2:DescribeSpotPriceHistory permissions",
            ) from None
        except BotoCoreError as exc:  # no credentials, no connection, bad endpoint
            raise AwsPricingError(f"AWS price API: {exc}") from None
        except ResponseParserError as exc:  # an HTML page from a proxy (aws/client.py)
            raise AwsPricingError(f"AWS price API: {unreadable_answer(exc)}",
                                  hint=ENDPOINT_HINT) from None  # fmt: skip
        yield from page.get(key, [])
        token = page.get("NextToken") or None
        if not token:
            return


PRICE_API = PriceApi(
    name="the Price List API (GetProducts) and DescribeSpotPriceHistory",
    fetch=refresh_prices,
    source=lambda region: (
        f"AWS Price List API GetProducts (Linux, shared tenancy, region {region});"
        " spot: lowest zone in DescribeSpotPriceHistory"
    ),
)
