"""Reach a box for a run: short scripts with retries, long-lived ssh processes, rsync's -e.

All of it goes through the box's `SshTransport` (orchestrator/check/transport.py), so a run
uses the same key, pinned known_hosts and ssh_config (ORCH_SSH_CONFIG, --ssh-config) as
`orch check`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from orchestrator.check.transport import (
    SshTransport,
    Unreachable,
    backoff_delays,
    sleep_until,
    transport_for_box,
)
from orchestrator.check.untrusted import last_line
from orchestrator.clouds.values import CommandResult
from orchestrator.errors import OrchError
from orchestrator.provision.boxes import Box


def ssh_transport(box: Box, ssh_config: str | None) -> SshTransport:
    transport = transport_for_box(box, via="ssh", ssh_config=ssh_config)
    assert isinstance(transport, SshTransport)
    return transport


Gone = Callable[[], "str | None"]


def call(
    transport: SshTransport,
    script: str,
    *,
    what: str,
    timeout: float = 60,
    retry_s: float = 120,
    gone: Gone | None = None,
) -> CommandResult:
    """Run `script` (sent on ssh's stdin: it never shows in a process list, here or on the
    box); while the box does not answer, retry with back-off for up to `retry_s`. `gone`
    (the cloud's word, orchestrator/run/reach.py) is asked before each retry: a box that is
    gone ends the call at once."""
    deadline = time.monotonic() + retry_s
    delays = backoff_delays(1.0, 10.0)
    while True:
        try:
            return transport.run(script, timeout, on_stdin=True)
        except Unreachable as exc:
            reason = gone() if gone is not None else None
            if reason:
                raise OrchError(f"{what}: the box is gone ({reason})") from None
            if not sleep_until(deadline, next(delays)):
                raise OrchError(f"{what}: {exc.message} (no answer for {retry_s:g} s)") from None


def call_ok(
    transport: SshTransport,
    script: str,
    *,
    what: str,
    timeout: float = 60,
    retry_s: float = 120,
    gone: Gone | None = None,
) -> str:
    """`call`, and a non-zero exit is an OrchError naming `what` and the box's last line
    (escaped: it reaches the terminal in orch's own error line)."""
    result = call(transport, script, what=what, timeout=timeout, retry_s=retry_s, gone=gone)
    if result.exit_code != 0:
        last = last_line(result.stderr) or "no message"
        raise OrchError(f"{what} failed on the box (exit {result.exit_code}): {last}")
    return result.stdout


def stream_argv(transport: SshTransport, script: str) -> list[str]:
    """ssh argv that runs `script` with its stdout streamed back (no marker, no bound)."""
    return transport.argv(script)


def rsync_shell(transport: SshTransport) -> str:
    """The `rsync -e` command: ssh with the box's options and login user, no host.

    rsync splits -e on spaces itself, no shell involved (rsync(1), --rsh: "you can use single-
    and/or double-quotes to preserve spaces in an argument (but not backslashes) ... doubling
    a single-quote inside a single-quoted string gives you a single-quote"), so an argument
    with anything but safe characters is single-quoted, its single quotes doubled: a cluster
    node's ProxyCommand through rank 0 carries `-W '[%h]:%p'`.
    """
    argv = transport.argv("true")
    cut = argv.index("--")
    options = argv[:cut]  # ssh, -F, -p, -o ..., -l USER
    if any("\n" in arg or "\0" in arg for arg in options):
        raise OrchError("an argument of the box's ssh options holds a line break")
    return " ".join(_rsync_word(arg) for arg in options)


def _rsync_word(arg: str) -> str:
    if arg and all(c.isalnum() or c in "@%+=:,./-_" for c in arg):
        return arg
    return "'" + arg.replace("'", "''") + "'"
