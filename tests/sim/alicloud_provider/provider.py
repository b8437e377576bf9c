"""The provider object: configuration (region, credentials) and the list of resources.

Provider schema: a subset of alicloud/provider.go at v1.289.0 (access_key, secret_key,
security_token, region: all Optional strings, defaulting from the same environment variables).
"""

from __future__ import annotations

import os
from typing import Any

from tf.iface import Provider
from tf.schema import Schema
from tf.utils import Diagnostics

from tests.sim.alicloud_provider.client import AliyunClient
from tests.sim.alicloud_provider.resources.deployment_set import EcsDeploymentSet
from tests.sim.alicloud_provider.resources.images import Images
from tests.sim.alicloud_provider.resources.instance import Instance
from tests.sim.alicloud_provider.resources.network import Vpc, VSwitch
from tests.sim.alicloud_provider.resources.ram import (
    EcsRamRoleAttachment,
    RamPolicy,
    RamRole,
    RamRolePolicyAttachment,
)
from tests.sim.alicloud_provider.resources.security import (
    EcsKeyPair,
    SecurityGroup,
    SecurityGroupRule,
)
from tests.sim.alicloud_provider.resources.zones import Zones
from tests.sim.alicloud_provider.schema import String, attr

# provider.go: schema.MultiEnvDefaultFunc([...]) for each setting, in this order.
ENV_DEFAULTS = {
    "access_key": (
        "ALICLOUD_ACCESS_KEY",
        "ALIBABA_CLOUD_ACCESS_KEY_ID",
        "ALIBABACLOUD_ACCESS_KEY_ID",
    ),
    "secret_key": (
        "ALICLOUD_SECRET_KEY",
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
        "ALIBABACLOUD_ACCESS_KEY_SECRET",
    ),
    "security_token": (
        "ALICLOUD_SECURITY_TOKEN",
        "ALIBABA_CLOUD_SECURITY_TOKEN",
        "ALIBABACLOUD_SECURITY_TOKEN",
    ),
    "region": ("ALICLOUD_REGION", "ALIBABA_CLOUD_REGION"),
}


def _setting(config: dict[str, Any], name: str) -> str:
    value = config.get(name)
    if value:
        return str(value)
    for env in ENV_DEFAULTS[name]:
        if os.environ.get(env):
            return os.environ[env]
    return ""


class AlicloudProvider(Provider):
    def __init__(self) -> None:
        self._client: AliyunClient | None = None

    def get_model_prefix(self) -> str:
        return "alicloud_"

    def full_name(self) -> str:
        return "registry.terraform.io/aliyun/alicloud"

    def get_provider_schema(self, diags: Diagnostics) -> Schema:
        return Schema(
            attributes=[
                attr("access_key", String(), optional=True),
                attr("secret_key", String(), optional=True),
                attr("security_token", String(), optional=True),
                attr("region", String(), optional=True),
            ]
        )

    def validate_config(self, diags: Diagnostics, config: dict[str, Any]) -> None:
        pass

    def configure_provider(self, diags: Diagnostics, config: dict[str, Any]) -> None:
        region = _setting(config, "region")
        access_key = _setting(config, "access_key")
        secret_key = _setting(config, "secret_key")
        if not region:
            diags.add_error("region is required", "Set `region` or ALIBABA_CLOUD_REGION.")
        if not access_key or not secret_key:
            diags.add_error(
                "no credentials",
                "Set access_key/secret_key or ALIBABA_CLOUD_ACCESS_KEY_ID/_SECRET.",
            )
        if not diags.has_errors():
            self._client = AliyunClient(
                region, access_key, secret_key, _setting(config, "security_token")
            )

    def client(self) -> AliyunClient:
        if self._client is None:
            raise RuntimeError("provider used before ConfigureProvider")
        return self._client

    def get_data_sources(self) -> list:
        return [Images, Zones]

    def get_resources(self) -> list:
        return [
            Vpc,
            VSwitch,
            SecurityGroup,
            SecurityGroupRule,
            EcsKeyPair,
            EcsDeploymentSet,
            Instance,
            RamRole,
            RamPolicy,
            RamRolePolicyAttachment,
            EcsRamRoleAttachment,
        ]
