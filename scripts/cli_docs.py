#!/usr/bin/env python3
"""Generate docs/cli.md (every command's --help) and docs/orch.schema.json (the job file's
JSON Schema) from the code, so that neither can drift from it. Usage (repository root):

    python scripts/cli_docs.py            # rewrite both
    python scripts/cli_docs.py --check    # exit 1 when either is out of date

tests/unit/test_cli_docs.py runs the check.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI_MD = REPO / "docs" / "cli.md"
SCHEMA_JSON = REPO / "docs" / "orch.schema.json"
WIDTH = 100  # help is wrapped at this width, whatever the terminal

HEAD = """# Command reference

Generated from `orch ... --help` by `scripts/cli_docs.py` (do not edit by hand; a test checks
that it is current). Durations are written `30s`, `10m`, `2h`, `1d` everywhere (options shown
as `DURATION`; a bare number keeps the option's older unit). Most options of `plan`, `up` and
`run` can also come from a job file, [`orch.yaml`](../README.md#the-job-file-orchyaml)
(schema: [orch.schema.json](orch.schema.json)); a flag overrides the file.

Shell completion: `orch completion bash|zsh|fish` prints the script (see below).
"""


def _commands() -> list[tuple[list[str], object]]:
    """(path, click command) for the group and every sub-command, depth first, sorted."""
    import click

    from orchestrator.click_group import cli

    found: list[tuple[list[str], object]] = []

    def walk(command: click.Command, path: list[str]) -> None:
        found.append((path, command))
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None and not getattr(sub, "hidden", False):
                    walk(sub, [*path, name])

    walk(cli, [])
    return found


def _help(path: list[str]) -> str:
    import click

    from orchestrator.click_group import cli

    ctx = click.Context(cli, info_name="orch", terminal_width=WIDTH, max_content_width=WIDTH)
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.get_command(ctx, name)
        ctx = click.Context(
            command, info_name=name, parent=ctx, terminal_width=WIDTH, max_content_width=WIDTH
        )
    return command.get_help(ctx)


def cli_markdown() -> str:
    parts = [HEAD]
    for path, _ in _commands():
        title = " ".join(["orch", *path])
        parts.append(f"## `{title}`\n\n```\n{_help(path).rstrip()}\n```\n")
    return "\n".join(parts)


def schema_json() -> str:
    from orchestrator.jobfile.layout import schema

    return json.dumps(schema(), indent=2) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when out of date")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    stale = []
    for target, text in ((CLI_MD, cli_markdown()), (SCHEMA_JSON, schema_json())):
        current = target.read_text() if target.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(target.relative_to(REPO))
        else:
            target.write_text(text)
            print(f"wrote {target.relative_to(REPO)}")
    if stale:
        print(f"out of date: {', '.join(map(str, stale))} (run python scripts/cli_docs.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
