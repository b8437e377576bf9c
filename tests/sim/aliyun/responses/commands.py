"""Cloud assistant: RunCommand, DescribeInvocationResults."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from tests.sim.aliyun.models import (
    AliyunBackend,
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


def describe_invocation_results(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = region_of(params)
    invocation = backend.invocation(region, params.get("InvokeId"))
    finished = backend.now() >= invocation.finish_at
    encoding = params.get("ContentEncoding") or "Base64"
    results = []
    for instance_id, (output, exit_code) in invocation.results.items():
        if params.get("InstanceId") and params["InstanceId"] != instance_id:
            continue
        text = output if finished else ""
        status = ("Success" if exit_code == 0 else "Failed") if finished else "Running"
        results.append(
            {
                "CommandId": invocation.command_id,
                "InvokeId": invocation.invoke_id,
                "InstanceId": instance_id,
                "InvocationStatus": status,
                "InvokeRecordStatus": "Finished" if finished else "Running",
                "ExitCode": exit_code if finished else None,
                "Output": base64.b64encode(text.encode()).decode()
                if encoding == "Base64"
                else text,
                "ErrorCode": "ExitCodeNonzero" if finished and exit_code else "",
                "ErrorInfo": "The command exited with a non-zero code."
                if finished and exit_code
                else "",
                "StartTime": fmt_time(invocation.created_at),
                "FinishedTime": fmt_time(invocation.finish_at) if finished else "",
                "Dropped": 0,
                "Repeats": 1,
                "Username": "root",
            }
        )
    page, meta = paginate(results, params)
    return {"Invocation": {**meta, "InvocationResults": {"InvocationResult": page}}}
