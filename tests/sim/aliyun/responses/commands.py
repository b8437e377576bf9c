"""Cloud assistant: RunCommand, DescribeInvocationResults."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from tests.sim.aliyun.models import (
    AliyunBackend,
    CommandAnswer,
    SimError,
    fmt_time,
    invalid,
)
from tests.sim.aliyun.responses.params import Params, indexed, integer, paginate, region_of


def run_command(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    content = params.get("CommandContent")
    if not content:
        raise SimError("MissingParameter", "The input parameter CommandContent is mandatory.")
    if (params.get("ContentEncoding") or "PlainText") == "Base64":
        try:
            content = base64.b64decode(content, validate=True).decode()
        except (binascii.Error, ValueError):
            raise invalid(
                "CommandContent is not valid Base64.", "InvalidCommandContent.Malformed"
            ) from None
    invocation = backend.run_command(
        region_of(params),
        indexed(params, "InstanceId"),
        params.get("Type", ""),
        content,
        params.get("Name") or "",
        integer(params, "Timeout", 60),
    )
    return {"CommandId": invocation.command_id, "InvokeId": invocation.invoke_id}


# Per-instance states, as the DescribeInvocationResults reference defines them
# (https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-describeinvocationresults;
# the ECS SDK's invocationResult model carries the same text):
# - InvocationStatus: Running while it runs; Success (exit 0) or Failed (non-zero exit, ErrorCode
#   ExitCodeNonzero) when it ran; Aborted when it could not be sent to the instance (ErrorCode
#   ClientNotRunning, ClientNotResponse, DeliveryTimeout...; no exit code, no output).
# - InvokeRecordStatus: Running, then Finished, or Failed when "the execution failed on all
#   instances" (one instance here: a non-zero exit or an abort is a failure, as the aggregate
#   InvocationStatus of DescribeInvocations counts them).
DELIVERY_ERRORS = {
    "ClientNotRunning": "the aliyun service is not running on the instance",
    "ClientNotResponse": "the aliyun service in the instance does not response",
    "DeliveryTimeout": "the command delivery has been timeout",
}


def _state(answer: CommandAnswer, finished: bool) -> dict[str, Any]:
    if not finished:
        return {"InvocationStatus": "Running", "InvokeRecordStatus": "Running", "ExitCode": None}
    if answer.delivery_error:
        return {
            "InvocationStatus": "Aborted",
            "InvokeRecordStatus": "Failed",
            "ExitCode": None,
            "ErrorCode": answer.delivery_error,
            "ErrorInfo": DELIVERY_ERRORS.get(answer.delivery_error, answer.delivery_error),
        }
    failed = answer.exit_code != 0
    return {
        "InvocationStatus": "Failed" if failed else "Success",
        "InvokeRecordStatus": "Failed" if failed else "Finished",
        "ExitCode": answer.exit_code,
        "ErrorCode": "ExitCodeNonzero" if failed else "",
        "ErrorInfo": "the command execution exit code is not zero" if failed else "",
    }


def describe_invocation_results(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = region_of(params)
    invocation = backend.invocation(region, params.get("InvokeId"))
    finished = backend.now() >= invocation.finish_at
    encoding = params.get("ContentEncoding") or "Base64"
    results = []
    for instance_id, answer in invocation.results.items():
        if params.get("InstanceId") and params["InstanceId"] != instance_id:
            continue
        text = answer.output if finished and not answer.delivery_error else ""
        results.append(
            {
                "CommandId": invocation.command_id,
                "InvokeId": invocation.invoke_id,
                "InstanceId": instance_id,
                "ErrorCode": "",
                "ErrorInfo": "",
                **_state(answer, finished),
                "Output": base64.b64encode(text.encode()).decode()
                if encoding == "Base64"
                else text,
                "StartTime": fmt_time(invocation.created_at),
                "FinishedTime": fmt_time(invocation.finish_at) if finished else "",
                "Dropped": 0,
                "Repeats": 1,
                "Username": "root",
            }
        )
    page, meta = paginate(results, params)
    return {"Invocation": {**meta, "InvocationResults": {"InvocationResult": page}}}
