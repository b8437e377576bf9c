"""Alibaba Cloud SDK clients (alibabacloud-ecs20140526) and the one wrapper every call goes
through.

The SDK is imported inside functions so that `orch plan` / `estimate` / `catalog` never load it.

Credentials: ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET (plus
ALIBABA_CLOUD_SECURITY_TOKEN for STS); without them, the SDK's default chain (the
~/.aliyun/config.json / ~/.alibabacloud/credentials profiles, OIDC, an ECS RAM role).

Endpoint override: ALIBABA_CLOUD_ENDPOINT_ECS (and ALIBABA_CLOUD_ENDPOINT_VPC for the VPC API,
default `vpc.<region>.aliyuncs.com`), the variables the alicloud Terraform provider also reads
(connectivity.loadEndpoint: "ALIBABA_CLOUD_ENDPOINT_<PRODUCT>"). A bare host
("ecs.cn-hangzhou.aliyuncs.com") is called over HTTPS; a URL picks its own scheme, so
`http://127.0.0.1:8950` reaches the local emulator (`python -m tests.sim aliyun`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.clouds.aliyun.errors import (
    CAPACITY_CODES,
    QUOTA_CODES,
    AliyunError,
    CapacityError,
)
from orchestrator.clouds.base import NoCredentials
from orchestrator.errors import OrchError, UsageError

if TYPE_CHECKING:  # pragma: no cover
    from alibabacloud_ecs20140526.client import Client

ENDPOINT_ENV = "ALIBABA_CLOUD_ENDPOINT_ECS"
VPC_ENDPOINT_ENV = "ALIBABA_CLOUD_ENDPOINT_VPC"
VPC_API_VERSION = "2016-04-28"
RAM_ENDPOINT_ENV = "ALIBABA_CLOUD_ENDPOINT_RAM"
T = TypeVar("T")


def endpoint_config(variable: str = ENDPOINT_ENV) -> tuple[str, str] | None:
    """(host[:port], protocol) from ALIBABA_CLOUD_ENDPOINT_ECS (or `variable`), or None for the
    SDK's default."""
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return None
    match = re.fullmatch(r"(?:(https?)://)?([^/\s]+)/?", raw)
    if not match:
        raise UsageError(f"{variable}={raw!r} is not a host or an http(s) URL")
    scheme, host = match.groups()
    return host, (scheme or "https").upper()


def ecs_client(region: str) -> Client:
    """An ECS client for `region`, with standard credentials and the endpoint override."""
    return _client(region, endpoint_config())


def vpc_client(region: str) -> Client:
    """A client for the VPC API (2016-04-28) of `region`, for `vpc_rpc`.

    The VPC SDK is not a dependency: the ECS client's generic `call_api` signs and sends any
    RPC action once its endpoint is fixed, and the API version travels with each call.
    """
    endpoint = endpoint_config(VPC_ENDPOINT_ENV) or (f"vpc.{region}.aliyuncs.com", "HTTPS")
    return _client(region, endpoint)


def ram_client(region: str) -> Client:
    """A client for the RAM API (2015-05-01, global: ram.aliyuncs.com, or
    ALIBABA_CLOUD_ENDPOINT_RAM), for clouds/aliyun/ram.py's generic calls."""
    return _client(region, endpoint_config(RAM_ENDPOINT_ENV) or ("ram.aliyuncs.com", "HTTPS"))


def _client(region: str, override: tuple[str, str] | None) -> Client:
    from alibabacloud_ecs20140526.client import Client
    from alibabacloud_tea_openapi.models import Config

    config = Config(region_id=region, read_timeout=30_000)
    key_id = os.environ.get("ALIBABA_CLOUD_ACCESS_KEY_ID", "")
    secret = os.environ.get("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "")
    if key_id and secret:
        # Read here, at call time: the credentials package snapshots the environment when it
        # is first imported.
        config.access_key_id, config.access_key_secret = key_id, secret
        config.security_token = os.environ.get("ALIBABA_CLOUD_SECURITY_TOKEN") or None
    else:
        config.credential = _default_credentials()
    if override is not None:
        config.endpoint, config.protocol = override
    return Client(config)


def _default_credentials() -> Any:
    """The SDK's default chain: profiles (~/.aliyun/config.json, ~/.alibabacloud/credentials),
    OIDC, then an ECS RAM role."""
    from alibabacloud_credentials.client import Client as CredentialClient

    from orchestrator.clouds.aliyun.credentials import quiet_credentials_log

    quiet_credentials_log()  # its providers log tracebacks; the one line below says it all
    try:
        credential = CredentialClient()
        credential.get_credential()  # fail here, with a clear message, rather than mid-call
    except Exception as exc:
        raise NoCredentials(
            "no Alibaba Cloud credentials found",
            hint="set ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET "
            f"({type(exc).__name__})",
        ) from None
    return credential


def call(what: str, fn: Callable[[], T]) -> T:
    """Run one SDK call; turn its exceptions into AliyunError / CapacityError."""
    from alibabacloud_tea_openapi.exceptions import AlibabaCloudException

    try:
        return fn()
    except AlibabaCloudException as exc:
        code = str(exc.code or "")
        text = str(exc.message or exc).split(" request id:")[0]
        kind = CapacityError if code in CAPACITY_CODES | QUOTA_CODES else AliyunError
        raise kind(f"Alibaba Cloud {what} failed: {code}: {text}", code=code) from None
    except OrchError:
        raise
    except Exception as exc:  # connection refused, DNS, TLS: no response at all
        raise AliyunError(f"Alibaba Cloud {what} failed: {type(exc).__name__}: {exc}") from None


def vpc_rpc(region: str, action: str, query: dict[str, Any]) -> dict[str, Any]:
    """One VPC API (2016-04-28) call with flat parameters; the response body as a dict."""
    return rpc(vpc_client(region), VPC_API_VERSION, action, {"RegionId": region, **query})


def rpc(client: Client, version: str, action: str, query: dict[str, Any]) -> dict[str, Any]:
    """One RPC-style call (flat form parameters, signed with the access key) of any product's
    API `version` through the ECS client's generic `call_api`; None values are left out; the
    response body as a dict."""
    from alibabacloud_tea_openapi.models import OpenApiRequest, Params
    from alibabacloud_tea_openapi.utils import Utils
    from darabonba.runtime import RuntimeOptions

    params = Params(
        action=action,
        version=version,
        protocol="HTTPS",
        pathname="/",
        method="POST",
        auth_type="AK",
        style="RPC",
        req_body_type="formData",
        body_type="json",
    )
    flat = {k: v for k, v in query.items() if v is not None}
    request = OpenApiRequest(query=Utils.query(flat))
    response = call(action, lambda: client.call_api(params, request, RuntimeOptions()))
    return response.get("body") or {}
