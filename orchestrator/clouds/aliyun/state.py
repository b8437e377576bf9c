"""Aliyun: what ECS says of one instance now, for `orch run`'s watch (DescribeInstances).

ECS releases instances (auto-release, spot reclaim, DeleteInstance): they then disappear from
DescribeInstances, which answers an unknown id in InstanceIds with no entry rather than an
error. A spot instance ECS takes back carries OperationLocks.LockReason "Recycling" until it
is released about 5 minutes later:
https://www.alibabacloud.com/help/en/ecs/user-guide/query-the-interruption-events-of-preemptible-instances
(LockReason values: DescribeInstances,
https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-describeinstances).
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.clouds.aliyun.client import call, ecs_client
from orchestrator.clouds.aliyun.errors import AliyunError
from orchestrator.clouds.values import InstanceState

# ECS instance Status -> orch's normalised states.
STATES = {
    "Pending": "pending",
    "Starting": "pending",
    "Running": "running",
    "Stopping": "stopping",
    "Stopped": "stopped",
}
# The lock a reclaimed spot instance carries (the reference spells it "Recycling" in examples
# and "recycling" in the value list: compared without case).
RECYCLING = "recycling"


def lock_reasons(item: Any) -> list[str]:
    """OperationLocks.LockReason[].LockReason of one DescribeInstances instance model."""
    locks = getattr(getattr(item, "operation_locks", None), "lock_reason", None) or []
    return [lock.lock_reason for lock in locks if lock is not None and lock.lock_reason]


def state_of(item: Any) -> InstanceState:
    """One DescribeInstances `Instances.Instance[]` model -> InstanceState."""
    status = item.status or ""
    if status not in STATES:
        raise AliyunError(f"Alibaba Cloud DescribeInstances: unknown instance status {status!r}")
    reasons = lock_reasons(item)
    recycling = [r for r in reasons if r.lower() == RECYCLING]
    reason = (recycling or reasons or [""])[0]
    return InstanceState(STATES[status], reason, bool(recycling))


def instance_state(region: str, instance_id: str) -> InstanceState:
    """What ECS says of `instance_id` in `region` now; "missing" once ECS no longer lists it.

    Raises NoCredentials / AliyunError (client.call) for API failures."""
    from alibabacloud_ecs20140526 import models

    client = ecs_client(region)
    request = models.DescribeInstancesRequest(
        region_id=region, instance_ids=json.dumps([instance_id])
    )
    body = call("DescribeInstances", lambda: client.describe_instances(request)).body
    items: list[Any] = (body.instances.instance or []) if body.instances else []
    items = [i for i in items if i.instance_id == instance_id]
    return state_of(items[0]) if items else InstanceState("missing")
