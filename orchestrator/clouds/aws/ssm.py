"""AWS Systems Manager Run Command (AWS-RunShellScript): `orch check --via ssm`, no inbound
port needed.

The instance needs the SSM agent (on Deep Learning AMIs, Ubuntu and Amazon Linux images) and an
instance profile with AmazonSSMManagedInstanceCore.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from orchestrator.clouds.aws.client import call, client
from orchestrator.clouds.aws.errors import AGENT_NOT_READY_CODES, AwsError
from orchestrator.clouds.base import Unreachable
from orchestrator.clouds.values import CommandResult


def run_ssm_command(
    region: str, instance_id: str, script: str, *, timeout: float, poll: float = 2.0
) -> CommandResult:
    """Run a shell script through SSM Run Command (AWS-RunShellScript) and wait for it.

    An instance whose agent has not registered yet raises Unreachable, so callers retry.
    """
    ssm = client("ssm", region)
    execution_timeout = max(30, int(timeout))
    try:
        sent = call(
            "SSM SendCommand",
            ssm.send_command,
            InstanceIds=[instance_id],
            DocumentName="AWS-RunShellScript",
            Parameters={"commands": [script], "executionTimeout": [str(execution_timeout)]},
            TimeoutSeconds=max(30, int(timeout)),
            Comment="orch check",
        )
    except AwsError as exc:
        if exc.code in AGENT_NOT_READY_CODES:
            raise Unreachable(f"SSM agent on {instance_id} is not registered (yet)") from None
        raise
    command_id = sent["Command"]["CommandId"]
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = call(
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


@dataclass(slots=True)
class SsmTransport:
    instance_id: str
    region: str
    poll_interval: float = 2.0

    @property
    def description(self) -> str:
        return f"ssm {self.instance_id}"

    def run(self, script: str, timeout: float) -> CommandResult:
        return run_ssm_command(
            self.region, self.instance_id, script, timeout=timeout, poll=self.poll_interval
        )
