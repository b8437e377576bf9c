"""The last `orch check` of a box, kept in the box's directory (check.json).

`orch check NAME` writes the report there; sizing reads the driver version from it to know
the box's CUDA context (`--cuda-context-gib box:NAME`, orchestrator/commands/context_option.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

CHECK_RECORD = "check.json"


def save_check(directory: Path, report: dict[str, Any]) -> None:
    """Write the report atomically, mode 0600 (it names the box's GPUs, nothing secret)."""
    target = directory / CHECK_RECORD
    tmp = directory / f".{CHECK_RECORD}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(report, handle, indent=2)
    os.replace(tmp, target)


def load_check(directory: Path) -> dict[str, Any] | None:
    """The recorded report, or None when the box was never checked (or the file is bad)."""
    try:
        data = json.loads((directory / CHECK_RECORD).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def driver_versions(report: dict[str, Any]) -> list[str]:
    gpus = report.get("gpus")
    if not isinstance(gpus, list):
        return []
    found = {g.get("driver_version") for g in gpus if isinstance(g, dict)}
    return sorted(v for v in found if isinstance(v, str) and v)
