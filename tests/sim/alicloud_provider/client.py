"""RPC calls through the Alibaba Cloud SDK, the way the real provider's `client.RpcPost` does.

The real provider sends flat parameter maps (`request["SystemDisk.Category"] = ...`) with
`client.RpcPost("Ecs", "2014-05-26", action, nil, request, true)`. Here the same maps go through
the ECS SDK client's generic `call_api` (alibabacloud-ecs20140526 inherits it from
alibabacloud-tea-openapi), with API version 2014-05-26 for ECS and 2016-04-28 for VPC.

RAM calls (2015-05-01) take no RegionId and go to ram.aliyuncs.com.
Endpoints: ALIBABA_CLOUD_ENDPOINT_ECS / _VPC / _RAM, as in the real provider
(connectivity.loadEndpoint); `http://host:port` selects plain HTTP for the local emulator.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Any

VERSIONS = {"ecs": "2014-05-26", "vpc": "2016-04-28", "ram": "2015-05-01"}
# RAM is global: one endpoint for every region (connectivity's endpoint table).
GLOBAL_ENDPOINTS = {"ram": "ram.aliyuncs.com"}


class ApiError(Exception):
    def __init__(self, code: str, message: str, action: str):
        super().__init__(f"[{action}] {code}: {message}")
        self.code = code
        self.action = action


def _endpoint(product: str, region: str) -> tuple[str, str]:
    raw = os.environ.get(f"ALIBABA_CLOUD_ENDPOINT_{product.upper()}", "").strip()
    if not raw and product == "vpc":
        raw = os.environ.get("ALIBABA_CLOUD_ENDPOINT_ECS", "").strip()
    if not raw:
        return GLOBAL_ENDPOINTS.get(product, f"{product}.{region}.aliyuncs.com"), "HTTPS"
    match = re.fullmatch(r"(?:(https?)://)?([^/\s]+)/?", raw)
    if not match:
        raise ApiError("InvalidEndpoint", f"cannot parse endpoint {raw!r}", "configure")
    return match.group(2), (match.group(1) or "https").upper()


class AliyunClient:
    """One per provider process: region, credentials and one SDK client per product."""

    def __init__(self, region: str, access_key: str, secret_key: str, security_token: str = ""):
        self.region = region
        self.access_key = access_key
        self.secret_key = secret_key
        self.security_token = security_token
        self._clients: dict[str, Any] = {}

    def _client(self, product: str) -> Any:
        if product not in self._clients:
            from alibabacloud_ecs20140526.client import Client as EcsClient
            from alibabacloud_tea_openapi.models import Config

            host, protocol = _endpoint(product, self.region)
            config = Config(
                access_key_id=self.access_key,
                access_key_secret=self.secret_key,
                security_token=self.security_token or None,
                region_id=self.region,
                endpoint=host,
                protocol=protocol,
                read_timeout=30_000,
            )
            # The ECS client is the SDK's product client; its call_api serves VPC calls too,
            # since the endpoint is set explicitly and the version travels with each call.
            self._clients[product] = EcsClient(config)
        return self._clients[product]

    def rpc(self, product: str, action: str, request: dict[str, Any]) -> dict[str, Any]:
        from alibabacloud_tea_openapi.exceptions import AlibabaCloudException
        from alibabacloud_tea_openapi.models import OpenApiRequest, Params
        from alibabacloud_tea_openapi.utils import Utils
        from darabonba.runtime import RuntimeOptions

        params = Params(
            action=action,
            version=VERSIONS[product],
            protocol="HTTPS",
            pathname="/",
            method="POST",
            auth_type="AK",
            style="RPC",
            req_body_type="formData",
            body_type="json",
        )
        region = {} if product in GLOBAL_ENDPOINTS else {"RegionId": self.region}
        query = {**region, **{k: v for k, v in request.items() if v is not None}}
        query = {k: _wire(v) for k, v in query.items()}
        try:
            response = self._client(product).call_api(
                params, OpenApiRequest(query=Utils.query(query)), RuntimeOptions()
            )
        except AlibabaCloudException as exc:
            message = str(exc.message or "").split(" request id:")[0]
            raise ApiError(str(exc.code), message, action) from None
        except Exception as exc:
            raise ApiError("ClientError", f"{type(exc).__name__}: {exc}", action) from None
        return response.get("body") or {}

    def ecs(self, action: str, request: dict[str, Any]) -> dict[str, Any]:
        return self.rpc("ecs", action, request)

    def vpc(self, action: str, request: dict[str, Any]) -> dict[str, Any]:
        return self.rpc("vpc", action, request)


def _wire(value: Any) -> Any:
    """Booleans as the API spells them; lists and dicts stay for Utils.query to flatten."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return [_wire(v) for v in value]
    if isinstance(value, dict):
        return {k: _wire(v) for k, v in value.items()}
    return value


def retry(
    fn: Callable[[], Any],
    *,
    codes: tuple[str, ...],
    timeout_s: float = 120,
    interval_s: float = 0.5,
) -> Any:
    """Call `fn` until it stops raising one of `codes` (the real provider's resource.Retry)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except ApiError as exc:
            if exc.code not in codes or time.monotonic() > deadline:
                raise
        time.sleep(interval_s)


def wait_for(
    probe: Callable[[], Any],
    done: Callable[[Any], bool],
    *,
    timeout_s: float,
    interval_s: float = 0.5,
) -> Any:
    """Poll `probe` until `done(result)` (the real provider's StateRefreshFunc + WaitForState)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = probe()
        if done(result):
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s; last state: {result!r}")
        time.sleep(interval_s)


def tags_param(tags: dict[str, str] | None) -> list[dict[str, str]] | None:
    if not tags:
        return None
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def tags_from(raw: Any, key: str = "TagKey", value: str = "TagValue") -> dict[str, str]:
    items = (raw or {}).get("Tag") or []
    return {item[key]: item.get(value, "") for item in items if key in item}
