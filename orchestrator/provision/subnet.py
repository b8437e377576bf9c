"""`--subnet-id` (box.subnet_id) and a plan's candidates: a subnet is in one cloud and one
region, so `up` may fail over only to candidates there.

An AWS subnet lies in one VPC, and "each subnet must reside entirely within one Availability
Zone and cannot span zones" (Amazon VPC User Guide, "Subnets for your VPC",
https://docs.aws.amazon.com/vpc/latest/userguide/configure-subnets.html); a VPC and its
subnets belong to one Region ("Amazon VPC concepts": a VPC "spans all of the Availability Zones
in the Region", https://docs.aws.amazon.com/vpc/latest/userguide/how-it-works.html). An EC2 id
is looked up in the Region of the call only, so in another Region the module's
`data "aws_subnet" "this"` (terraform/modules/aws_gpu/main.tf) finds no such subnet: a
Terraform failure that is not capacity, which ended `up` (box "failed") instead of trying the
plan's next candidate, after a capacity failover had left the subnet's region.

The subnet's region is not looked up (DescribeSubnets answers only in the subnet's own region,
so finding it would mean a call per candidate region, with credentials, before any check): a
plan made now needs `--region` when its candidates span regions, and a plan file's choice
fixes the region. Everything here runs before any cloud or Terraform call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from orchestrator import clouds
from orchestrator.clouds.registry import cloud_subnet_refusal, subnet_id_refusal
from orchestrator.errors import UsageError
from orchestrator.plan import Plan

Say = Callable[[str], None]
SHOWN_REGIONS = 4


def subnet_cloud(cloud: str, subnet_id: str) -> str:
    """The `--cloud` to plan in for `subnet_id`: `cloud` when it takes the id (its refusal
    when not); for "any", the one registered cloud that takes it. An id that more than one
    cloud takes (a plugin that cannot tell) needs `--cloud`: a subnet is in one cloud."""
    if cloud != "any":
        refusal = cloud_subnet_refusal(cloud, subnet_id)
        if refusal is not None:
            raise refusal
        return cloud
    takers = [name for name in clouds.names() if cloud_subnet_refusal(name, subnet_id) is None]
    if not takers:
        raise subnet_id_refusal(subnet_id) or UsageError(
            f"no cloud takes --subnet-id {subnet_id[:60]!r}"
        )
    if len(takers) > 1:
        raise UsageError(
            f"--subnet-id: a subnet is in one cloud, and {', '.join(takers)} take this id",
            hint="name its cloud with --cloud",
        )
    return takers[0]


def require_one_region(plan: Plan, region: str | None) -> None:
    """A plan made now for a subnet: its candidates must be in one region (the subnet's, which
    only the user knows: `--region` or resources.region)."""
    if region:
        return
    regions = sorted({c.region for c in plan.candidates()})
    if len(regions) < 2:
        return
    shown = ", ".join(regions[:SHOWN_REGIONS]) + (", ..." if len(regions) > SHOWN_REGIONS else "")
    raise UsageError(
        "a subnet id (--subnet-id, box.subnet_id) needs a region (--region, resources.region):"
        f" a subnet is in one region, and the plan's candidates are in {len(regions)} regions"
        f" ({shown})",
        hint="give the subnet's region",
    )


def for_subnet(plan: Plan, subnet_id: str | None, say: Say | None = None) -> Plan:
    """The candidates a launch in `subnet_id` can use: the choice, whose cloud must take the
    id (its refusal, exit 2, when not), and the alternatives in the choice's cloud and region;
    the others are dropped, with one line to `say`."""
    if not subnet_id:
        return plan
    choice = plan.choice
    refusal = cloud_subnet_refusal(choice.cloud, subnet_id)
    if refusal is not None:
        raise refusal
    kept = [c for c in plan.alternatives if (c.cloud, c.region) == (choice.cloud, choice.region)]
    dropped = len(plan.alternatives) - len(kept)
    if dropped and say is not None:
        s = "" if dropped == 1 else "s"
        say(
            f"--subnet-id: a subnet is in one region, so only the plan's candidates in"
            f" {choice.cloud} {choice.region} (its choice's) are tried; {dropped}"
            f" alternative{s} elsewhere dropped"
        )
    return replace(plan, alternatives=kept) if dropped else plan
