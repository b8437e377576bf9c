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

import contextlib
import os
import re
import secrets
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from orchestrator import clouds
from orchestrator.clouds.base import Unreachable
from orchestrator.clouds.registry import HasAgentTransport, agent_via_of
from orchestrator.clouds.values import CommandResult
from orchestrator.errors import EXIT_CHECK_FAILED, EXIT_FAILURE, OrchError, UsageError

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


# ------------------------------------------------------------------------------ bounds

# What one command may print before we stop reading: nvidia-smi's CSV for 16 GPUs is ~2 KiB, so
# 1 MiB is generous, and a box that floods us (50 MB of junk) costs a bounded read, not minutes
# of parsing and a 157 MB JSON report.
MAX_STDOUT_BYTES = 1024 * 1024
MAX_STDERR_BYTES = 64 * 1024  # the tail is kept: ssh's own error and our exit marker come last


class OutputTooLarge(OrchError):
    """The box printed more than MAX_STDOUT_BYTES; the command was stopped there."""

    def __init__(self, message: str):
        super().__init__(message, exit_code=EXIT_CHECK_FAILED)


@dataclass(slots=True)
class _Bounded:
    returncode: int
    stdout: str
    stderr: str


def _decode(data: bytes) -> str:
    # A box may print anything: bytes that are not UTF-8 become U+FFFD, never an exception.
    return data.decode("utf-8", errors="replace")


def run_bounded(
    argv: list[str], timeout: float, what: str, stdin_data: bytes | None = None
) -> _Bounded:
    """Run argv (stdin: `stdin_data`, else none); raise Unreachable after `timeout` s,
    OutputTooLarge past 1 MiB.

    The command runs in its own session so that on a timeout or overflow the whole group (ssh
    and a ProxyCommand it started) is killed, and so ssh can never prompt on our terminal.
    """
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL if stdin_data is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise OrchError(f"{argv[0]} is not installed", hint="install an OpenSSH client") from None
    out = bytearray()
    err = bytearray()
    overflow = threading.Event()

    def read_stdout() -> None:
        assert proc.stdout is not None
        while chunk := proc.stdout.read1(65536):
            room = MAX_STDOUT_BYTES - len(out)
            out.extend(chunk[: max(room, 0)])
            if len(chunk) > room:
                overflow.set()
                _kill_group(proc)
                break

    def read_stderr() -> None:
        assert proc.stderr is not None
        while chunk := proc.stderr.read1(65536):
            err.extend(chunk)
            if len(err) > 2 * MAX_STDERR_BYTES:
                del err[: len(err) - MAX_STDERR_BYTES]

    def write_stdin() -> None:
        assert proc.stdin is not None
        # ssh gone early (refused, box down): its status says so; the pipe error does not.
        with contextlib.suppress(BrokenPipeError, OSError):
            proc.stdin.write(stdin_data or b"")
        with contextlib.suppress(BrokenPipeError, OSError):
            proc.stdin.close()

    tasks = [read_stdout, read_stderr] + ([write_stdin] if stdin_data is not None else [])
    readers = [threading.Thread(target=f, daemon=True) for f in tasks]
    for reader in readers:
        reader.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.wait()
        raise Unreachable(f"{what} did not finish within {timeout:.0f}s") from None
    finally:
        for reader in readers:
            reader.join(timeout=5)
    if overflow.is_set():
        raise OutputTooLarge(
            f"{what} printed more than {MAX_STDOUT_BYTES // 1024} KiB; stopped reading there "
            "(nvidia-smi's answer is a few KiB)"
        )
    return _Bounded(proc.returncode, _decode(bytes(out)), _decode(bytes(err[-MAX_STDERR_BYTES:])))


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


# ------------------------------------------------------------------------------------- ssh

# ssh exits 255 for its own failures; these messages mean retrying will not help.
_PERMANENT_SSH_ERRORS = (
    "UNPROTECTED PRIVATE KEY FILE",
    "Bad configuration option",
    "Can't open user config file",
    "no such identity",
    "Load key",
    "contains invalid characters",
    "Could not resolve hostname",
)
_HOST_KEY_ERRORS = ("REMOTE HOST IDENTIFICATION HAS CHANGED", "Host key verification failed")

# What may stand in a box record's host and user: a DNS name or an IP address, a POSIX user
# name. Anything else (a leading "-", spaces, "%", quotes) is a tampered record, refused
# before ssh runs rather than retried until the timeout.
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|[0-9A-Fa-f:]*:[0-9A-Fa-f:.]+")
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")


def validate_host(host: str) -> str:
    if not isinstance(host, str) or not _HOST.fullmatch(host):
        raise UsageError(f"box address {host!r} is not a host name or IP address")
    return host


def validate_user(user: str) -> str:
    if not isinstance(user, str) or not _USER.fullmatch(user):
        raise UsageError(f"ssh user {user!r} is not a valid user name")
    return user


# The remote command runs in a subshell and then reports its exit status on a marker line on
# stderr: that line is how a remote exit of 255 (nvidia-smi uses it) is told apart from ssh's
# own 255 (connection or authentication failed), where no marker arrives.
_MARKER = "ORCH-REMOTE-EXIT"


def wrap_remote(script: str, nonce: str) -> str:
    return f"( {script}\n); printf '\\n{_MARKER}-{nonce} %d\\n' \"$?\" >&2"


def unwrap_remote(stderr: str, nonce: str) -> tuple[int | None, str]:
    """(remote exit status or None when no marker came, stderr without the marker line)."""
    matches = list(re.finditer(rf"\n?{_MARKER}-{nonce} (\d{{1,3}})\n?", stderr))
    if not matches:
        return None, stderr
    match = matches[-1]
    return int(match.group(1)), stderr[: match.start()] + stderr[match.end() :]


# The remote command of a script sent on stdin: bash reads all of it into memory, gives the
# script's commands an empty stdin (so none of them eats the rest of the script), and runs it.
# The script never appears in an argv: `ps` on the box shows only this line.
READ_STDIN = "exec /bin/bash -c 'orch_script=$(cat) && exec </dev/null && eval \"$orch_script\"'"


def _percent_escaped(arg: str) -> str:
    # ssh expands %h, %p, ... in ProxyCommand; our own arguments must reach the hop verbatim.
    return arg.replace("%", "%%")


_JUMP = re.compile(
    r"(?:ssh://)?(?:(?P<user>[^@/]+)@)?(?P<host>\[[^\]]+\]|[^:/@]+)(?::(?P<port>\d+))?"
)


@dataclass(slots=True)
class SshTransport:
    host: str
    user: str
    key_path: Path
    known_hosts_path: Path
    ssh_config: str | None = None
    port: int | None = None
    connect_timeout: int = 10
    # A cluster node without a public address: reached through this transport's box (rank 0)
    # with the box's own key and known_hosts (see hop_command), not a user's ProxyJump.
    via: SshTransport | None = None
    _jump: str | None = field(default=None, init=False, repr=False)
    _jump_resolved: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        validate_host(self.host)
        validate_user(self.user)

    @property
    def description(self) -> str:
        through = f" via {self.via.host}" if self.via is not None else ""
        return f"ssh {self.user}@{self.host}{through}"

    def _config_args(self) -> list[str]:
        return ["-F", self.ssh_config] if self.ssh_config else []

    def jump_host(self) -> str | None:
        """The ProxyJump that ssh_config gives the box, if any (from `ssh -G`, once)."""
        if not self._jump_resolved:
            self._jump_resolved = True
            argv = ["ssh", *self._config_args(), "-G", "-l", self.user, "--", self.host]
            try:
                result = run_bounded(argv, 10, "ssh -G")
            except Unreachable:
                return None
            for line in result.stdout.splitlines():
                key, _, value = line.partition(" ")
                if key.lower() == "proxyjump" and value.strip().lower() != "none":
                    self._jump = value.strip()
        return self._jump

    def _common_options(self, connect_timeout: int) -> dict[str, str]:
        return {
            "BatchMode": "yes",
            "ConnectTimeout": str(connect_timeout),
            "ServerAliveInterval": "15",
            "ServerAliveCountMax": "3",
            "LogLevel": "ERROR",
        }

    def proxy_command(self, jump: str, connect_timeout: int, hop_log: Path) -> str:
        """An explicit ProxyCommand for `jump`, carrying orch's options to the hop.

        OpenSSH turns ProxyJump into `ssh [-l user] [-p port] [-F config] -W [%h]:%p jump`
        and passes none of the `-o` options given for the box (ssh.c), so the hop would prompt
        on a terminal and its errors would read as the box's. The hop keeps the user's own
        identity and known_hosts for the bastion; only non-interactive, bounded options are
        added, and its log goes to a file of its own (`-E`) so its errors can be named.
        A chain "a,b" keeps the earlier hops as `-J a` on the last one.
        """
        hops = [hop.strip() for hop in jump.split(",") if hop.strip()]
        match = _JUMP.fullmatch(hops[-1])
        if not match:
            raise OrchError(f"ProxyJump {jump!r} in ssh_config is not [user@]host[:port]")
        argv = ["ssh", *self._config_args(), "-E", str(hop_log)]
        for name, value in self._common_options(connect_timeout).items():
            argv += ["-o", f"{name}={value}"]
        if match.group("user"):
            argv += ["-l", match.group("user")]
        if match.group("port"):
            argv += ["-p", match.group("port")]
        if len(hops) > 1:
            argv += ["-J", ",".join(hops[:-1])]
        host = match.group("host").strip("[]")
        command = " ".join(shlex.quote(_percent_escaped(arg)) for arg in argv)
        return f"{command} -W '[%h]:%p' -- {shlex.quote(_percent_escaped(host))}"

    def argv(
        self, script: str, connect_timeout: int | None = None, hop_log: Path | None = None
    ) -> list[str]:
        connect_timeout = connect_timeout or self.connect_timeout
        argv = ["ssh", *self._config_args()]
        if self.port:
            argv += ["-p", str(self.port)]
        options = self._box_options(connect_timeout)
        if self.via is not None:  # every use: short scripts, `orch run`'s streams and rsync
            options["ProxyCommand"] = self.via.hop_command(connect_timeout, hop_log)
        elif hop_log is not None and (jump := self.jump_host()):
            # Given first on the command line, ProxyCommand wins over the config's ProxyJump.
            options["ProxyCommand"] = self.proxy_command(jump, connect_timeout, hop_log)
        for name, value in options.items():
            argv += ["-o", f"{name}={value}"]
        return [*argv, "-l", self.user, "--", self.host, script]

    def _box_options(self, connect_timeout: int) -> dict[str, str]:
        return {
            "IdentityFile": str(self.key_path),
            "IdentitiesOnly": "yes",
            "UserKnownHostsFile": str(self.known_hosts_path),
            # Only the box's own file: a stale entry in the user's global files must not
            # override the per-box pin.
            "GlobalKnownHostsFile": "/dev/null",
            "StrictHostKeyChecking": "accept-new",
            **self._common_options(connect_timeout),
        }

    def hop_command(self, connect_timeout: int, hop_log: Path | None) -> str:
        """A ProxyCommand that reaches another host through this box: a cluster's rank 0
        carrying the traffic of a node without a public address (provision/cluster.py). The
        hop is ssh to this box with its own key and pinned known_hosts, then `-W` to the
        target (ssh_config(5) ProxyCommand, %h/%p: the target's HostName and Port)."""
        argv = ["ssh", *self._config_args(), *(["-E", str(hop_log)] if hop_log else [])]
        if self.port:
            argv += ["-p", str(self.port)]
        for name, value in self._box_options(connect_timeout).items():
            argv += ["-o", f"{name}={value}"]
        argv += ["-l", self.user]
        command = " ".join(shlex.quote(_percent_escaped(arg)) for arg in argv)
        return f"{command} -W '[%h]:%p' -- {shlex.quote(_percent_escaped(self.host))}"

    def run(self, script: str, timeout: float, *, on_stdin: bool = False) -> CommandResult:
        """Run `script` on the box. `on_stdin`: the script travels on ssh's stdin, so no
        process list here or on the box shows it (it may carry secrets); the command line
        is a fixed reader (READ_STDIN)."""
        self.known_hosts_path.parent.mkdir(parents=True, exist_ok=True)
        # Never wait longer to connect than the whole call may take (near a retry deadline).
        connect_timeout = max(1, min(self.connect_timeout, int(timeout)))
        nonce = secrets.token_hex(8)
        wrapped = wrap_remote(script, nonce)
        remote, data = (READ_STDIN, wrapped.encode()) if on_stdin else (wrapped, None)
        with tempfile.TemporaryDirectory(prefix="orch-ssh-") as scratch:
            hop_log = Path(scratch) / "jump.log"
            argv = self.argv(remote, connect_timeout, hop_log)
            proc = run_bounded(argv, max(timeout, 1.0), self.description, data)
            hop_errors = hop_log.read_text(errors="replace") if hop_log.exists() else ""
        remote_exit, stderr = unwrap_remote(proc.stderr, nonce)
        if remote_exit is not None:
            return CommandResult(remote_exit, proc.stdout, stderr)
        if proc.returncode != 255:
            return CommandResult(proc.returncode, proc.stdout, stderr)
        if hop_errors.strip():
            self._raise_for_hop(hop_errors)
        message = _last_line(stderr) or "ssh failed"
        if any(marker in stderr for marker in _HOST_KEY_ERRORS):
            raise HostKeyChanged(
                f"host key of {self.host} does not match the one pinned in {self.known_hosts_path}",
                hint="the box was replaced or someone is in the middle; if the box was "
                "recreated on purpose, delete that file and retry",
            )
        if any(marker in stderr for marker in _PERMANENT_SSH_ERRORS):
            raise OrchError(f"{self.description}: {message}")
        raise Unreachable(f"{self.description}: {message}")

    def _raise_for_hop(self, hop_errors: str) -> None:
        jump = f"{self.via.host} (rank 0)" if self.via is not None else self.jump_host()
        message = _last_line(hop_errors)
        if "REMOTE HOST IDENTIFICATION HAS CHANGED" in hop_errors:
            raise HostKeyChanged(
                f"host key of the jump host {jump} does not match the one in your known_hosts",
                hint="check the bastion's key with its owner before trusting it",
            )
        if "Host key verification failed" in hop_errors or "host key is known" in hop_errors:
            raise OrchError(
                f"host key of the jump host {jump} is not known (ProxyJump in ssh_config)",
                hint=f"connect once with `ssh {jump}` and verify its key, or add it to the "
                "known_hosts file your ssh_config names for it",
            )
        if any(marker in hop_errors for marker in _PERMANENT_SSH_ERRORS + ("Permission denied",)):
            raise OrchError(f"jump host {jump}: {message}")
        raise Unreachable(f"jump host {jump}: {message}")


# ----------------------------------------------------------------------------------- local


@dataclass(slots=True)
class LocalTransport:
    description: str = "this machine"

    def run(self, script: str, timeout: float) -> CommandResult:
        proc = run_bounded(["/bin/sh", "-c", script], max(timeout, 1.0), "the command")
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)


# ------------------------------------------------------------------------------ cloud agents
# A cloud's in-guest agent (SSM on AWS, Cloud Assistant on Aliyun) is the cloud's own
# transport: its optional `agent_transport(...)` (HasAgentTransport), chosen by `--via`.


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
    agents = (via for via in map(agent_via_of, clouds.all_clouds()) if via)
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
    own = agent_via_of(cloud)
    if own != via or not isinstance(cloud, HasAgentTransport):
        owners = [c.title for c in clouds.all_clouds() if agent_via_of(c) == via]
        theirs = f"use {own} on {cloud.title}" if own else "use ssh"
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
