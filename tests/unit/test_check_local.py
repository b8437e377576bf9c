"""`orch check --local` and the check's usage errors: no sshd, no emulator.

These were in tests/e2e/ (test_check_ssh.py, test_check_agents.py); they need only a fake
`nvidia-smi` on PATH and a box record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.provision.boxes import Box, box_directory
from tests.e2e import sshbox
from tests.support import candidate


@pytest.fixture
def orch_home(tmp_path, monkeypatch):
    home = tmp_path / "orch-home"
    monkeypatch.setenv("ORCH_HOME", str(home))
    monkeypatch.delenv("ORCH_SSH_CONFIG", raising=False)
    return home


def orch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
    )


def test_local_check_uses_nvidia_smi_on_path(tmp_path, monkeypatch):
    state = tmp_path / "state"
    state.mkdir()
    sshbox.write_fake_nvidia_smi(tmp_path / "bin")
    (state / "fixture").write_text(str(sshbox.FIXTURES / "a10g.csv"))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_STATE", str(state))
    result = orch("check", "--local", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["gpus"][0]["name"] == "NVIDIA A10G"


def test_local_check_without_driver_is_one_clear_line(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", f"{empty}:/usr/bin:/bin")
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", "check", "--local"],
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    assert result.returncode == 3
    assert result.stderr.strip().splitlines() == [
        "orch: error: nvidia-smi not found on this machine: no NVIDIA driver installed"
    ]


def test_check_needs_a_name_or_local(orch_home):
    result = orch("check")
    assert result.returncode == 2
    assert "orch: error:" in result.stderr


def test_via_must_match_the_cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    box = Box("awsbox", box_directory("awsbox"), "aws", "us-east-1", candidate("g4dn.xlarge"),
              "up", "2026-01-01T00:00:00Z", None, {"instance_id": "i-1"}, "test", None)  # fmt: skip
    box.save()
    result = orch("check", "awsbox", "--via", "cloud-assistant")
    assert result.returncode == 2
    assert "only for Aliyun boxes" in result.stderr
