"""What `orch run` leaves out of the working directory it syncs to the box.

Besides every `.gitignore` in the tree (rsync's dir-merge filter, in sync.py), git's other
ignore files count as git would read them (gitignore(5)): the repository's
`.git/info/exclude`, and the user's `core.excludesFile` (default
`$XDG_CONFIG_HOME/git/ignore`, else `~/.config/git/ignore`). Secrets that often sit in a
project folder are never synced unless `--include PATTERN` names them: `.env`, `*.pem`,
`id_*` (ssh keys), `.aws/`. rsync reports each item a pattern hid (`--debug=FILTER`), so
orch can say which secrets it left behind.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

SECRET_PATTERNS = (".env", "*.pem", "id_*", ".aws/")
_HIDING = re.compile(
    r"\[sender\] hiding (?:file|directory) (?P<name>.+) because of pattern (?P<pattern>\S+)"
)


def git_exclude_files(workdir: Path) -> list[Path]:
    """The exclude files git reads for `workdir` besides .gitignore, those that exist."""
    found = [workdir / ".git" / "info" / "exclude"]
    user = _core_excludes_file(workdir)
    if user is None:
        base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
        user = Path(base) / "git" / "ignore"
    found.append(user)
    return [path for path in found if path.is_file()]


def _core_excludes_file(workdir: Path) -> Path | None:
    """core.excludesFile as git resolves it (`git config --path`), or None when unset or
    git is not installed."""
    git = shutil.which("git")
    if not git:
        return None
    try:
        result = subprocess.run(
            [git, "config", "--path", "--get", "core.excludesFile"],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    value = result.stdout.strip()
    return Path(value).expanduser() if result.returncode == 0 and value else None


def filter_args(workdir: Path, includes: list[str], excludes: list[str]) -> list[str]:
    """rsync filter options, first match wins: --include, the secret patterns, .gitignore
    files, git's exclude files, .git, --exclude."""
    args = [f"--include={pattern}" for pattern in includes]
    args += [f"--exclude={pattern}" for pattern in SECRET_PATTERNS]
    args += ["--filter=:- .gitignore"]
    args += [f"--exclude-from={path}" for path in git_exclude_files(workdir)]
    args += ["--exclude=.git"]
    args += [f"--exclude={pattern}" for pattern in excludes]
    return args + ["--debug=FILTER1"]


def secrets_left_out(rsync_output: str) -> list[str]:
    """The items a secret pattern hid, from rsync's --debug=FILTER lines."""
    left = []
    for line in rsync_output.splitlines():
        match = _HIDING.fullmatch(line.strip())
        if match and match.group("pattern") in SECRET_PATTERNS:
            left.append(match.group("name"))
    return left
