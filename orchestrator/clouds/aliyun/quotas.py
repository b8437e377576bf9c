"""Aliyun: the account's vCPU quota for pay-as-you-go or spot instances in a region (issue 24:
quota before a cluster launches).

ECS keeps one vCPU quota per region and billing method, not per family: DescribeAccountAttributes
with AttributeName max-postpaid-instance-vcpu-count ("the maximum number of vCPUs for
pay-as-you-go instances") or max-spot-instance-vcpu-count ("... for spot instances"); the answer
is AccountAttributeItems.AccountAttributeItem[].AttributeValues.ValueItem[].Value
(ECS 2014-05-26 DescribeAccountAttributes,
https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-describeaccountattributes;
the request and response models of alibabacloud_ecs20140526). An increase is asked for in the
Quota Center console under the same quota.
"""

from __future__ import annotations

from orchestrator.clouds.aliyun.client import call, ecs_client
from orchestrator.clouds.values import VcpuQuota

ATTRIBUTES = {
    False: ("max-postpaid-instance-vcpu-count", "ECS pay-as-you-go instance vCPUs"),
    True: ("max-spot-instance-vcpu-count", "ECS spot instance vCPUs"),
}
SOURCE = "ECS DescribeAccountAttributes"


def vcpu_quota(region: str, instance_type: str, spot: bool) -> VcpuQuota | None:
    """The region's vCPU quota for the market (every family shares it); None when ECS gives no
    number. `instance_type` is not needed: the quota is not per family."""
    from alibabacloud_ecs20140526 import models

    attribute, name = ATTRIBUTES[spot]
    request = models.DescribeAccountAttributesRequest(region_id=region, attribute_name=[attribute])
    client = ecs_client(region)
    body = call(
        "DescribeAccountAttributes", lambda: client.describe_account_attributes(request)
    ).body
    items = (
        body.account_attribute_items.account_attribute_item if body.account_attribute_items else []
    )
    for item in items or []:
        if item.attribute_name != attribute or not item.attribute_values:
            continue
        for value in item.attribute_values.value_item or []:
            try:
                limit = float(value.value)
            except (TypeError, ValueError):
                continue
            return VcpuQuota(name=name, code=attribute, limit=limit, source=SOURCE)
    return None
