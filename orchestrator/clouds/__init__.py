"""Clouds: one package per cloud behind `orchestrator.clouds.base.Cloud`, found by name.

    from orchestrator import clouds
    cloud = clouds.get(box.cloud)      # never `if cloud == ...`

The built-in clouds are registered here by reference only: their modules (and SDKs) load when
a command first asks for them. See docs/adding-a-cloud.md.
"""

from orchestrator.clouds.base import (
    Cloud,
    CloudError,
    CommandResult,
    ErrorKind,
    InstanceState,
    ObjectStore,
    TaggedResource,
    all_clouds,
    check_name,
    get,
    instance_state_of,
    names,
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
    "CommandResult",
    "ErrorKind",
    "InstanceState",
    "ObjectStore",
    "TaggedResource",
    "all_clouds",
    "check_name",
    "get",
    "instance_state_of",
    "resolve_image_of",
    "names",
    "object_store_at",
    "register",
    "ssh_key_type_of",
]
