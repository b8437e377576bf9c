"""Where commands print progress: `orch: ...` messages and indented progress lines, on stderr.

Kept apart from the command modules so that a command using them (pool, jobs, run) does not
import `commands.boxes` and, through it, the planning options (~0.2 s of start-up).

Both escape what they print, line by line (check/untrusted.py): the messages quote boxes,
Terraform, clouds and shared records, and the modules that compose them escape those words
already; this is the last gate, so a message that forgot cannot reach the terminal raw.
Escaping is idempotent on text already escaped, and orch's own words have no control
characters.
"""

from __future__ import annotations

from collections.abc import Callable

import click

from orchestrator.check.untrusted import printable_lines


def make_say(quiet: bool) -> Callable[[str], None]:
    """A printer of `orch: MESSAGE` lines on stderr; silent when `quiet` (e.g. under --json)."""

    def say(message: str) -> None:
        if not quiet:
            click.echo(f"orch: {printable_lines(message)}", err=True)

    return say


def make_progress(quiet: bool) -> Callable[[str], None]:
    """A printer of indented progress lines (Terraform's events) on stderr; silent when quiet."""

    def progress(line: str) -> None:
        if not quiet:
            click.echo(f"  {printable_lines(line)}", err=True)

    return progress
