"""`orch init`: write a commented example job file (orch.yaml) to start from."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import click

from orchestrator.commands.registry import JOB_FILE
from orchestrator.errors import UsageError


@click.command("init")
@click.option(
    "-f",
    "--file",
    "path",
    default=JOB_FILE,
    show_default=True,
    type=click.Path(dir_okay=False),
    help="Where to write the job file.",
)
@click.option("--force", is_flag=True, help="Replace an existing file.")
def init(path: str, force: bool) -> None:
    """Write a commented example job file, for `orch plan`, `orch up` and `orch run`.

    \b
    Examples:
      orch init                       # ./orch.yaml; then edit it and `orch plan`
      orch init -f jobs/bert.yaml     # then `orch plan -f jobs/bert.yaml`
    """
    from orchestrator.jobfile.example import EXAMPLE

    if not path:  # Path("") is the current folder, which "exists"
        raise UsageError("-f: the file name is empty")
    target = Path(path)
    if target.exists() and not force:
        raise UsageError(f"{path} exists", hint="--force replaces it")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (0 if force else os.O_EXCL)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with os.fdopen(os.open(target, flags, 0o644), "w", encoding="utf-8") as handle:
            handle.write(EXAMPLE)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    command = "orch plan" if path == JOB_FILE else f"orch plan -f {shlex.quote(path)}"
    click.echo(f"Wrote {path}: edit it, then `{command}`")
