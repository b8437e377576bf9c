"""`orch plan` / `orch estimate` without click: the quick parser agrees with click on every
command line it accepts, declines the rest, and the two paths print the same thing."""

from __future__ import annotations

import math
import os
import random
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from orchestrator import cli as cli_module
from orchestrator.cli import main, run_quick
from orchestrator.click_group import run_click
from orchestrator.commands import estimate as estimate_command
from orchestrator.commands import plan as plan_command
from orchestrator.commands.option_spec import (
    Option,
    QuickCommand,
    click_command,
    given_on_command_line,
)
from orchestrator.commands.quick_parse import parse_plain

COMMANDS = {"plan": plan_command.COMMAND, "estimate": estimate_command.COMMAND}


def comparable(values: dict[str, Any]) -> dict[str, Any]:
    """NaN as a string, so that equal parses compare equal (both parsers pass "nan")."""
    return {k: "NaN" if isinstance(v, float) and math.isnan(v) else v for k, v in values.items()}


def click_parse(command: QuickCommand, args: list[str]) -> tuple[dict[str, Any], frozenset[str]]:
    """What click makes of `args`: every parameter's value, and which the user gave."""
    with click_command(command).make_context(command.name, list(args)) as ctx:
        return comparable(ctx.params), given_on_command_line(ctx.params)


def quick_parse(command: QuickCommand, args: list[str]) -> tuple[dict[str, Any], frozenset[str]]:
    parsed = parse_plain(command.options, args)
    assert parsed is not None, args
    return comparable(parsed.values), parsed.given


# Values for each kind of option: ones click accepts and ones it refuses or needs to judge.
NUMBERS = ["0", "1", "3", "7", "512", "-1", "0.5", "1e3", "1_000", " 8", "x", "", "inf", "nan"]
TEXTS = ["bert-large", "us-east-1", "A10G=123.4", "", "a=b=c", "-x", "--json", "6h"]


def value_for(option: Option, rng: random.Random, tmp_path: Path) -> str:
    if option.choices:
        return rng.choice([*option.choices, option.choices[0].upper(), "nope", ""])
    if option.kind == "path":
        return rng.choice(
            [str(tmp_path / "new.json"), str(tmp_path / "existing.json"), str(tmp_path), "-"]
        )
    if option.kind in ("int", "float"):
        return rng.choice(NUMBERS)
    return rng.choice(TEXTS)


def token_for(option: Option, rng: random.Random, tmp_path: Path) -> list[str]:
    flag = rng.choice(option.flags)
    if option.kind == "flag":
        return [flag] if rng.random() < 0.95 else [f"{flag}=1"]
    value = value_for(option, rng, tmp_path)
    if flag.startswith("--") and rng.random() < 0.3:
        return [f"{flag}={value}"]
    return [flag, value]


def command_lines(command: QuickCommand, tmp_path: Path, count: int) -> list[list[str]]:
    rng = random.Random(f"quick-parse-{command.name}")  # the same lines on every run
    lines = []
    for _ in range(count):
        args: list[str] = []
        for _ in range(rng.randint(0, 6)):
            args += token_for(rng.choice(command.options), rng, tmp_path)
        odd = rng.random()
        if odd < 0.03:
            args.append(rng.choice(["--help", "-h", "--", "extra", "--no-such-option", "-ofile"]))
        elif odd < 0.06 and args:
            args.pop()  # an option left without its value
        lines.append(args)
    return lines


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_quick_parser_agrees_with_click_on_every_line_it_accepts(name, tmp_path):
    command = COMMANDS[name]
    (tmp_path / "existing.json").write_text("{}")
    accepted = declined = 0
    for args in command_lines(command, tmp_path, 1500):
        quick = parse_plain(command.options, args)
        try:
            by_click = click_parse(command, args)
        except click.exceptions.Exit:  # --help
            by_click = None
        except click.ClickException:
            by_click = None
        if quick is None:
            declined += 1
            continue
        accepted += 1
        assert by_click is not None, f"click refuses what the quick parser took: {args}"
        assert quick_parse(command, args) == by_click, args
    # Both ways are exercised: most generated lines are plain, many carry a bad value.
    assert accepted > 300 and declined > 300, (accepted, declined)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_examples_in_the_help_take_the_quick_path(name):
    command = COMMANDS[name]
    examples = [
        shlex.split(line.strip())[2:]
        for line in command.help.splitlines()
        # A job file (-f) is read on click's path, by design (orchestrator/jobfile).
        if line.strip().startswith(f"orch {name} ") and " -f " not in line
    ]
    assert examples
    for args in examples:
        assert quick_parse(command, args) == click_parse(command, args)


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["-h"],
        ["--model", "bert-large", "extra"],
        ["--model", "bert-large", "--"],
        ["--no-such-option"],
        ["--json=1"],
        ["--model"],
        ["--batch", "-1"],
        ["--batch", "eight"],
        ["--zero", "4"],
        ["--headroom", "0.05"],
        ["--epochs", "0"],
        ["--cloud", "gcp"],
        ["--precision", "AMP-BF16"],
        ["-ofile.json"],
        ["-o=file.json"],
    ],
)
def test_the_quick_parser_declines_what_click_must_judge(args):
    assert parse_plain(plan_command.OPTIONS, args) is None


def test_an_output_path_that_is_a_directory_is_left_to_click(tmp_path):
    existing = tmp_path / "plan.json"
    existing.write_text("{}")
    assert parse_plain(plan_command.OPTIONS, ["-o", str(existing)]).values["output"] == str(
        existing
    )
    assert parse_plain(plan_command.OPTIONS, ["-o", str(tmp_path)]) is None


def test_repeated_options_keep_the_last_value_or_all_values_when_multiple():
    parsed = parse_plain(
        plan_command.OPTIONS,
        ["--batch", "4", "--batch=16", "--throughput", "T4=10", "--throughput", "A10G=20"],
    )
    assert parsed.values["batch"] == 16
    assert parsed.values["throughput"] == ("T4=10", "A10G=20")
    assert {"batch", "throughput"} == parsed.given


def test_an_option_declaration_is_checked():
    with pytest.raises(ValueError, match="kind"):
        Option(("--x",), "x", "integer")
    with pytest.raises(ValueError, match="choices"):
        Option(("--x",), "x", "int", choices=("1",))
    with pytest.raises(ValueError, match="range"):
        Option(("--x",), "x", minimum=0)


def outcome(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        main(args)
        status = 0
    except SystemExit as exc:
        status = exc.code or 0
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "--model", "bert-large"],
        ["plan", "--model", "llama-3-8b", "--lora-rank", "16", "--gpus", "1", "--json"],
        ["plan", "--model", "bert-large", "--gpus", "8", "--top", "3", "--spot"],
        ["plan", "--model", "bert-large", "--throughput", "T4=40", "--cloud", "aws"],
        ["plan", "--model", "no-such-model"],
        ["plan"],
        ["plan", "--model", "bert-large", "--deadline", "soon"],
        ["plan", "--model", "gpt2", "--max-price", "0.01"],
        ["estimate", "--model", "bert-large", "--batch", "32", "--seq", "128"],
        ["estimate", "--params-m", "350", "--json", "--zero", "3", "--gpus", "8"],
    ],
    ids=" ".join,
)
def test_the_quick_path_prints_what_the_click_path_prints(args, capsys, monkeypatch):
    took_quick_path = []

    def spy(argv: list[str]) -> int | None:
        took_quick_path.append(True)
        status = run_quick(argv)  # raises the failures main reports: the command ran
        assert status is not None, "the quick parser declined a plain command line"
        return status

    monkeypatch.setattr(cli_module, "run_quick", spy)
    quick = outcome(args, capsys)
    assert took_quick_path
    monkeypatch.setattr(cli_module, "run_quick", lambda argv: None)  # everything through click
    assert quick == outcome(args, capsys)
    assert quick[1] or quick[2]  # it printed something


def test_plan_writes_the_same_plan_file_either_way(tmp_path, capsys):
    quick_file, click_file = tmp_path / "quick.json", tmp_path / "click.json"
    assert run_quick(["plan", "--model", "bert-large", "-o", str(quick_file)]) == 0
    assert run_click(["plan", "--model", "bert-large", "-o", str(click_file)]) == 0
    assert quick_file.read_text() == click_file.read_text()
    capsys.readouterr()


def test_main_falls_back_to_click_for_help_and_errors(capsys):
    main(["plan", "--help"])  # status 0: returns
    assert "Examples:" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:
        main(["plan", "--model", "bert-large", "--zero", "4"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("orch: error:") and "--zero" in err and len(err.splitlines()) == 1


def test_a_plain_plan_does_not_import_click():
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for args, imports_click in (
        (["plan", "--model", "bert-large"], False),
        (["estimate", "--model", "bert-large", "--json"], False),
        (["plan", "--model", "bert-large", "--zero", "9"], True),  # click words the error
    ):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "orchestrator", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
        assert ("click" in imported) is imports_click, (args, done.returncode)
        assert "torch" not in imported
