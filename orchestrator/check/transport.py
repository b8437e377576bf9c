"""Run a short shell script on a box: over SSH, on this machine, or through a cloud agent.

Every transport answers with a `CommandResult` (exit code, stdout, stderr) or raises:
  - `Unreachable`: the box did not answer (yet); callers retry with back-off until a deadline.
  - `HostKeyChanged`: the box answered with a host key other than the pinned one; never retried.
  - `OrchError`: a problem retrying cannot fix (bad key permissions, bad ssh_config, ...).

SSH uses the box's own key and a per-box known_hosts file: the first contact pins the host key
(StrictHostKeyChecking=accept-new) and later contacts insist on it. A user ssh_config (`-F`)
is honoured, so boxes behind a bastion (ProxyJump) work as they do for plain `ssh`.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from orchestrator import clouds
from orchestrator.clouds.base import CommandResult, Unreachable
from orchestrator.errors import EXIT_FAILURE, OrchError, UsageError

if TYPE_CHECKING:
    from orchestrator.provision.boxes import Box

__all__ = ["CommandResult", "Unreachable"]  # re-exported: they live in clouds.base
VIAS = ("ssh", "ssm", "cloud-assistant")  # ssh, then the built-in clouds' agents (see vias())
SSH_CONFIG_ENV = "ORCH_SSH_CONFIG"


class HostKeyChanged(OrchError):
    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message, exit_code=EXIT_FAILURE, hint=hint)


class Transport(Protocol):
    description: str

    def run(self, script: str, timeout: float) -> CommandResult: ...


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


# ------------------------------------------------------------------------------------- ssh

# ssh exits 255 for its own failures; these messages mean retrying will not help.
_PERMANENT_SSH_ERRORS = (
    "UNPROTECTED PRIVATE KEY FILE",
    "Bad configuration option",
    "Can't open user config file",
    "no such identity",
    "Load key",
)
_HOST_KEY_ERRORS = ("REMOTE HOST IDENTIFICATION HAS CHANGED", "Host key verification failed")


@dataclass
class SshTransport:
    host: str
    user: str
    key_path: Path
    known_hosts_path: Path
    ssh_config: str | None = None
    port: int | None = None
    connect_timeout: int = 10

    @property
    def description(self) -> str:
        return f"ssh {self.user}@{self.host}"

    def argv(self, script: str, connect_timeout: int | None = None) -> list[str]:
        argv = ["ssh"]
        if self.ssh_config:
            argv += ["-F", self.ssh_config]
        if self.port:
            argv += ["-p", str(self.port)]
        options = {
            "IdentityFile": str(self.key_path),
            "IdentitiesOnly": "yes",
            "UserKnownHostsFile": str(self.known_hosts_path),
            # Only the box's own file: a stale entry in the user's global files must not
            # override the per-box pin.
            "GlobalKnownHostsFile": "/dev/null",
            "StrictHostKeyChecking": "accept-new",
            "BatchMode": "yes",
            "ConnectTimeout": str(connect_timeout or self.connect_timeout),
            "ServerAliveInterval": "15",
            "ServerAliveCountMax": "3",
            "LogLevel": "ERROR",
        }
        for name, value in options.items():
            argv += ["-o", f"{name}={value}"]
        return [*argv, "-l", self.user, "--", self.host, script]

    def run(self, script: str, timeout: float) -> CommandResult:
        self.known_hosts_path.parent.mkdir(parents=True, exist_ok=True)
        # Never wait longer to connect than the whole call may take (near a retry deadline).
        connect_timeout = max(1, min(self.connect_timeout, int(timeout)))
        try:
            proc = subprocess.run(
                self.argv(script, connect_timeout),
                capture_output=True,
                text=True,
                timeout=max(timeout, 1) + 5,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            raise OrchError("ssh is not installed", hint="install an OpenSSH client") from None
        except subprocess.TimeoutExpired:
            raise Unreachable(f"{self.description} did not finish within {timeout:.0f}s") from None
        if proc.returncode == 255:
            message = _last_line(proc.stderr) or "ssh failed"
            if any(marker in proc.stderr for marker in _HOST_KEY_ERRORS):
                raise HostKeyChanged(
                    f"host key of {self.host} does not match the one pinned in "
                    f"{self.known_hosts_path}",
                    hint="the box was replaced or someone is in the middle; if the box was "
                    "recreated on purpose, delete that file and retry",
                )
            if any(marker in proc.stderr for marker in _PERMANENT_SSH_ERRORS):
                raise OrchError(f"{self.description}: {message}")
            raise Unreachable(f"{self.description}: {message}")
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)


# ----------------------------------------------------------------------------------- local


@dataclass
class LocalTransport:
    description: str = "this machine"

    def run(self, script: str, timeout: float) -> CommandResult:
        try:
            proc = subprocess.run(
                ["/bin/sh", "-c", script],
                capture_output=True,
                text=True,
                timeout=max(timeout, 1),
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise Unreachable(f"command did not finish within {timeout:.0f}s") from None
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)


# ------------------------------------------------------------------------------ cloud agents
# A cloud's in-guest agent (SSM on AWS, Cloud Assistant on Aliyun) is the cloud's own
# transport: `clouds.get(box.cloud).agent_transport(...)`, chosen by `--via <agent_via>`.


# ---------------------------------------------------------------------------------- choice


def resolve_ssh_config(ssh_config: str | None) -> str | None:
    """--ssh-config wins, then $ORCH_SSH_CONFIG; None means ssh's own default files."""
    path = ssh_config or os.environ.get(SSH_CONFIG_ENV) or None
    if path and not Path(path).expanduser().is_file():
        raise UsageError(f"ssh config {path} does not exist")
    return str(Path(path).expanduser()) if path else None


def box_address(box: Box) -> str:
    outputs = box.outputs or {}
    host = outputs.get("public_ip") or outputs.get("public_dns") or outputs.get("private_ip")
    if not host:
        raise OrchError(
            f"box {box.name} has no address recorded",
            hint="it may still be creating; see `orch status`",
        )
    return str(host)


def vias() -> tuple[str, ...]:
    """ssh, then the agent of every registered cloud that has one."""
    agents = (c.agent_via for c in clouds.all_clouds() if c.agent_via)
    return tuple(dict.fromkeys(("ssh", *agents)))


def transport_for_box(box: Box, via: str = "ssh", ssh_config: str | None = None) -> Transport:
    choices = vias()
    if via not in choices:
        raise UsageError(f"unknown transport {via!r} (expected one of {', '.join(choices)})")
    if via == "ssh":
        outputs = box.outputs or {}
        return SshTransport(
            host=box_address(box),
            user=str(outputs.get("ssh_user") or box.candidate.ssh_user),
            key_path=box.key_path,
            known_hosts_path=box.known_hosts_path,
            ssh_config=resolve_ssh_config(ssh_config),
        )
    return agent_transport(box, via)


def agent_transport(box: Box, via: str) -> Transport:
    """The box's cloud's agent, when `via` names it (`--via ssm` on an AWS box, ...)."""
    cloud = clouds.get(box.cloud)
    if cloud.agent_via != via:
        owners = [c.title for c in clouds.all_clouds() if c.agent_via == via]
        theirs = f"use {cloud.agent_via} on {cloud.title}" if cloud.agent_via else "use ssh"
        raise UsageError(
            f"--via {via} works only for {' or '.join(owners) or 'no'} boxes ({theirs})"
        )
    instance_id = (box.outputs or {}).get("instance_id")
    if not instance_id:
        raise OrchError(f"box {box.name} has no instance id recorded")
    return cloud.agent_transport(str(instance_id), box.region)


def backoff_delays(first: float = 1.0, cap: float = 20.0):
    """1, 2, 4, ... seconds, capped: for retry loops."""
    delay = first
    while True:
        yield delay
        delay = min(delay * 2, cap)


def sleep_until(deadline: float, delay: float) -> bool:
    """Sleep `delay` or until `deadline`; False when the deadline has already passed."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return False
    time.sleep(min(delay, remaining))
    return True
