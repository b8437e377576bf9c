"""Amazon Web Services (EC2): the `aws` cloud.

    cloud.py      AwsCloud, the registry's object: wires the modules below to registry.Cloud
    client.py     boto3 clients, the call wrapper (credentials, error codes)
    errors.py     error codes and their kinds (capacity, quota, retryable, permanent)
    images.py     the DLAMI (or Ubuntu) SSM parameter a catalog instance boots
    terraform.py  box request -> terraform/modules/aws_gpu variables, runtime env
    tags.py       resources by orch:box tag;  cleanup.py  deleting them in order
    state.py      DescribeInstances: an instance's state now, spot reclaims (`orch run`)
    ssm.py        SSM Run Command (`orch check --via ssm`)

Prices are the shipped snapshot (catalog/data/aws.toml); zones with stock: EC2 has no stock
API, so failover relies on the capacity codes in errors.py. Nothing here imports boto3 at
module level.
"""

from __future__ import annotations

import importlib
from typing import Any

# `from orchestrator.clouds import aws; aws.list_tagged_resources(...)`: names resolve to their
# module on first access (PEP 562), so importing the package loads nothing.
_EXPORTS = {
    "client": ("client", "tags_of"),
    "errors": ("AwsError", "CAPACITY_CODES", "QUOTA_CODES"),
    "images": ("DLAMI_PYTORCH_SSM", "UBUNTU_2204_SSM", "image_for"),
    "tags": (
        "LIVE_STATES",
        "list_tagged_instances",
        "list_tagged_security_groups",
        "list_tagged_key_pairs",
        "list_tagged_resources",
    ),
    "cleanup": ("terminate_instances", "delete_security_group", "delete_key_pair", "delete_tagged"),
    "ssm": ("run_ssm_command", "SsmTransport"),
    "state": ("instance_state", "SPOT_RECLAIM_CODES"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
