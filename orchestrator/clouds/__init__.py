"""Clouds: one package per cloud behind `orchestrator.clouds.registry.Cloud`, found by name.

    from orchestrator import clouds
    cloud = clouds.get(box.cloud)      # never `if cloud == ...`

The built-in clouds are registered here by reference only: their modules (and SDKs) load when
a command first asks for them. See docs/adding-a-cloud.md. The values of online calls are in
`orchestrator.clouds.values` (not loaded by offline commands).
"""

from orchestrator.clouds.base import CloudError, ErrorKind
from orchestrator.clouds.registry import (
    Cloud,
    all_clouds,
    check_name,
    get,
    instance_state_of,
    names,
    node_resource_of,
    object_store_at,
    register,
    resolve_image_of,
    ssh_key_type_of,
)

register("aws", "orchestrator.clouds.aws.cloud:AwsCloud")
register("aliyun", "orchestrator.clouds.aliyun.cloud:AliyunCloud")

__all__ = [
    "Cloud",
    "CloudError",
    "ErrorKind",
    "all_clouds",
    "check_name",
    "get",
    "instance_state_of",
    "resolve_image_of",
    "names",
    "node_resource_of",
    "object_store_at",
    "register",
    "ssh_key_type_of",
]
