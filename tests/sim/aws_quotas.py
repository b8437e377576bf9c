"""A loopback stand-in for the two AWS Service Quotas calls `orch doctor --online` makes.

moto 5.2 serves Service Quotas for the `vpc` service code only (ListAWSDefaultServiceQuotas
and GetServiceQuota answer NoSuchResourceException for `ec2`), so this server answers both
for `ec2` with the real response shapes (JSON 1.1, target prefix ServiceQuotasV20190624, as
botocore's service-quotas/2019-06-24 model says) and refuses what the real API refuses:
- ListAWSDefaultServiceQuotas {ServiceCode, NextToken, MaxResults 1-100} ->
  {Quotas: [ServiceQuota], NextToken}; an unknown service code: NoSuchResourceException; a
  bad token: InvalidPaginationTokenException
  (https://docs.aws.amazon.com/servicequotas/2019-06-24/apireference/API_ListAWSDefaultServiceQuotas.html).
- GetServiceQuota {ServiceCode, QuotaCode} -> {Quota: ServiceQuota}, the value applied to the
  account; NoSuchResourceException when the code is unknown or no value was ever applied
  (https://docs.aws.amazon.com/servicequotas/2019-06-24/apireference/API_GetServiceQuota.html).
Errors are JSON {"__type", "message"} with HTTP 400; an unsigned request is 403.

The quota names and codes are EC2's (the Service Quotas console's EC2 list); the values are
test data: `defaults` as a new account's, `applied` as an account with one raised quota.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TARGET_PREFIX = "ServiceQuotasV20190624."

EC2_DEFAULTS = [
    ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances", 5.0),
    ("L-DB2E81BA", "Running On-Demand G and VT instances", 0.0),
    ("L-417A185B", "Running On-Demand P instances", 0.0),
    ("L-3819A6DF", "All G and VT Spot Instance Requests", 0.0),
    ("L-7212CCBC", "All P4, P3 and P2 Spot Instance Requests", 0.0),
    ("L-C4BD4855", "All P5 Spot Instance Requests", 0.0),
    ("L-0263D0A3", "EC2-VPC Elastic IPs", 5.0),
]


def quota(code: str, name: str, value: float, region: str) -> dict[str, Any]:
    return {
        "ServiceCode": "ec2",
        "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
        "QuotaArn": f"arn:aws:servicequotas:{region}::ec2/{code}",
        "QuotaCode": code,
        "QuotaName": name,
        "Value": value,
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": False,
    }


@dataclass
class QuotaServer:
    applied: dict[str, float]  # quota code -> the account's value
    page_size: int | None = None  # answer fewer than MaxResults, with a NextToken
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __enter__(self) -> QuotaServer:
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

    def answer(self, operation: str, body: dict[str, Any], region: str) -> tuple[int, Any]:
        if body.get("ServiceCode") != "ec2":
            return 400, _error("NoSuchResourceException", "The request failed because the"
                               " specified service does not exist.")  # fmt: skip
        if operation == "ListAWSDefaultServiceQuotas":
            size = body.get("MaxResults", 100)
            if not isinstance(size, int) or not 1 <= size <= 100:
                return 400, _error("IllegalArgumentException", "MaxResults must be 1..100")
            token = body.get("NextToken", "page:0")
            found = re.fullmatch(r"page:(\d+)", str(token))
            if not found or int(found.group(1)) > len(EC2_DEFAULTS):
                return 400, _error("InvalidPaginationTokenException", "Invalid token")
            start, size = int(found.group(1)), min(size, self.page_size or size)
            rows = EC2_DEFAULTS[start : start + size]
            reply: dict[str, Any] = {"Quotas": [quota(*row, region) for row in rows]}
            if start + size < len(EC2_DEFAULTS):
                reply["NextToken"] = f"page:{start + size}"
            return 200, reply
        if operation == "GetServiceQuota":
            names = {code: name for code, name, _ in EC2_DEFAULTS}
            code = body.get("QuotaCode")
            if code not in names or code not in self.applied:
                return 400, _error("NoSuchResourceException", "The specified resource does"
                                   " not exist.")  # fmt: skip
            return 200, {"Quota": quota(code, names[code], self.applied[code], region)}
        return 400, _error("UnknownOperationException", operation)


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"__type": kind, "message": message}


class _Handler(BaseHTTPRequestHandler):
    sim: QuotaServer

    def log_message(self, *_: object) -> None:  # keep pytest output clean
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        scope = re.search(
            r"Credential=[^/]+/\d{8}/([^/]+)/servicequotas/aws4_request",
            self.headers.get("Authorization", ""),
        )
        target = self.headers.get("X-Amz-Target", "")
        if scope is None:
            status, reply = 403, _error("MissingAuthenticationTokenException", "Missing token")
        elif not target.startswith(TARGET_PREFIX):
            status, reply = 400, _error("UnknownOperationException", target)
        elif self.headers.get("Content-Type") != "application/x-amz-json-1.1":
            status, reply = 400, _error("SerializationException", "bad content type")
        else:
            operation = target[len(TARGET_PREFIX) :]
            self.sim.requests.append({"operation": operation, "body": body})
            status, reply = self.sim.answer(operation, body, scope.group(1))
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
