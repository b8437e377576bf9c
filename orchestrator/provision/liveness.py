"""Who is working on a box: the orch process running `up`/`down` and its Terraform child.

`up`/`down` write {"pid", "started", "host", "command", "terraform_pid", "terraform"} into
the box record while they run (see steps.set_state). The start time (field 22 of
/proc/PID/stat, clock ticks since boot) defeats pid reuse: a pid that is alive but started at
another time is another process. After a SIGKILL of orch (CI timeout, OOM) the record still
says "creating"; `status`/`list` use this module to say that its orch is gone.
"""

from __future__ import annotations

import os
import socket
from typing import Any


def process_start(pid: int) -> int | None:
    """The start time of process `pid` (clock ticks since boot), or None if it is not running."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = text[text.rfind(")") + 2 :].split()
    if fields[:1] in (["Z"], ["X"]):
        return None  # exited, not yet reaped: not running
    try:
        return int(fields[19])  # field 22 overall: starttime
    except (IndexError, ValueError):
        return None


def this_process(command: str) -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "started": process_start(os.getpid()),
        "host": socket.gethostname(),
        "command": command,
        "terraform_pid": None,
        "terraform": None,
    }


def is_alive(runner: dict[str, Any]) -> bool | None:
    """Whether the recorded orch still runs: None when it ran on another host (unknowable)."""
    if runner.get("host") != socket.gethostname():
        return None
    try:
        pid = int(runner.get("pid") or 0)
    except (TypeError, ValueError):
        return False
    started = process_start(pid) if pid > 0 else None
    return started is not None and started == runner.get("started")


def terraform_alive(runner: dict[str, Any]) -> int | None:
    """The recorded Terraform child's pid while it still runs on this host, else None."""
    try:
        pid = int(runner.get("terraform_pid") or 0)
    except (TypeError, ValueError):
        return None
    if pid <= 0 or runner.get("host") != socket.gethostname():
        return None
    started = process_start(pid)
    recorded = runner.get("terraform_started")
    return pid if started is not None and (recorded is None or started == recorded) else None


def activity(name: str, state: str, runner: dict[str, Any] | None) -> str | None:
    """A phrase for a box that is "creating"/"destroying": running, or abandoned. None for
    boxes at rest."""
    if state not in ("creating", "destroying"):
        return None
    if not runner:
        return None
    alive = is_alive(runner)
    terraform = runner.get("terraform") or "terraform"
    if alive is None:
        return f"{state}: run by orch pid {runner.get('pid')} on {runner.get('host')}"
    if alive:
        tf_pid = terraform_alive(runner)
        if tf_pid:
            return f"{state}: terraform {terraform} running, pid {tf_pid}"
        return f"{state}: orch pid {runner.get('pid')} is working on it"
    orphan = terraform_alive(runner)
    tail = f" (its terraform {terraform}, pid {orphan}, is still stopping)" if orphan else ""
    return f"{state}, but the orch that ran it is gone{tail}: run `orch down {name}`"
