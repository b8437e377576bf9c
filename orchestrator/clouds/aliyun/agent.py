"""Aliyun Cloud Assistant (RunCommand): the transport of `orch check --via cloud-assistant`,
the Aliyun analogue of SSM: no inbound port needed."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any

from orchestrator.clouds.aliyun.client import call, ecs_client
from orchestrator.clouds.aliyun.errors import AliyunError, is_permanent_for_agent
from orchestrator.clouds.base import Unreachable
from orchestrator.clouds.values import CommandResult

# Per-instance InvocationStatus values of DescribeInvocationResults
# (https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-describeinvocationresults):
# the command ran to an exit code (Success: 0, Failed: not 0), or it is still on its way.
RAN = frozenset({"Success", "Failed"})
UNDER_WAY = frozenset({"", "Pending", "Scheduled", "Running", "Stopping"})
# Everything else ended without an exit code: Invalid, Aborted (not delivered: the agent is
# not running or not answering), Error, Timeout, Cancelled, Terminated. InvokeRecordStatus
# alone does not tell: a command that failed on its only instance is "Failed", not
# "Finished", whether it exited 1 or was never delivered.


def run_command(
    region: str,
    instance_id: str,
    command: str,
    timeout_s: int = 120,
    poll_s: float = 1.0,
) -> CommandResult:
    """Run a shell command through Cloud Assistant (RunCommand) and wait for its result.

    Polls DescribeInvocationResults until the command has an exit code (returned, output
    base64-decoded) or ended without one (AliyunError with the cloud's ErrorCode).
    """
    from alibabacloud_ecs20140526 import models

    client = ecs_client(region)
    request = models.RunCommandRequest(
        region_id=region,
        type="RunShellScript",
        command_content=command,
        content_encoding="PlainText",
        instance_id=[instance_id],
        timeout=timeout_s,
        name="orch-check",
    )
    invoke_id = call("RunCommand", lambda: client.run_command(request)).body.invoke_id
    deadline = time.monotonic() + timeout_s + 30
    while True:
        query = models.DescribeInvocationResultsRequest(
            region_id=region,
            invoke_id=invoke_id,
            instance_id=instance_id,
            content_encoding="Base64",
        )
        body = call(
            "DescribeInvocationResults", lambda q=query: client.describe_invocation_results(q)
        ).body
        results = _invocation_results(body)
        status = (results[0].invocation_status or "") if results else ""
        if status in RAN:
            return _ran(results[0])
        if status not in UNDER_WAY:
            raise _ended_without_exit_code(instance_id, results[0])
        if time.monotonic() > deadline:
            raise AliyunError(f"command on {instance_id} did not finish within {timeout_s}s")
        time.sleep(poll_s)


def _ran(item: Any) -> CommandResult:
    output = base64.b64decode(item.output or "").decode("utf-8", "replace")
    exit_code = item.exit_code if item.exit_code is not None else -1
    return CommandResult(int(exit_code), output, "", item.invocation_status)


def _ended_without_exit_code(instance_id: str, item: Any) -> AliyunError:
    code = item.error_code or f"Invocation.{item.invocation_status}"
    reason = f": {item.error_info}" if item.error_info else ""
    return AliyunError(
        f"command on {instance_id} ended {item.invocation_status} ({code}){reason}", code
    )


def _invocation_results(body: Any) -> list[Any]:
    invocation = body.invocation
    if invocation is None or invocation.invocation_results is None:
        return []
    return list(invocation.invocation_results.invocation_result or [])


@dataclass(slots=True)
class CloudAssistantTransport:
    instance_id: str
    region: str

    @property
    def description(self) -> str:
        return f"cloud-assistant {self.instance_id}"

    def run(self, script: str, timeout: float) -> CommandResult:
        try:
            result = run_command(
                self.region, self.instance_id, script, timeout_s=max(30, int(timeout))
            )
        except AliyunError as exc:
            if is_permanent_for_agent(exc.code):
                raise
            # Not running yet, agent not online, invocation lost: worth another try.
            raise Unreachable(f"{self.description}: {exc.message}") from None
        # Cloud Assistant returns stdout and stderr as one output.
        return CommandResult(int(result.exit_code), result.stdout, "")
