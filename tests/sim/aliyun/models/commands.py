"""Cloud assistant: RunCommand and its invocations."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from tests.sim.aliyun import agent
from tests.sim.aliyun.models.core import SimError, invalid, new_id, not_found
from tests.sim.aliyun.models.instances import Instance


@dataclass
class Invocation:
    invoke_id: str
    command_id: str
    region: str
    name: str
    command_type: str
    content: str
    created_at: datetime
    finish_at: datetime
    results: dict[str, CommandAnswer]  # instance id -> what the agent answered
    timeout: int = 60


@dataclass(frozen=True)
class CommandAnswer:
    """One instance's answer. `delivery_error` is an ErrorCode for a command that never ran
    (ClientNotRunning, ClientNotResponse, DeliveryTimeout...): no output, no exit code."""

    output: str
    exit_code: int
    delivery_error: str = ""


class CommandBackend:
    """AliyunBackend's cloud-assistant calls."""

    def run_command(
        self,
        region: str,
        instance_ids: list[str],
        command_type: str,
        content: str,
        name: str,
        timeout: int,
    ) -> Invocation:
        if command_type not in ("RunShellScript", "RunBatScript", "RunPowerShellScript"):
            raise invalid("The specified Type is not valid.", "InvalidCommandType")
        if not instance_ids:
            raise SimError("MissingParameter", "The input parameter InstanceId is mandatory.")
        with self.lock:
            self.reap()
            now = self.now()
            results = {}
            for instance_id in instance_ids:
                instance = self.instance(region, instance_id)
                if instance.status(now) != "Running":
                    raise SimError(
                        "IncorrectInstanceStatus",
                        "The current status of the resource does not support this operation.",
                        403,
                    )
                results[instance_id] = self._simulate(instance, content)
            invocation = Invocation(
                invoke_id=new_id("t", region),
                command_id=new_id("c", region),
                region=region,
                name=name,
                command_type=command_type,
                content=content,
                created_at=now,
                finish_at=now + timedelta(seconds=self.settings.command_delay_s),
                results=results,
                timeout=timeout,
            )
            self.invocations[invocation.invoke_id] = invocation
            return invocation

    def _simulate(self, instance: Instance, content: str) -> CommandAnswer:
        for pattern, answer in self.command_outputs:
            if pattern.search(content):
                return answer
        return CommandAnswer(*agent.simulate(instance, content))

    def add_command_output(
        self, pattern: str, output: str, exit_code: int = 0, delivery_error: str = ""
    ) -> None:
        answer = CommandAnswer(output, exit_code, delivery_error)
        with self.lock:
            self.command_outputs.insert(0, (re.compile(pattern), answer))

    def invocation(self, region: str, invoke_id: str | None) -> Invocation:
        invocation = self.invocations.get(invoke_id or "")
        if invocation is None or invocation.region != region:
            raise not_found("InvalidInvokeId.NotFound", "InvokeId")
        return invocation
