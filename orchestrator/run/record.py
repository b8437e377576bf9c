"""A box's run records: runs/RUN_ID.json in the box's folder, so `orch logs`, `orch wait` and
`orch stop` find the run that `orch run` (maybe with --detach) started there.

A record holds what the run was asked (no environment values), whether the run created the
box (and so destroys it when done), and its state; it is written atomically, mode 0600.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchError, UsageError
from orchestrator.provision.boxes import Box
from orchestrator.run.spec import validate_run_id

RUNS = "runs"


def runs_dir(box: Box) -> Path:
    return box.directory / RUNS


def save_run(box: Box, record: dict[str, Any]) -> Path:
    run_id = validate_run_id(str(record["run_id"]))
    folder = runs_dir(box)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".run-", dir=folder)
    with os.fdopen(fd, "w") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
        handle.write("\n")
    path = folder / f"{run_id}.json"
    os.replace(tmp, path)
    return path


def load_run(box: Box, run_id: str | None = None) -> dict[str, Any]:
    """The record of `run_id`, or of the newest run on the box."""
    folder = runs_dir(box)
    if run_id is not None:
        path = folder / f"{validate_run_id(run_id)}.json"
        if not path.is_file():
            raise UsageError(f"box {box.name} has no run {run_id}")
    else:
        # Run ids start with their UTC start time, so the newest sorts last.
        paths = sorted(folder.glob("r-*.json")) if folder.is_dir() else []
        if not paths:
            raise UsageError(f"box {box.name} has no run", hint="start one with `orch run`")
        path = paths[-1]
    try:
        record = json.loads(path.read_text())
        validate_run_id(str(record["run_id"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise OrchError(f"run record {path} is damaged: {exc}") from None
    return record
