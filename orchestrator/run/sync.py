"""Copy the working directory to the box and the --fetch paths back, with rsync over SSH.

Up: every .gitignore in the tree is honoured the way rsync's per-directory merge filter reads
it (`--filter=':- .gitignore'`, rsync(1) "FILTER RULES": dir-merge with the `-` modifier, so
each line is an exclude pattern for its folder and below), `.git` itself is left behind, and
`--exclude` patterns are added. Files are only added or updated on the box, never deleted:
what the job wrote there (outputs, checkpoints) survives the next sync.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from orchestrator.check.transport import SshTransport
from orchestrator.errors import OrchError
from orchestrator.run.shell import rsync_shell

Say = Callable[[str], None]
RSYNC_TIMEOUT_S = 3600.0
# rsync(1) EXIT VALUES: 23 partial transfer due to error (a --fetch path that is not there),
# 24 some source files vanished; 12 and 255 are the connection (retried by callers).
_MISSING_SOURCE = (23,)


def _rsync() -> str:
    binary = shutil.which("rsync")
    if not binary:
        raise OrchError("rsync is not installed", hint="install it: apt-get install rsync")
    return binary


def _remote(transport: SshTransport, path: str) -> str:
    host = transport.host
    return f"[{host}]:{path}" if ":" in host else f"{host}:{path}"


def _run(argv: list[str], what: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RSYNC_TIMEOUT_S,
            start_new_session=True,  # no ssh password prompt on our terminal
        )
    except subprocess.TimeoutExpired:
        raise OrchError(f"{what} took longer than {RSYNC_TIMEOUT_S:.0f} s") from None


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"


def push(transport: SshTransport, local: Path, remote_dir: str, excludes: list[str]) -> None:
    """Sync `local`/ into ~/`remote_dir`/ on the box."""
    argv = [_rsync(), "-az", "--filter=:- .gitignore", "--exclude=.git"]
    argv += [f"--exclude={pattern}" for pattern in excludes]
    argv += ["-e", rsync_shell(transport), f"{local.resolve()}/", _remote(transport, remote_dir)]
    result = _run(argv, "syncing the working directory")
    if result.returncode != 0:
        raise OrchError(
            f"syncing {local} to the box failed (rsync exit {result.returncode}): "
            f"{_last_line(result.stderr)}"
        )


def pull(
    transport: SshTransport, remote_dir: str, paths: list[str], local: Path, say: Say
) -> list[str]:
    """Fetch each of `paths` (relative to ~/`remote_dir`) into the same place under `local`.

    Returns the paths fetched; a path missing on the box is said and skipped."""
    fetched: list[str] = []
    for path in paths:
        # "/./" marks where --relative starts keeping the path (rsync(1), --relative).
        source = _remote(transport, f"{remote_dir}/./{path}")
        argv = [_rsync(), "-az", "--relative", "-e", rsync_shell(transport), source, f"{local}/"]
        result = _run(argv, f"fetching {path}")
        if result.returncode == 0:
            fetched.append(path)
        elif result.returncode in _MISSING_SOURCE:
            say(f"--fetch {path}: not on the box ({_last_line(result.stderr)})")
        else:
            raise OrchError(
                f"fetching {path} failed (rsync exit {result.returncode}): "
                f"{_last_line(result.stderr)}"
            )
    return fetched
