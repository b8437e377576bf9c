"""Alibaba Cloud (ECS): the `aliyun` cloud.

    cloud.py      AliyunCloud, the registry's object: wires the modules below to registry.Cloud
    client.py     SDK clients (ECS, VPC RPC), credentials, endpoints, the call wrapper
    errors.py     error codes and their kinds (capacity, quota, retryable, permanent)
    images.py     the image a catalog instance boots (offline)
    image_lookup.py  the DescribeImages lookup by name pattern
    terraform.py  box request -> terraform/modules/aliyun_gpu variables
    stock.py      DescribeAvailableResource: zones with stock
    prices.py     DescribePrice (`orch catalog refresh --cloud aliyun`)
    tags.py       resources by orch tag;  cleanup.py  deleting them in dependency order
    agent.py      Cloud Assistant (`orch check --via cloud-assistant`)
    state.py      DescribeInstances: an instance's state now, spot reclaims (`orch run`)

Nothing here imports the SDK at module level: `orch plan` loads cloud.py without it.
"""

from __future__ import annotations

import importlib
from typing import Any

# `from orchestrator.clouds import aliyun; aliyun.refresh_prices(...)` keeps working: names
# resolve to their module on first access (PEP 562), so importing the package loads nothing.
_EXPORTS = {
    "client": (
        "ENDPOINT_ENV",
        "VPC_ENDPOINT_ENV",
        "endpoint_config",
        "ecs_client",
        "vpc_client",
        "OrchError",
    ),
    "errors": ("AliyunError", "CapacityError", "CAPACITY_CODES", "QUOTA_CODES"),
    "images": ("image_for",),
    "image_lookup": ("Image", "find_image"),
    "stock": ("check_stock",),
    "prices": ("describe_price", "refresh_prices"),
    "tags": (
        "list_tagged_instances",
        "list_tagged_security_groups",
        "list_tagged_key_pairs",
        "list_tagged_vpcs",
        "list_tagged_vswitches",
        "list_tagged_resources",
    ),
    "cleanup": (
        "release_instance",
        "wait_instances_released",
        "delete_security_group",
        "delete_key_pairs",
        "delete_vswitch",
        "delete_vpc",
        "delete_tagged",
    ),
    "agent": ("run_command", "CloudAssistantTransport"),
    "state": ("instance_state",),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
