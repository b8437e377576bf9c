"""docs/cli.md and docs/orch.schema.json are generated from the code (scripts/cli_docs.py):
this fails when a command's --help or the job file's keys change without regenerating them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_generated_docs_are_current() -> None:
    result = subprocess.run(
        [sys.executable, "scripts/cli_docs.py", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_reference_shows_durations_as_durations() -> None:
    text = (REPO / "docs" / "cli.md").read_text()
    for option in ("--check-timeout", "--lease-wait", "--ttl", "--deadline", "--wait"):
        lines = [line for line in text.splitlines() if line.strip().startswith(option + " ")]
        assert lines and all("DURATION" in line for line in lines), (option, lines)
    assert "SECONDS" not in text
    assert "## `orch completion`" in text and "## `orch init`" in text


def test_one_check_timeout_default_everywhere() -> None:
    """The same idea, the same default: how long a GPU check waits for a booting box."""
    import click

    from orchestrator.click_group import cli

    defaults = {}
    for path, flag in ((("check",), "--timeout"), (("up",), "--check-timeout"),
                       (("run",), "--check-timeout"), (("pool", "create"), "--check-timeout"),
                       (("pool", "lease"), "--check-timeout")):  # fmt: skip
        command: click.Command = cli
        for name in path:
            command = command.get_command(click.Context(command), name)  # type: ignore[union-attr]
        (option,) = [p for p in command.params if flag in getattr(p, "opts", ())]
        defaults[path] = (option.default, option.type.name)
    assert set(defaults.values()) == {("15m", "duration")}, defaults


def test_the_published_schema_is_a_json_schema() -> None:
    from jsonschema import Draft202012Validator

    schema = json.loads((REPO / "docs" / "orch.schema.json").read_text())
    Draft202012Validator.check_schema(schema)
    assert {"model", "job", "resources", "box", "run", "checkpoint", "recovery", "pool"} <= set(
        schema["properties"]
    )


def test_completion_scripts_and_answers() -> None:
    for shell in ("bash", "zsh", "fish"):
        out = subprocess.run(
            [sys.executable, "-m", "orchestrator", "completion", shell],
            cwd=REPO, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0 and "_ORCH_COMPLETE" in out.stdout, out.stderr
    env = {"COMP_WORDS": "orch plan --prec", "COMP_CWORD": "2", "_ORCH_COMPLETE": "bash_complete"}
    answer = subprocess.run(
        [sys.executable, "-m", "orchestrator"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, **env},
    )  # fmt: skip
    assert "plain,--precision" in answer.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "orchestrator", "completion", "tcsh"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.startswith("orch: error:")


def test_list_and_plan_load_no_more_than_they_need() -> None:
    """`orch list` loads no launch or CI-runner code; `orch plan` without a job file loads
    neither PyYAML nor jsonschema, nor the code that reads a job file (its `-f` option, in
    orchestrator.jobfile.command, is part of the command) (benchmarks/startup.py measures
    the time)."""
    job_file_readers = ("orchestrator.jobfile.load", "orchestrator.jobfile.source")
    for argv, absent in (
        (["list"], ("orchestrator.ci_runner", "orchestrator.provision.launch")),
        (["plan", "--model", "bert-large"], ("yaml", "jsonschema", *job_file_readers)),
    ):
        result = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "orchestrator", *argv],
            cwd=REPO, capture_output=True, text=True, timeout=300,
            env={**os.environ, "ORCH_HOME": str(REPO / ".no-such-home")},
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        loaded = {line.split("|")[-1].strip() for line in result.stderr.splitlines()}
        for module in absent:
            assert module not in loaded, (argv, module)
