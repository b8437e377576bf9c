"""Aliyun: the account's vCPU quota for pay-as-you-go or spot instances in a region (issue 24:
quota before a cluster launches).

ECS keeps one vCPU quota per region and billing method, not per family: DescribeAccountAttributes
with AttributeName max-postpaid-instance-vcpu-count ("the maximum number of vCPUs for
pay-as-you-go instances") or max-spot-instance-vcpu-count ("... for spot instances"); the answer
is AccountAttributeItems.AccountAttributeItem[].AttributeValues.ValueItem[].Value
(ECS 2014-05-26 DescribeAccountAttributes,
https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-describeaccountattributes;
the request and response models of alibabacloud_ecs20140526). The same call answers
used-postpaid-instance-vcpu-count / used-spot-instance-vcpu-count ("the number of vCPUs that
have been used by" those instances), what the region's instances already hold of the quota: a
new launch has the maximum minus that. An increase is asked for in the Quota Center console
under the same quota.
"""

from __future__ import annotations

import math
from typing import Any

from orchestrator.clouds.aliyun.client import call, ecs_client
from orchestrator.clouds.values import VcpuQuota

ATTRIBUTES = {
    False: ("max-postpaid-instance-vcpu-count", "ECS pay-as-you-go instance vCPUs"),
    True: ("max-spot-instance-vcpu-count", "ECS spot instance vCPUs"),
}
# The vCPUs already in use under each quota, read in the same call (AttributeName.N, N 1-8):
# used-postpaid-instance-vcpu-count, used-spot-instance-vcpu-count (the same API reference;
# DescribeAccountAttributesRequest.attribute_name in alibabacloud_ecs20140526).
USED = {False: "used-postpaid-instance-vcpu-count", True: "used-spot-instance-vcpu-count"}
SOURCE = "ECS DescribeAccountAttributes"


def vcpu_quota(region: str, instance_type: str, spot: bool) -> VcpuQuota | None:
    """The region's vCPU quota for the market (every family shares it) and the vCPUs in use
    under it; None when ECS gives no limit. `instance_type` is not needed: the quota is not per
    family."""
    from alibabacloud_ecs20140526 import models

    attribute, name = ATTRIBUTES[spot]
    request = models.DescribeAccountAttributesRequest(
        region_id=region, attribute_name=[attribute, USED[spot]]
    )
    client = ecs_client(region)
    body = call(
        "DescribeAccountAttributes", lambda: client.describe_account_attributes(request)
    ).body
    items = (
        body.account_attribute_items.account_attribute_item if body.account_attribute_items else []
    )
    values = {a: _number(items or [], a) for a in (attribute, USED[spot])}
    limit, in_use = values[attribute], values[USED[spot]]
    if limit is None:
        return None
    problem = "" if in_use is not None else f"ECS gave no number for {USED[spot]}"
    return VcpuQuota(name, attribute, limit, SOURCE, in_use=in_use, in_use_problem=problem)


def _number(items: list[Any], attribute: str) -> float | None:
    """The first non-negative number ECS gives for `attribute`; None when it gives none."""
    for item in items:
        if getattr(item, "attribute_name", None) != attribute or not item.attribute_values:
            continue
        for value in item.attribute_values.value_item or []:
            try:
                number = float(value.value)
            except (TypeError, ValueError):
                continue
            if math.isfinite(number) and number >= 0:
                return number
    return None
