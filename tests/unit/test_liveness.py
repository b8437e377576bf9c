"""Who is working on a box: live orch, dead orch, reused pid, another host (issue 9 item 7)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.provision import liveness
from tests.support import run_cli
from tests.unit.test_box_commands import saved_box


@pytest.fixture
def orch_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_process_start_of_this_and_of_a_dead_process():
    assert liveness.process_start(os.getpid()) is not None
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert liveness.process_start(child.pid) is None


def test_activity_tells_live_dead_reused_and_remote_runners():
    runner = liveness.this_process("up")
    assert liveness.is_alive(runner) is True
    working = f"creating: orch pid {os.getpid()} is working on it"
    assert liveness.activity("b1", "creating", runner) == working
    runner["terraform_pid"], runner["terraform"] = os.getpid(), "apply"
    runner["terraform_started"] = liveness.process_start(os.getpid())
    assert liveness.activity("b1", "creating", runner) == (
        f"creating: terraform apply running, pid {os.getpid()}"
    )
    # Same pid, another start time: the pid was reused by another process; orch is gone.
    reused = {**runner, "started": (runner["started"] or 0) + 1, "terraform_pid": None}
    assert liveness.is_alive(reused) is False
    assert liveness.activity("b1", "creating", reused) == (
        "creating, but the orch that ran it is gone: run `orch down b1`"
    )
    remote = {**runner, "host": socket.gethostname() + "-elsewhere"}
    assert liveness.is_alive(remote) is None
    assert "on " + remote["host"] in (liveness.activity("b1", "destroying", remote) or "")
    assert liveness.activity("b1", "up", runner) is None  # at rest


@pytest.mark.usefixtures("orch_home")
def test_status_and_list_show_an_abandoned_box(capsys):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    saved_box("gone1", state="creating", runner={**liveness.this_process("up"), "pid": child.pid})
    code, out, err = run_cli(capsys, "status", "gone1")
    assert code == 0, err
    assert "creating, but the orch that ran it is gone: run `orch down gone1`" in out
    code, out, _ = run_cli(capsys, "list")
    assert code == 0 and "creating (orch gone)" in out
    code, out, _ = run_cli(capsys, "status", "gone1", "--json")
    assert code == 0 and "is gone" in json.loads(out)["activity"]
