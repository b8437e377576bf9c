"""AWS zones: EC2 has no stock API, so the zones worth trying are those that offer the type.

DescribeInstanceTypeOfferings with LocationType=availability-zone lists, per AZ, the instance
types it offers (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstanceTypeOfferings.html).
`orch up` launches in the first and, on InsufficientInstanceCapacity, tries the next.
"""

from __future__ import annotations

from orchestrator.clouds.aws.client import call, client


def offering_zones(region: str, instance_type: str) -> list[str]:
    """The region's availability zones that offer `instance_type`, in name order (all pages)."""
    ec2 = client("ec2", region)
    paginator = ec2.get_paginator("describe_instance_type_offerings")
    pages = paginator.paginate(
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [instance_type]}],
    )
    zones: set[str] = set()

    def collect() -> None:
        for page in pages:
            for offering in page.get("InstanceTypeOfferings") or []:
                if offering.get("InstanceType") == instance_type and offering.get("Location"):
                    zones.add(str(offering["Location"]))

    call("DescribeInstanceTypeOfferings", collect)
    return sorted(zones)
