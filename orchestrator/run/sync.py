"""Copy the working directory to the box and the --fetch paths back, with rsync over SSH.

Up: every .gitignore in the tree is honoured the way rsync's per-directory merge filter reads
it (`--filter=':- .gitignore'`, rsync(1) "FILTER RULES": dir-merge with the `-` modifier, so
each line is an exclude pattern for its folder and below), so are .git/info/exclude and
core.excludesFile, secrets (.env, *.pem, id_*, .aws/) stay here unless --include names them
(run/ignores.py), `.git` itself is left behind, and `--exclude` patterns are added. Files
are only added or updated on the box, never deleted: what the job wrote there (outputs,
checkpoints) survives the next sync.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from orchestrator.check.transport import SshTransport
from orchestrator.check.untrusted import last_line, printable
from orchestrator.errors import OrchError
from orchestrator.run import ignores
from orchestrator.run.shell import call, rsync_shell

Say = Callable[[str], None]
RSYNC_TIMEOUT_S = 3600.0
# rsync(1) EXIT VALUES: 23 partial transfer due to error (a --fetch path that is not there),
# 24 some source files vanished; 12 and 255 are the connection (retried by callers).
_MISSING_SOURCE = (23,)
MAX_LINKS_SHOWN = 1000


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
            errors="replace",  # the box writes into rsync's stderr: any byte, never a traceback
            timeout=RSYNC_TIMEOUT_S,
            start_new_session=True,  # no ssh password prompt on our terminal
        )
    except subprocess.TimeoutExpired:
        raise OrchError(f"{what} took longer than {RSYNC_TIMEOUT_S:.0f} s") from None


def _last_line(text: str) -> str:
    """rsync's last line, escaped: the box's shell and rsync write into it."""
    return last_line(text) or "no message"


def push(
    transport: SshTransport,
    local: Path,
    remote_dir: str,
    excludes: list[str],
    includes: list[str] | None = None,
    say: Say | None = None,
) -> None:
    """Sync `local`/ into ~/`remote_dir`/ on the box (what is left out: run/ignores.py);
    say which secrets stayed here."""
    argv = [_rsync(), "-az", *ignores.filter_args(local, list(includes or []), excludes)]
    argv += ["-e", rsync_shell(transport), f"{local.resolve()}/", _remote(transport, remote_dir)]
    result = _run(argv, "syncing the working directory")
    if result.returncode != 0:
        raise OrchError(
            f"syncing {local} to the box failed (rsync exit {result.returncode}): "
            f"{_last_line(result.stderr)}"
        )
    left = [printable(name, 200) for name in ignores.secrets_left_out(result.stdout)]
    if left and say is not None:
        shown = ", ".join(left[:10]) + (f" and {len(left) - 10} more" if len(left) > 10 else "")
        say(f"not synced (secrets stay here; --include PATTERN sends one): {shown}")


def unsafe_links_script(remote_dir: str, path: str) -> str:
    """List (one `LINK -> TARGET` a line) the symlinks at or under `path`, or among its
    parent folders, that lead outside `remote_dir`: absolute ones, and relative ones that
    climb above it. rsync --safe-links leaves exactly these out (rsync(1), SYMBOLIC LINKS:
    "unsafe" links are absolute or climb above the top of the transfer, here the "/./")."""
    return "\n".join(
        [
            f"cd {shlex.quote(remote_dir)} || exit 0",
            "unsafe() {",
            '  t=$(readlink -- "$1") || return 0',
            '  case "$t" in /*) printf \'%s -> %s\\n\' "${1#./}" "$t"; return 0;; esac',
            '  r=$(realpath -m -s -- "$(dirname -- "$1")/$t")',
            '  case "$r" in "$PWD"|"$PWD"/*) ;; *) printf \'%s -> %s\\n\' "${1#./}" "$t";; esac',
            "}",
            f"p=./{shlex.quote(path)}",
            "prefix=.; rest=${p#./}",
            'while [ -n "$rest" ]; do',
            '  prefix="$prefix/${rest%%/*}"',
            '  case "$rest" in */*) rest=${rest#*/};; *) rest="";; esac',
            '  if [ -L "$prefix" ]; then unsafe "$prefix"; exit 0; fi',
            "done",
            f'find "$p" -type l 2>/dev/null | head -n {MAX_LINKS_SHOWN} |',
            '  while IFS= read -r link; do unsafe "$link"; done',
        ]
    )


def _say_unsafe(transport: SshTransport, remote_dir: str, path: str, say: Say) -> None:
    """Name the links rsync --safe-links is about to leave out (best effort)."""
    try:
        result = call(transport, unsafe_links_script(remote_dir, path), what="listing links")
    except OrchError:
        return
    links = [printable(line, 200) for line in result.stdout.splitlines() if " -> " in line]
    if links:
        shown = ", ".join(links[:10]) + (f" and {len(links) - 10} more" if len(links) > 10 else "")
        say(f"--fetch {path}: left out symlinks leading outside the working directory: {shown}")


def pull(
    transport: SshTransport, remote_dir: str, paths: list[str], local: Path, say: Say
) -> list[str]:
    """Fetch each of `paths` (relative to ~/`remote_dir`) into the same place under `local`.

    A symlink on the box that leads outside the working directory (absolute, or climbing
    above it: `outputs -> /etc`) never comes back: rsync's --safe-links leaves it out, and
    it is named. Returns the paths fetched; a path missing on the box is said and skipped."""
    fetched: list[str] = []
    for path in paths:
        _say_unsafe(transport, remote_dir, path, say)
        # "/./" marks where --relative starts keeping the path (rsync(1), --relative).
        source = _remote(transport, f"{remote_dir}/./{path}")
        argv = [_rsync(), "-az", "--relative", "--safe-links", "-e", rsync_shell(transport)]
        argv += [source, f"{local}/"]
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


def pull_file(transport: SshTransport, remote_path: str, local_path: Path) -> bool:
    """Copy one file (an absolute path on the box) to `local_path`; False when it is not there."""
    argv = [_rsync(), "-a", "--safe-links", "-e", rsync_shell(transport)]
    argv += [_remote(transport, remote_path), str(local_path)]
    result = _run(argv, f"fetching {remote_path}")
    if result.returncode == 0:
        return True
    if result.returncode in _MISSING_SOURCE:
        return False
    raise OrchError(
        f"fetching {remote_path} failed (rsync exit {result.returncode}): "
        f"{_last_line(result.stderr)}"
    )
