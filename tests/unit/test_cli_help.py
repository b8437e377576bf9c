"""Every command's --help: exits 0, has an Examples block, and its examples parse.

The click tree is walked (groups included, so `catalog`'s sub-commands are covered and a new
command is picked up without editing this file). Each example line is parsed by the command it
names, as click would parse it, so an example that uses a renamed, hidden or misspelt option,
or a value its option does not accept, fails here.
"""

from __future__ import annotations

import re
import shlex

import click
import pytest
from click.testing import CliRunner

from orchestrator.click_group import cli


def walk(
    group: click.Group, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], click.Command]]:
    found: list[tuple[tuple[str, ...], click.Command]] = []
    ctx = click.Context(group, info_name="orch")
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, f"orch {' '.join((*path, name))} cannot be loaded"
        if command.hidden:  # internal (orch pool _provision): not in --help, no examples
            continue
        found.append(((*path, name), command))
        if isinstance(command, click.Group):
            found += walk(command, (*path, name))
    return found


COMMANDS = walk(cli)
IDS = [" ".join(path) for path, _ in COMMANDS]


def help_text(*path: str) -> str:
    result = CliRunner().invoke(cli, [*path, "--help"], prog_name="orch")
    assert result.exit_code == 0, result.output
    return result.output


def examples(text: str) -> list[str]:
    """The `orch ...` lines of the help's Examples block (a trailing description dropped)."""
    match = re.search(r"^ *(?:Examples|Quick start):\n((?: +orch .*\n?)+)", text, re.MULTILINE)
    if match is None:
        return []
    return [re.split(r"\s{2,}", line.strip())[0] for line in match.group(1).splitlines()]


def resolve(tokens: list[str]) -> tuple[click.Command, list[str], list[str]]:
    """The command an example names, its path and the arguments left for it."""
    command: click.Command = cli
    path: list[str] = []
    rest = tokens
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        sub = command.get_command(click.Context(command), rest[0])
        if sub is None:
            break
        command, path, rest = sub, [*path, rest[0]], rest[1:]
    return command, path, rest


def visible_flags(command: click.Command) -> set[str]:
    return {
        flag
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden
        for flag in (*param.opts, *param.secondary_opts)
    }


def test_the_walk_finds_every_command() -> None:
    # 10 top-level commands plus catalog's four: today's set; more is fine, fewer is a bug.
    expected = {"plan", "estimate", "catalog", "up", "down", "status", "list", "check"}
    expected |= {"watch", "sweep", "catalog gpus", "catalog instances", "catalog models"}
    expected |= {"catalog refresh"}
    assert expected <= set(IDS)


def test_top_level_help_lists_every_command() -> None:
    text = help_text()
    for path, _ in COMMANDS:
        if len(path) == 1:
            assert re.search(rf"^  {path[0]}\b", text, re.MULTILINE), path
    assert examples(text), "the top-level help shows how to start"


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_help_has_examples_that_parse(path: tuple[str, ...], command: click.Command) -> None:
    text = help_text(*path)
    lines = examples(text)
    assert lines, f"`orch {' '.join(path)} --help` has no Examples: block"
    for line in lines:
        tokens = shlex.split(line)
        assert tokens[0] == "orch", line
        target, target_path, rest = resolve(tokens[1:])
        assert target_path[: len(path)] == list(path), f"{line!r} is not an example of {path}"
        flags = visible_flags(target)
        for token in rest:
            if token.startswith("-") and token != "--":
                flag = token.split("=", 1)[0]
                assert flag in flags, f"{line!r}: {flag} is not an option of the command"
        # Parse it for real: choices, types and required options as click checks them.
        target.make_context(" ".join(["orch", *target_path]), list(rest))


def test_examples_of_the_top_level_help_parse() -> None:
    for line in examples(help_text()):
        target, target_path, rest = resolve(shlex.split(line)[1:])
        assert target_path, line
        target.make_context(" ".join(["orch", *target_path]), list(rest))


def test_deprecated_spellings_are_hidden_from_help() -> None:
    assert "--check-via" not in help_text("up")
    assert "--max-price" not in help_text("up")
    assert "all" not in help_text("sweep").split("--cloud", 1)[1].split("\n")[0]
    assert "[default: 1]" not in help_text("plan").split("--gpus", 1)[1].split("--zero")[0]


@pytest.mark.parametrize("words", [(), ("pool",), ("catalog",)])
def test_a_group_without_a_command_prints_its_help(words, capsys) -> None:
    # Click 8.2 turned the help of a bare group into a usage error: `orch` and `orch pool`
    # were one 2,000-character line `orch: error: Usage: orch [OPTIONS] ...`, exit 2. Now
    # each prints its help as click 8.1 did and `orch catalog` always has.
    from tests.support import run_cli

    code, out, err = run_cli(capsys, *words)
    assert (code, err) == (0, "")
    assert out.startswith(f"Usage: {' '.join(('orch', *words))} [OPTIONS] ")
    assert "\nCommands:\n" in out
