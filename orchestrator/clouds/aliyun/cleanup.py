"""Aliyun: delete what a box left (instances, key pairs, a cluster's deployment set, security
groups, vSwitches, VPCs, then its RAM role and policy), in dependency order, for `down`'s final
check and `orch sweep`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from orchestrator.clouds.aliyun.client import call, ecs_client, vpc_rpc
from orchestrator.clouds.aliyun.errors import AliyunError
from orchestrator.clouds.base import ErrorKind, retry_while
from orchestrator.clouds.values import TaggedResource
from orchestrator.textui import counted

# How long a release waits for an instance that is still being created (see delete_tagged).
INSTANCE_RETRY_S = 300.0


def retry_while_blocked(
    delete: Callable[[], None], timeout_s: float | None = None, pause_s: float | None = None
) -> None:
    """Retry `delete` while a DependencyViolation (or a busy status) blocks it."""
    retry_while(lambda exc: exc.kind is ErrorKind.RETRYABLE, delete, timeout_s, pause_s)


def release_instance(region: str, instance_id: str) -> None:
    """Release (force-delete) one pay-as-you-go instance; a missing instance is not an error."""
    from alibabacloud_ecs20140526 import models

    client = ecs_client(region)
    request = models.DeleteInstanceRequest(instance_id=instance_id, force=True)
    try:
        call("DeleteInstance", lambda: client.delete_instance(request))
    except AliyunError as exc:
        if exc.code != "InvalidInstanceId.NotFound":
            raise


def wait_instances_released(
    region: str, instance_ids: Iterable[str], timeout_s: float = 300, poll_s: float = 5
) -> None:
    """Wait until DescribeInstances no longer lists any of `instance_ids`.

    A released instance keeps its security group and vSwitch busy (DependencyViolation) until
    ECS has finished with it, which takes seconds to a minute after DeleteInstance.
    """
    from alibabacloud_ecs20140526 import models

    pending = sorted(set(instance_ids))
    if not pending:
        return
    client = ecs_client(region)
    deadline = time.monotonic() + timeout_s
    while True:
        still: list[str] = []
        for start in range(0, len(pending), 100):  # InstanceIds takes at most 100 ids
            request = models.DescribeInstancesRequest(
                region_id=region,
                instance_ids=json.dumps(pending[start : start + 100]),
                page_size=100,
            )
            body = call("DescribeInstances", lambda r=request: client.describe_instances(r)).body
            items = (body.instances.instance or []) if body.instances else []
            still += [item.instance_id for item in items]
        if not still:
            return
        if time.monotonic() > deadline:
            raise AliyunError(
                f"{counted(len(still), 'instance')} not released after {timeout_s:.0f}s: "
                + ", ".join(sorted(still)[:5])
            )
        pending = sorted(still)
        time.sleep(poll_s)


def _ignore_not_found(codes: tuple[str, ...], fn: Callable[[], Any]) -> None:
    try:
        fn()
    except AliyunError as exc:
        if exc.code not in codes:
            raise


def delete_security_group(region: str, group_id: str) -> None:
    """Delete one security group; a missing one is not an error. DependencyViolation (an
    instance still in it) is raised with that code, for the caller to retry."""
    from alibabacloud_ecs20140526 import models

    client = ecs_client(region)
    request = models.DeleteSecurityGroupRequest(region_id=region, security_group_id=group_id)
    _ignore_not_found(
        ("InvalidSecurityGroupId.NotFound",),
        lambda: call("DeleteSecurityGroup", lambda: client.delete_security_group(request)),
    )


def delete_key_pairs(region: str, names: Iterable[str]) -> None:
    """Delete key pairs by name (names that do not exist are skipped by the API)."""
    from alibabacloud_ecs20140526 import models

    names = sorted(set(names))
    if not names:
        return
    client = ecs_client(region)
    for start in range(0, len(names), 100):  # KeyPairNames takes at most 100 names
        request = models.DeleteKeyPairsRequest(
            region_id=region, key_pair_names=json.dumps(names[start : start + 100])
        )
        call("DeleteKeyPairs", lambda r=request: client.delete_key_pairs(r))


def delete_vswitch(region: str, vswitch_id: str) -> None:
    """Delete one vSwitch (VPC API); a missing one is not an error. DependencyViolation (an
    instance still attached) is raised with that code."""
    _ignore_not_found(
        ("InvalidVSwitchId.NotFound", "InvalidVswitchID.NotFound"),
        lambda: vpc_rpc(region, "DeleteVSwitch", {"VSwitchId": vswitch_id}),
    )


def delete_vpc(region: str, vpc_id: str) -> None:
    """Delete one VPC (VPC API); a missing one is not an error. DependencyViolation.* (vSwitches
    or security groups left in it) is raised with that code."""
    _ignore_not_found(
        ("InvalidVpcID.NotFound", "InvalidVpcId.NotFound"),
        lambda: vpc_rpc(region, "DeleteVpc", {"VpcId": vpc_id}),
    )


def delete_tagged(region: str, resources: list[TaggedResource]) -> None:
    """Delete one box's resources: instances first, and what they held once ECS let go."""

    def ids(kind: str) -> list[str]:
        return [r.id for r in resources if r.kind == kind]

    instances = ids("instance")
    for instance_id in instances:
        # An instance in its first moments is refused (IncorrectInstanceStatus.Initializing):
        # wait for it as the provider's alicloud_instance delete does, which retries
        # IncorrectInstanceStatus and IncorrectInstanceStatus.Initializing until its delete
        # timeout (aliyun/terraform-provider-alicloud, alicloud/resource_alicloud_instance.go,
        # resourceAliyunInstanceDelete).
        retry_while_blocked(
            lambda i=instance_id: release_instance(region, i), timeout_s=INSTANCE_RETRY_S
        )
    # Security groups and vSwitches stay busy until ECS has released the instances.
    wait_instances_released(region, instances)
    delete_key_pairs(region, ids("key_pair"))
    from orchestrator.clouds.aliyun.deployment_sets import delete_deployment_set

    for ds_id in ids("deployment_set"):  # empty once its instances are released
        retry_while_blocked(lambda d=ds_id: delete_deployment_set(region, d))
    for group_id in ids("security_group"):
        retry_while_blocked(lambda g=group_id: delete_security_group(region, g))
    for vswitch_id in ids("vswitch"):
        retry_while_blocked(lambda v=vswitch_id: delete_vswitch(region, v))
    for vpc_id in ids("vpc"):
        retry_while_blocked(lambda v=vpc_id: delete_vpc(region, v))
    # Identities last: a released instance no longer holds its role.
    from orchestrator.clouds.aliyun.ram import delete_policy, delete_role

    for name in ids("ram_role"):
        delete_role(region, name)
    for name in ids("ram_policy"):
        delete_policy(region, name)
