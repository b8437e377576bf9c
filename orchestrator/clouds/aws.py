"""boto3 helpers for the parts of orch that talk to AWS outside Terraform.

- Tag-based discovery of orch's resources (instances, security groups, key pairs carrying the
  `orch:box` tag), for the sweeper: it works from the cloud's view, so boxes whose local state
  is gone are found too.
- Deleting what the sweeper decided to remove.
- SSM Run Command, the SSH-free transport of `orch check --via ssm`.

boto3 is imported inside functions: offline commands never pay for it. Endpoints, profiles
and credentials come from the standard chain (AWS_ENDPOINT_URL, AWS_PROFILE, ...).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.errors import OrchError

if TYPE_CHECKING:
    from orchestrator.check.transport import CommandResult

BOX_TAG = "orch:box"
EXPIRES_TAG = "orch:expires-at"
OWNER_TAG = "orch:owner"
# Instances in these states still cost money or still hold their security group.
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")


class AwsError(OrchError):
    """An AWS API call failed; `code` is the API's error code."""

    def __init__(self, message: str, code: str = "", hint: str | None = None):
        super().__init__(message, hint=hint)
        self.code = code


def client(service: str, region: str) -> Any:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError

    config = Config(retries={"max_attempts": 8, "mode": "adaptive"})
    try:
        return boto3.client(service, region_name=region, config=config)
    except BotoCoreError as exc:  # e.g. AWS_PROFILE names a profile that does not exist
        raise AwsError(
            f"cannot set up an AWS {service} client: {exc}", hint="check AWS_PROFILE"
        ) from None


def _call(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        return fn(*args, **kwargs)
    except NoCredentialsError:
        raise AwsError(
            "no AWS credentials found", hint="set AWS_PROFILE or AWS_ACCESS_KEY_ID"
        ) from None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        raise AwsError(f"AWS {what} failed: {code}: {error.get('Message', '')}", code) from None
    except BotoCoreError as exc:
        raise AwsError(f"AWS {what} failed: {exc}") from None


def tags_of(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in resource.get("Tags") or []}


# --------------------------------------------------------------------------- discovery


@dataclass
class TaggedResource:
    kind: str  # "instance" | "security_group" | "key_pair"
    id: str
    name: str  # instance type, group name or key name
    state: str  # instance state; "" for the others
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def box(self) -> str:
        return self.tags.get(BOX_TAG, "")

    @property
    def expires_at(self) -> str:
        return self.tags.get(EXPIRES_TAG, "")


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
    for page in _call("DescribeInstances", list, pages):
        for reservation in page.get("Reservations", []):
            for item in reservation.get("Instances", []):
                found.append(
                    TaggedResource(
                        "instance",
                        item["InstanceId"],
                        item.get("InstanceType", ""),
                        item.get("State", {}).get("Name", ""),
                        tags_of(item),
                    )
                )
    return found


def list_tagged_security_groups(region: str, box: str | None = None) -> list[TaggedResource]:
    ec2 = client("ec2", region)
    pages = ec2.get_paginator("describe_security_groups").paginate(Filters=_box_filters(box))
    return [
        TaggedResource("security_group", g["GroupId"], g.get("GroupName", ""), "", tags_of(g))
        for page in _call("DescribeSecurityGroups", list, pages)
        for g in page.get("SecurityGroups", [])
    ]


def list_tagged_key_pairs(region: str, box: str | None = None) -> list[TaggedResource]:
    ec2 = client("ec2", region)  # DescribeKeyPairs has no pagination
    response = _call("DescribeKeyPairs", ec2.describe_key_pairs, Filters=_box_filters(box))
    return [
        TaggedResource("key_pair", k["KeyPairId"], k.get("KeyName", ""), "", tags_of(k))
        for k in response.get("KeyPairs", [])
    ]


def list_tagged_resources(region: str, box: str | None = None) -> list[TaggedResource]:
    return [
        *list_tagged_instances(region, box),
        *list_tagged_security_groups(region, box),
        *list_tagged_key_pairs(region, box),
    ]


# ----------------------------------------------------------------------------- deletion


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def terminate_instances(region: str, instance_ids: list[str], wait_s: float = 900) -> None:
    """Terminate instances and wait until they are gone (their security groups free up)."""
    if not instance_ids:
        return
    ec2 = client("ec2", region)
    for chunk in _chunks(instance_ids, 500):
        _call("TerminateInstances", ec2.terminate_instances, InstanceIds=chunk)
    waiter = ec2.get_waiter("instance_terminated")
    delay = 5
    for chunk in _chunks(instance_ids, 100):
        _call(
            "waiting for termination",
            waiter.wait,
            InstanceIds=chunk,
            WaiterConfig={"Delay": delay, "MaxAttempts": max(1, int(wait_s / delay))},
        )


def delete_security_group(region: str, group_id: str) -> None:
    """Delete a security group; one already gone is no error.

    Fails with code DependencyViolation while AWS still sees a terminated instance's network
    interface: callers retry (orchestrator.sweep.retry_while_blocked).
    """
    ec2 = client("ec2", region)
    try:
        _call("DeleteSecurityGroup", ec2.delete_security_group, GroupId=group_id)
    except AwsError as exc:
        if exc.code != "InvalidGroup.NotFound":
            raise


def delete_key_pair(region: str, key_name: str) -> None:
    """Delete by name: unique per region, and understood by every EC2 implementation."""
    ec2 = client("ec2", region)
    _call("DeleteKeyPair", ec2.delete_key_pair, KeyName=key_name)


# ------------------------------------------------------------------------------------ SSM


def run_ssm_command(
    region: str, instance_id: str, script: str, *, timeout: float, poll: float = 2.0
) -> CommandResult:
    """Run a shell script through SSM Run Command (AWS-RunShellScript) and wait for it.

    An instance whose agent has not registered yet raises Unreachable, so callers retry.
    """
    from orchestrator.check.transport import CommandResult, Unreachable

    ssm = client("ssm", region)
    execution_timeout = max(30, int(timeout))
    try:
        sent = _call(
            "SSM SendCommand",
            ssm.send_command,
            InstanceIds=[instance_id],
            DocumentName="AWS-RunShellScript",
            Parameters={"commands": [script], "executionTimeout": [str(execution_timeout)]},
            TimeoutSeconds=max(30, int(timeout)),
            Comment="orch check",
        )
    except AwsError as exc:
        if exc.code in ("InvalidInstanceId", "InvalidInstanceInformationFilterValue"):
            raise Unreachable(f"SSM agent on {instance_id} is not registered (yet)") from None
        raise
    command_id = sent["Command"]["CommandId"]
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = _call(
                "SSM GetCommandInvocation",
                ssm.get_command_invocation,
                CommandId=command_id,
                InstanceId=instance_id,
            )
        except AwsError as exc:
            if exc.code != "InvocationDoesNotExist":  # not visible yet right after sending
                raise
            result = {"Status": "Pending"}
        status = result.get("Status", "")
        if status not in ("Pending", "InProgress", "Delayed"):
            if status in ("Success", "Failed"):
                return CommandResult(
                    int(result.get("ResponseCode", -1)),
                    result.get("StandardOutputContent", ""),
                    result.get("StandardErrorContent", ""),
                )
            raise Unreachable(f"SSM command on {instance_id} ended {status}")
        if time.monotonic() > deadline:
            raise Unreachable(f"SSM command on {instance_id} did not finish within {timeout:.0f}s")
        time.sleep(poll)
