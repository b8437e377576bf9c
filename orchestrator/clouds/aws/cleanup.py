"""AWS: delete what a box left (instances, then a cluster's Elastic IP, launch template and
placement group, then security groups and key pairs, then its instance profile and role)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from orchestrator.clouds.aws.client import call, client
from orchestrator.clouds.aws.errors import AwsError
from orchestrator.clouds.base import ErrorKind, retry_while
from orchestrator.clouds.values import TaggedResource


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def terminate_instances(region: str, instance_ids: list[str], wait_s: float = 900) -> None:
    """Terminate instances and wait until they are gone (their security groups free up)."""
    if not instance_ids:
        return
    ec2 = client("ec2", region)
    for chunk in _chunks(instance_ids, 500):
        call("TerminateInstances", ec2.terminate_instances, InstanceIds=chunk)
    waiter = ec2.get_waiter("instance_terminated")
    delay = 5
    for chunk in _chunks(instance_ids, 100):
        call(
            "waiting for termination",
            waiter.wait,
            InstanceIds=chunk,
            WaiterConfig={"Delay": delay, "MaxAttempts": max(1, int(wait_s / delay))},
        )


def delete_security_group(region: str, group_id: str) -> None:
    """Delete a security group; one already gone is no error.

    Fails with code DependencyViolation while AWS still sees a terminated instance's network
    interface: delete_tagged retries.
    """
    ec2 = client("ec2", region)
    try:
        call("DeleteSecurityGroup", ec2.delete_security_group, GroupId=group_id)
    except AwsError as exc:
        if exc.code != "InvalidGroup.NotFound":
            raise


def delete_key_pair(region: str, key_name: str) -> None:
    """Delete by name: unique per region, and understood by every EC2 implementation."""
    ec2 = client("ec2", region)
    call("DeleteKeyPair", ec2.delete_key_pair, KeyName=key_name)


def release_address(region: str, allocation_id: str, association_id: str) -> None:
    """Release an Elastic IP (after disassociating it, when it still is); one already gone is
    no error. ReleaseAddress refuses an associated address (InvalidIPAddress.InUse:
    https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_ReleaseAddress.html).

    The association listed may have ended since (the instance's termination deletes the
    interface it was on): InvalidAssociationID.NotFound means "already disassociated" and the
    release goes on, as the provider's aws_eip delete does (hashicorp/terraform-provider-aws,
    internal/service/ec2 resourceEIPDelete / disassociateEIP: "it was already disassociated
    somehow, and that is okay. The most common reason for this is that the instance or ENI it
    was attached to was destroyed")."""
    ec2 = client("ec2", region)
    if association_id:
        try:
            call("DisassociateAddress", ec2.disassociate_address, AssociationId=association_id)
        except AwsError as exc:
            if exc.code != "InvalidAssociationID.NotFound":
                raise
    try:
        call("ReleaseAddress", ec2.release_address, AllocationId=allocation_id)
    except AwsError as exc:
        if exc.code != "InvalidAllocationID.NotFound":
            raise


def delete_launch_template(region: str, template_id: str) -> None:
    ec2 = client("ec2", region)
    try:
        call("DeleteLaunchTemplate", ec2.delete_launch_template, LaunchTemplateId=template_id)
    except AwsError as exc:
        if exc.code != "InvalidLaunchTemplateId.NotFound":
            raise


def delete_placement_group(region: str, name: str) -> None:
    """Delete a placement group (by name, as the API takes it); one already gone is no error.
    InvalidPlacementGroup.InUse while a terminated node still counts: delete_tagged retries."""
    ec2 = client("ec2", region)
    try:
        call("DeletePlacementGroup", ec2.delete_placement_group, GroupName=name)
    except AwsError as exc:
        if exc.code != "InvalidPlacementGroup.Unknown":
            raise


def retry_while_blocked(
    delete: Callable[[], None], timeout_s: float | None = None, pause_s: float | None = None
) -> None:
    """Retry `delete` while DependencyViolation (a terminated instance's interface) blocks it."""
    retry_while(lambda exc: exc.kind is ErrorKind.RETRYABLE, delete, timeout_s, pause_s)


def delete_tagged(region: str, resources: list[TaggedResource]) -> None:
    terminate_instances(region, [r.id for r in resources if r.kind == "instance"])
    for resource in resources:  # a cluster's parts: their nodes are gone now
        if resource.kind == "elastic_ip":
            release_address(region, resource.id, resource.state)
        elif resource.kind == "launch_template":
            delete_launch_template(region, resource.id)
        elif resource.kind == "placement_group":
            retry_while_blocked(lambda g=resource.id: delete_placement_group(region, g))
    for resource in resources:
        if resource.kind == "security_group":
            retry_while_blocked(lambda g=resource.id: delete_security_group(region, g))
        elif resource.kind == "key_pair":
            delete_key_pair(region, resource.name)
    # Identities last: a terminated instance no longer holds its profile.
    from orchestrator.clouds.aws.iam import delete_instance_profile, delete_role

    for resource in resources:
        if resource.kind == "instance_profile":
            delete_instance_profile(region, resource.name)
    for resource in resources:
        if resource.kind == "iam_role":
            delete_role(region, resource.name)
