"""A loopback stand-in for the two AWS price calls `orch catalog refresh --cloud aws` makes.

moto 5.2 has no `pricing` service, and its DescribeSpotPriceHistory answers one constant
price ("0.00001") for every offering, so neither can check price parsing; this server answers
both with the real response shapes and rejects the requests the real APIs reject. One port
serves both, routed the way the protocols are: a JSON 1.1 request names its operation in
`X-Amz-Target`, an EC2 query request in the form field `Action`. The region of an EC2 call is
read from the SigV4 credential scope (`Credential=AKID/date/<region>/ec2/aws4_request`).

- Price List GetProducts (JSON 1.1, target AWSPriceListService.GetProducts):
  https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_pricing_GetProducts.html
  Request {ServiceCode, Filters[{Type, Field, Value}], FormatVersion, MaxResults (1-100),
  NextToken}; response {FormatVersion, PriceList: [JSON string per product], NextToken}.
  Errors are JSON {"__type", "message"} with HTTP 400 (InvalidParameterException,
  InvalidNextTokenException, NotFoundException for an unknown service code).
  The product document follows the offer file format:
  https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/reading-service-price-list-file-for-services.html
- EC2 DescribeSpotPriceHistory (query protocol, Version 2016-11-15):
  https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeSpotPriceHistory.html
  Request InstanceType.N, ProductDescription.N, StartTime, MaxResults (5-1000), NextToken;
  response <DescribeSpotPriceHistoryResponse><spotPriceHistorySet><item>... with nextToken.
  Errors: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html
  (<Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/></Response>).

`PriceServer(products, spot)` in a `with` block serves on a free port; `server.requests`
records every request for assertions.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

EC2_XMLNS = "http://ec2.amazonaws.com/doc/2016-11-15/"
FILTER_TYPES = {"TERM_MATCH", "EQUALS", "CONTAINS", "ANY_OF", "NONE_OF"}
REGION_NAMES = {  # the Price List's `location` attribute next to `regionCode`
    "us-east-1": "US East (N. Virginia)",
    "us-west-2": "US West (Oregon)",
    "eu-central-1": "EU (Frankfurt)",
    "ap-northeast-1": "Asia Pacific (Tokyo)",
}


def product(instance_type: str, region: str, usd: str, **attributes: str) -> dict[str, Any]:
    """One Price List product document as GetProducts returns it (before JSON encoding)."""
    sku = uuid.uuid5(uuid.NAMESPACE_URL, f"{instance_type}/{region}/{attributes}").hex[:16]
    attrs = {
        "servicecode": "AmazonEC2",
        "instanceType": instance_type,
        "regionCode": region,
        "location": REGION_NAMES.get(region, region),
        "locationType": "AWS Region",
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "licenseModel": "No License required",
        "usagetype": f"BoxUsage:{instance_type}",
        "operation": "RunInstances",
        **attributes,
    }
    offer, rate = "JRTCKXETXF", "6YS6EN2CT7"  # the on-demand offer/rate term codes AWS uses
    return {
        "product": {"productFamily": "Compute Instance", "attributes": attrs, "sku": sku},
        "serviceCode": "AmazonEC2",
        "terms": {
            "OnDemand": {
                f"{sku}.{offer}": {
                    "priceDimensions": {
                        f"{sku}.{offer}.{rate}": {
                            "unit": "Hrs",
                            "endRange": "Inf",
                            "description": f"${usd} per On Demand Linux {instance_type} Hour",
                            "appliesTo": [],
                            "rateCode": f"{sku}.{offer}.{rate}",
                            "beginRange": "0",
                            "pricePerUnit": {"USD": usd},
                        }
                    },
                    "sku": sku,
                    "effectiveDate": "2025-06-01T00:00:00Z",
                    "offerTermCode": offer,
                    "termAttributes": {},
                }
            },
            "Reserved": {},
        },
        "version": "20251201000000",
        "publicationDate": "2025-12-01T00:00:00Z",
    }


@dataclass
class SpotRow:
    region: str
    zone: str
    instance_type: str
    price: str
    timestamp: str  # ISO 8601, "2026-12-03T08:00:00.000Z"
    product: str = "Linux/UNIX"


@dataclass
class PriceServer:
    products: list[dict[str, Any]]
    spot: list[SpotRow]
    # Both APIs may return fewer items than MaxResults, with a NextToken: cap pages to test it.
    page_size: int | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __enter__(self) -> PriceServer:
        handler = type("Handler", (_Handler,), {"sim": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.endpoint = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    # ----------------------------------------------------------------- GetProducts

    def get_products(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if body.get("ServiceCode") != "AmazonEC2":
            return 400, _json_error("NotFoundException", "Service not found")
        filters = body.get("Filters", [])
        for f in filters:
            if f.get("Type") not in FILTER_TYPES or not f.get("Field") or "Value" not in f:
                return 400, _json_error("InvalidParameterException", f"Invalid filter: {f}")
        size = body.get("MaxResults", 100)
        if not isinstance(size, int) or not 1 <= size <= 100:
            return 400, _json_error("InvalidParameterException", "MaxResults must be 1..100")
        matches = [
            p
            for p in self.products
            if all(p["product"]["attributes"].get(f["Field"]) == f["Value"] for f in filters)
        ]
        start = _offset(body.get("NextToken"))
        if start is None or start > len(matches):
            return 400, _json_error("InvalidNextTokenException", "The token is invalid")
        size = min(size, self.page_size or size)
        page = matches[start : start + size]
        reply: dict[str, Any] = {
            "FormatVersion": body.get("FormatVersion", "aws_v1"),
            "PriceList": [json.dumps(p) for p in page],  # strings, as the real API sends them
        }
        if start + size < len(matches):
            reply["NextToken"] = f"page:{start + size}"
        return 200, reply

    # ---------------------------------------------------- DescribeSpotPriceHistory

    def describe_spot_price_history(
        self, region: str, form: dict[str, list[str]]
    ) -> tuple[int, str]:
        if form.get("Version", [""])[0] != "2016-11-15":
            return 400, _xml_error("InvalidParameterValue", "Unsupported API version")
        types = _members(form, "InstanceType")
        products = _members(form, "ProductDescription")
        size = int(form.get("MaxResults", ["1000"])[0])
        if not 5 <= size <= 1000:
            return 400, _xml_error("InvalidParameterValue", "MaxResults must be 5..1000")
        if not re.fullmatch(
            r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?", form.get("StartTime", ["x"])[0]
        ):
            return 400, _xml_error("InvalidParameterValue", "StartTime must be an ISO 8601 time")
        rows = [
            r
            for r in self.spot
            if r.region == region
            and (not types or r.instance_type in types)
            and (not products or r.product in products)
        ]
        start = _offset(form.get("NextToken", [None])[0])
        if start is None or start > len(rows):
            return 400, _xml_error("InvalidNextToken", "The token is invalid")
        size = min(size, self.page_size or size)
        page, more = rows[start : start + size], start + size < len(rows)
        items = "".join(
            "<item>"
            f"<instanceType>{escape(r.instance_type)}</instanceType>"
            f"<productDescription>{escape(r.product)}</productDescription>"
            f"<spotPrice>{escape(r.price)}</spotPrice>"
            f"<timestamp>{escape(r.timestamp)}</timestamp>"
            f"<availabilityZone>{escape(r.zone)}</availabilityZone>"
            "</item>"
            for r in page
        )
        token = f"<nextToken>page:{start + size}</nextToken>" if more else "<nextToken/>"
        return 200, (
            f'<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<DescribeSpotPriceHistoryResponse xmlns="{EC2_XMLNS}">'
            f"<requestId>{uuid.uuid4()}</requestId>"
            f"<spotPriceHistorySet>{items}</spotPriceHistorySet>{token}"
            "</DescribeSpotPriceHistoryResponse>"
        )


def _offset(token: str | None) -> int | None:
    if token is None:
        return 0
    match = re.fullmatch(r"page:(\d+)", token)
    return int(match.group(1)) if match else None


def _members(form: dict[str, list[str]], name: str) -> list[str]:
    """EC2 query lists: InstanceType.1=..., InstanceType.2=..."""
    keys = sorted(
        (k for k in form if re.fullmatch(rf"{name}\.\d+", k)), key=lambda k: int(k.split(".")[1])
    )
    return [form[k][0] for k in keys]


def _json_error(kind: str, message: str) -> dict[str, Any]:
    return {"__type": kind, "message": message}


def _xml_error(code: str, message: str) -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{code}</Code><Message>{escape(message)}</Message>"
        f"</Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>"
    )


class _Handler(BaseHTTPRequestHandler):
    sim: PriceServer

    def log_message(self, *_: object) -> None:  # keep pytest output clean
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        scope = re.search(
            r"Credential=[^/]+/\d{8}/([^/]+)/([^/]+)/aws4_request",
            self.headers.get("Authorization", ""),
        )
        if scope is None:
            # Unsigned: both APIs refuse it before looking at the operation.
            return self._send(
                403,
                "application/json",
                json.dumps(
                    _json_error(
                        "MissingAuthenticationTokenException", "Missing Authentication Token"
                    )
                ),
            )
        region, service = scope.groups()
        target = self.headers.get("X-Amz-Target")
        if target is not None:
            record = {
                "service": service,
                "region": region,
                "target": target,
                "body": json.loads(body or b"{}"),
            }
            self.sim.requests.append(record)
            if target != "AWSPriceListService.GetProducts":
                status, reply = 400, _json_error("UnknownOperationException", target)
            elif self.headers.get("Content-Type") != "application/x-amz-json-1.1":
                status, reply = 400, _json_error("SerializationException", "bad content type")
            else:
                status, reply = self.sim.get_products(record["body"])
            return self._send(status, "application/x-amz-json-1.1", json.dumps(reply))
        form = parse_qs(body.decode(), keep_blank_values=True)
        action = form.get("Action", [""])[0]
        self.sim.requests.append(
            {"service": service, "region": region, "action": action, "form": form}
        )
        if action != "DescribeSpotPriceHistory":
            return self._send(
                400, "text/xml", _xml_error("InvalidAction", f"{action} is not valid")
            )
        status, xml = self.sim.describe_spot_price_history(region, form)
        return self._send(status, "text/xml", xml)

    def _send(self, status: int, content_type: str, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
