"""Which job file, at which revision, a plan came from (recorded as the plan's `source`)."""

from __future__ import annotations

import subprocess
from typing import Any


def describe(job: Any) -> dict[str, Any]:
    """{"job_file": absolute path, "sha256": of its bytes, and inside a git work tree
    "git_commit": HEAD and "git_modified": whether the file differs from HEAD}."""
    path = job.path.resolve()
    source: dict[str, Any] = {"job_file": str(path), "sha256": job.sha256}
    commit = _git(path.parent, "rev-parse", "--verify", "--quiet", "HEAD")
    if commit:
        source["git_commit"] = commit
        changed = _git(path.parent, "status", "--porcelain", "--", path.name)
        source["git_modified"] = bool(changed)
    return source


def _git(folder: Any, *args: str) -> str | None:
    """git's output in `folder`, or None (no git, not a work tree, no commit yet)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
