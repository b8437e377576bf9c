"""AWS: find orch's resources (instances, security groups, key pairs, a cluster's placement
group, launch template and Elastic IP, and the boxes' IAM roles and instance profiles: iam.py)
by the orch:box tag.

It works from the cloud's view, so boxes whose local state is gone are found too.
"""

from __future__ import annotations

from typing import Any

from orchestrator.clouds.aws.client import call, client, tags_of
from orchestrator.clouds.base import BOX_TAG
from orchestrator.clouds.values import TaggedResource

# Instances in these states still cost money or still hold their security group.
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")


def _box_filters(box: str | None) -> list[dict[str, Any]]:
    if box is None:
        return [{"Name": "tag-key", "Values": [BOX_TAG]}]
    return [{"Name": f"tag:{BOX_TAG}", "Values": [box]}]


def list_tagged_instances(region: str, box: str | None = None) -> list[TaggedResource]:
    """Live instances with an orch:box tag (of one box when `box` is given), all pages."""
    ec2 = client("ec2", region)
    filters = [*_box_filters(box), {"Name": "instance-state-name", "Values": list(LIVE_STATES)}]
    found = []
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=filters, PaginationConfig={"PageSize": 500}
    )
    for page in call("DescribeInstances", list, pages):
        for reservation in page.get("Reservations", []):
            for item in reservation.get("Instances", []):
                found.append(
                    TaggedResource(
                        "instance",
                        item["InstanceId"],
                        item.get("InstanceType", ""),
                        tags_of(item),
                        region=region,
                        state=item.get("State", {}).get("Name", ""),
                    )
                )
    return found


def list_tagged_security_groups(region: str, box: str | None = None) -> list[TaggedResource]:
    ec2 = client("ec2", region)
    pages = ec2.get_paginator("describe_security_groups").paginate(Filters=_box_filters(box))
    return [
        TaggedResource(
            "security_group",
            g["GroupId"],
            g.get("GroupName", ""),
            tags_of(g),
            region=region,
            vpc_id=g.get("VpcId", ""),
        )
        for page in call("DescribeSecurityGroups", list, pages)
        for g in page.get("SecurityGroups", [])
    ]


def list_tagged_key_pairs(region: str, box: str | None = None) -> list[TaggedResource]:
    ec2 = client("ec2", region)  # DescribeKeyPairs has no pagination
    response = call("DescribeKeyPairs", ec2.describe_key_pairs, Filters=_box_filters(box))
    return [
        TaggedResource("key_pair", k["KeyPairId"], k.get("KeyName", ""), tags_of(k), region=region)
        for k in response.get("KeyPairs", [])
    ]


def list_tagged_cluster_parts(region: str, box: str | None = None) -> list[TaggedResource]:
    """What a cluster adds (terraform/modules/aws_gpu/cluster.tf): its placement group, launch
    template and rank 0's Elastic IP, each tagged like the box. Describe calls without
    pagination, except launch templates (DescribePlacementGroups and DescribeAddresses return
    everything at once:
    https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribePlacementGroups.html,
    https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeAddresses.html)."""
    ec2 = client("ec2", region)
    filters = _box_filters(box)
    groups = call("DescribePlacementGroups", ec2.describe_placement_groups, Filters=filters)
    found = [
        TaggedResource(
            "placement_group", g["GroupName"], g.get("Strategy", ""), tags_of(g), region=region
        )  # fmt: skip
        for g in groups.get("PlacementGroups", [])
        if g.get("State") != "deleted"
    ]
    pages = ec2.get_paginator("describe_launch_templates").paginate(Filters=filters)
    found += [
        TaggedResource(
            "launch_template",
            t["LaunchTemplateId"],
            t.get("LaunchTemplateName", ""),
            tags_of(t),
            region=region,
        )  # fmt: skip
        for page in call("DescribeLaunchTemplates", list, pages)
        for t in page.get("LaunchTemplates", [])
    ]
    addresses = call("DescribeAddresses", ec2.describe_addresses, Filters=filters)
    found += [
        TaggedResource(
            "elastic_ip",
            a["AllocationId"],
            a.get("PublicIp", ""),
            tags_of(a),
            region=region,
            state=a.get("AssociationId", ""),
        )  # fmt: skip
        for a in addresses.get("Addresses", [])
    ]
    return found


def list_tagged_resources(region: str, box: str | None = None) -> list[TaggedResource]:
    from orchestrator.clouds.aws.iam import list_tagged_instance_profiles, list_tagged_roles

    return [
        *list_tagged_instances(region, box),
        *list_tagged_security_groups(region, box),
        *list_tagged_key_pairs(region, box),
        *list_tagged_cluster_parts(region, box),
        # The box's own role (clouds/aws/identity.py), global but tagged with its region.
        *list_tagged_instance_profiles(region, box),
        *list_tagged_roles(region, box),
    ]
