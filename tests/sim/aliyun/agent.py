"""The emulated Cloud Assistant agent: what a RunShellScript command prints on a simulated box.

Nothing is executed. A handful of read-only commands are answered from the instance's record:
`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` (values built from the instance
type's GPU in data.py, marked simulated by their driver version), `nvidia-smi -L`, `echo`,
`hostname`, `true`. Anything else exits 127, like a shell that lacks the command, so a test never
mistakes an unsimulated command for success. Tests can register exact outputs instead
(`POST /_sim/command-output`).
"""

from __future__ import annotations

import hashlib
import re
import shlex
import uuid
from typing import TYPE_CHECKING

from tests.sim.aliyun.data import GPUS

if TYPE_CHECKING:  # pragma: no cover
    from tests.sim.aliyun.models import Instance

SIMULATED_DRIVER = "550.0.0-sim"
_UNITS = {
    "memory.total": " MiB",
    "memory.used": " MiB",
    "memory.free": " MiB",
    "utilization.gpu": " %",
}


def _is_simple(content: str) -> bool:
    """One command, no shell syntax (;, &&, ||, |, newlines, if/then)."""
    return not re.search(r"[;&|\n`$()<>]", content.strip())


def _gpu_rows(instance: Instance) -> list[dict[str, str]]:
    spec = instance.spec
    if spec.gpu is None:
        return []
    gpu = GPUS[spec.gpu]
    rows = []
    for index in range(spec.gpu_count):
        seed = hashlib.sha256(f"{instance.id}/{index}".encode()).hexdigest()
        rows.append(
            {
                "index": str(index),
                "name": gpu.nvidia_smi_name,
                "memory.total": str(gpu.memory_mib),
                "memory.used": "0",
                "memory.free": str(gpu.memory_mib),
                "driver_version": SIMULATED_DRIVER,
                "ecc.errors.uncorrected.volatile.total": "0",
                "pci.bus_id": f"00000000:00:{7 + index:02X}.0",
                "uuid": f"GPU-{uuid.UUID(seed[:32])}",
                "utilization.gpu": "0",
                "count": str(spec.gpu_count),
            }
        )
    return rows


def _nvidia_smi(instance: Instance, args: list[str]) -> tuple[str, int]:
    rows = _gpu_rows(instance)
    if not rows:
        return (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
            9,
        )
    if args == ["-L"]:
        lines = [f"GPU {r['index']}: {r['name']} (UUID: {r['uuid']})" for r in rows]
        return "\n".join(lines) + "\n", 0
    query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
    fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "")
    if query is None or "csv" not in fmt.split(","):
        return "simulated nvidia-smi only answers -L and --query-gpu=... --format=csv\n", 2
    fields = [f.strip() for f in query.split(",") if f.strip()]
    nounits = "nounits" in fmt
    lines = []
    if "noheader" not in fmt:
        lines.append(
            ", ".join(
                f if nounits or f not in _UNITS else f"{f} [{_UNITS[f].strip()}]" for f in fields
            )
        )
    for row in rows:
        values = []
        for name in fields:
            value = row.get(name, "[N/A]")
            if not nounits and name in _UNITS and not value.startswith("["):
                value += _UNITS[name]
            values.append(value)
        lines.append(", ".join(values))
    return "\n".join(lines) + "\n", 0


_NVIDIA_SMI_CALL = re.compile(
    r"(?:^|[\s;&|({])(?:exec\s+)?nvidia-smi((?:[ \t]+(?:'[^']*'|\"[^\"]*\"|[^\s;&|)]+))*)"
)


def simulate(instance: Instance, content: str) -> tuple[str, int]:
    """(output, exit code) of a shell command on `instance`.

    A script (several commands, conditions) that runs `nvidia-smi <args>` somewhere is answered
    as that nvidia-smi call on a box whose driver is installed and whose first boot finished.
    """
    try:
        argv = shlex.split(content.strip())
    except ValueError:
        return "syntax error\n", 2
    if not _is_simple(content):
        for match in _NVIDIA_SMI_CALL.finditer(content):
            args = shlex.split(match.group(1))
            if args == ["-L"] or any(a.startswith("--query-gpu=") for a in args):
                return _nvidia_smi(instance, args)
        return "compound script not simulated by the emulator\n", 127
    if not argv:
        return "", 0
    program, args = argv[0].rsplit("/", 1)[-1], argv[1:]
    if program == "nvidia-smi":
        return _nvidia_smi(instance, args)
    if program == "echo":
        return " ".join(args) + "\n", 0
    if program == "hostname":
        return instance.host_name + "\n", 0
    if program == "true":
        return "", 0
    return f"bash: {program}: command not simulated by the emulator\n", 127
