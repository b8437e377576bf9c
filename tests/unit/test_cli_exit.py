"""How `orch` ends: exit codes, complete output, one line on a failed write, and every command
through the interpreter's teardown (atexit handlers, temporary files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from orchestrator.cli import main


def orch(*args: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess[str]:  # noqa: ANN001
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("args", [("plan", "--model", "bert-large"), ("catalog", "gpus")])
def test_every_command_ends_through_the_interpreter_teardown(args):
    # An atexit handler runs in the teardown: it shows which way the process ended.
    script = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('TEARDOWN', file=sys.stderr))\n"
        f"sys.argv = ['orch', *{list(args)!r}]\n"
        "from orchestrator.cli import entry\n"
        "entry()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "TEARDOWN" in done.stderr


@pytest.mark.parametrize("args", [("plan", "--model", "bert-large"), ("list",)])
def test_the_garbage_collector_is_back_on_once_the_command_is_loaded(args, tmp_path):
    # `entry` pauses the collector while modules load; a command (`orch run` lasts hours) must
    # run with it on, and with the start-up objects frozen out of its collections.
    script = (
        "import gc, sys\n"
        f"sys.argv = ['orch', *{list(args)!r}]\n"
        "from orchestrator import click_group\n"
        "loaded = click_group.LazyGroup.get_command\n"
        "def seen(self, ctx, name):\n"
        "    command = loaded(self, ctx, name)\n"
        "    print('COLLECTOR', gc.isenabled(), gc.get_freeze_count() > 0, file=sys.stderr)\n"
        "    return command\n"
        "click_group.LazyGroup.get_command = seen\n"
        "print('BEFORE', gc.isenabled(), file=sys.stderr)\n"
        "from orchestrator.cli import entry\n"
        "entry()\n"
    )
    env = {**os.environ, "ORCH_HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "BEFORE True" in done.stderr
    assert "COLLECTOR True True" in done.stderr.splitlines()


def test_in_process_callers_keep_their_collector_as_it_was(tmp_path, monkeypatch, capsys):
    import gc

    monkeypatch.setenv("ORCH_HOME", str(tmp_path))
    frozen = gc.get_freeze_count()
    main(["list", "--json"])
    assert json.loads(capsys.readouterr().out) == []
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    gc.disable()  # a caller's own choice: left as it is
    try:
        main(["list", "--json"])
        assert not gc.isenabled() and gc.get_freeze_count() == frozen
    finally:
        gc.enable()


@pytest.mark.parametrize("command", ["plan", "estimate"])
def test_plan_and_estimate_keep_the_whole_output_and_status(command):
    done = orch(command, "--model", "bert-large", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)  # all of it arrived: the JSON parses
    bad = orch(command, "--model", "no-such-model")
    assert bad.returncode == 2
    assert bad.stdout == "" and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args",
    [("plan", "--model", "bert-large"), ("estimate", "--model", "bert-large"), ("catalog", "gpus")],
)
def test_a_failed_write_of_the_output_is_one_line_and_status_1(args):
    with open("/dev/full", "w") as full:
        done = orch(*args, stdout=full)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["orch: error: No space left on device"]


@pytest.mark.parametrize("from_sys_argv", [False, True])
def test_main_in_process_returns_or_raises_system_exit_and_never_ends_the_process(
    capsys, monkeypatch, from_sys_argv
):
    def call(*args: str) -> None:
        monkeypatch.setattr(sys, "argv", ["orch", *args])
        main(None if from_sys_argv else list(args))

    call("plan", "--model", "bert-large", "--json")  # success: returns
    assert json.loads(capsys.readouterr().out)
    with pytest.raises(SystemExit) as exit_info:
        call("plan", "--model", "no-such-model")
    assert exit_info.value.code == 2
