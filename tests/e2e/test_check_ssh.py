"""`orch check` and `orch watch` against a real OpenSSH server on loopback.

The "box" is an sshd started by the fixture; its nvidia-smi is a stub that prints real
captured outputs (tests/fixtures/nvidia-smi/, each with a SOURCE note). The box record says
public_ip = "box-under-test", which only the test's ssh_config resolves (as users reach boxes
through a bastion or alias), so these tests also prove that --ssh-config reaches ssh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.plan import Candidate
from tests.e2e import sshbox
from tests.ports import refused_port
from tests.support import candidate, require

pytestmark = pytest.mark.e2e


def make_candidate(gpu: str, count: int, memory_gib: float) -> Candidate:
    """The shared factory's row with the GPUs a check compares against."""
    return candidate(
        "test.box",
        gpu=gpu,
        gpu_count=count,
        gpu_memory_gib=memory_gib,
        price_per_hour=1.0,
        samples_per_s=1.0,
        hours=1.0,
        cost=1.0,
        memory_per_gpu_bytes=1,
        memory_fraction=0.5,
        image={"id": "ami-12345678"},
        root_volume_gib=100,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require(sshbox.prerequisites() is None, sshbox.prerequisites() or "")
    box = sshbox.make_sshbox(tmp_path_factory.mktemp("sshd"))
    yield box
    box.stop()


@pytest.fixture
def orch_home(tmp_path, monkeypatch):
    home = tmp_path / "orch-home"
    monkeypatch.setenv("ORCH_HOME", str(home))
    monkeypatch.delenv("ORCH_SSH_CONFIG", raising=False)
    return home


def save_box(server: sshbox.SshBox, name: str, candidate: Candidate, host: str | None = None):
    """A box record pointing at the test sshd, with the sshd's key as the box key."""
    from orchestrator.provision.boxes import Box, box_directory

    directory = box_directory(name)
    directory.mkdir(parents=True, mode=0o700)
    box = Box(
        name=name,
        directory=directory,
        cloud="aws",
        region="us-east-1",
        candidate=candidate,
        state="up",
        created_at="2026-01-01T00:00:00Z",
        expires_at=None,
        outputs={"public_ip": host or server.host, "ssh_user": server.user, "instance_id": "i-1"},
        owner="test",
        state_url=None,
    )
    box.save()
    box.key_path.write_bytes(server.key_path.read_bytes())
    box.key_path.chmod(0o600)
    return box


# --timeout of a check the box answers: a bound on a hang only, the check ends at the answer.
# With 20 s, one slow SSH round trip on a loaded machine (8 s seen with 16 CPU burners on
# 2 cores) was all that stood between a passing check and "no usable answer".
ANSWERED = "90"


def orch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
    )


# ----------------------------------------------------------------------------- pass cases


@pytest.mark.parametrize(
    ("fixture", "gpu", "count", "memory_gib"),
    [
        ("t4", "T4", 1, 16),
        ("v100", "V100-16GB", 1, 16),
        ("a10g", "A10G", 1, 24),
        ("a100-40gb", "A100-40GB", 2, 40),
        ("a100-80gb-mig", "A100-80GB", 1, 80),
        ("h100", "H100-80GB", 1, 80),
        ("l4", "L4", 1, 24),
    ],
)
def test_check_passes_when_box_matches_plan(server, orch_home, fixture, gpu, count, memory_gib):
    server.serve(fixture)
    save_box(server, "match", make_candidate(gpu, count, memory_gib))
    result = orch(
        "check", "match", "--json", "--timeout", ANSWERED, "--ssh-config", str(server.ssh_config)
    )
    assert result.returncode == 0, result.stderr + result.stdout
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert len(report["gpus"]) == count
    assert {g["catalog_name"] for g in report["gpus"]} == {gpu}
    assert {c["name"] for c in report["checks"]} >= {
        "driver",
        "gpu_count",
        "gpu_model",
        "gpu_memory",
        "ecc",
    }
    # The remote command really was our nvidia-smi query.
    assert any("--query-gpu=index,name,memory.total" in call for call in server.calls())


def test_check_pins_host_key_on_first_contact(server, orch_home):
    server.serve("t4")
    box = save_box(server, "pin", make_candidate("T4", 1, 16))
    assert not box.known_hosts_path.exists()
    result = orch("check", "pin", "--timeout", ANSWERED, "--ssh-config", str(server.ssh_config))
    assert result.returncode == 0, result.stderr
    pinned = box.known_hosts_path.read_text()
    host_key = (server.root / "ssh_host_ed25519_key.pub").read_text().split()[1]
    assert host_key in pinned
    assert "OK" in result.stdout and "Tesla T4" in result.stdout


def test_check_honours_orch_ssh_config_env(server, orch_home, monkeypatch):
    server.serve("a10g")
    save_box(server, "envcfg", make_candidate("A10G", 1, 24))
    monkeypatch.setenv("ORCH_SSH_CONFIG", str(server.ssh_config))
    assert orch("check", "envcfg", "--timeout", ANSWERED).returncode == 0


# -------------------------------------------------------------------------- mismatch cases


def check_json(server, name, candidate, timeout=ANSWERED):
    save_box(server, name, candidate)
    result = orch(
        "check", name, "--json", "--timeout", timeout, "--ssh-config", str(server.ssh_config)
    )
    return result, json.loads(result.stdout)


def failed(report) -> dict[str, str]:
    return {c["name"]: c["message"] for c in report["checks"] if not c["ok"]}


def test_wrong_model_is_a_mismatch(server, orch_home):
    server.serve("t4")
    result, report = check_json(server, "wrongmodel", make_candidate("A10G", 1, 24))
    assert result.returncode == 3
    assert set(failed(report)) == {"gpu_model", "gpu_memory"}
    assert "Tesla T4" in failed(report)["gpu_model"]


def test_missing_gpu_is_a_mismatch(server, orch_home):
    server.serve("a100-40gb")  # two GPUs where the plan has eight (p4d.24xlarge)
    result, report = check_json(server, "missing", make_candidate("A100-40GB", 8, 40))
    assert result.returncode == 3
    assert set(failed(report)) == {"gpu_count"}
    assert "2 GPUs found, 8 expected" in failed(report)["gpu_count"]


def test_uncorrected_ecc_errors_fail(server, orch_home):
    server.serve("a10g-ecc-errors")
    result, report = check_json(server, "ecc", make_candidate("A10G", 1, 24))
    assert result.returncode == 3
    assert set(failed(report)) == {"ecc"}
    assert "GPU 0: 2" in failed(report)["ecc"]


def test_absent_driver_fails_without_waiting(server, orch_home):
    server.serve("t4")
    server.remove_driver()
    started = time.monotonic()
    result, report = check_json(server, "nodriver", make_candidate("T4", 1, 16), timeout="60")
    assert result.returncode == 3
    assert "nvidia-smi not found" in failed(report)["driver"]
    assert time.monotonic() - started < 30  # answered, so no retry loop until the timeout
    server.serve("t4")  # put the stub back for later tests


def test_driver_that_cannot_talk_to_the_gpu_fails(server, orch_home):
    server.fail(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    result, report = check_json(server, "brokendriver", make_candidate("T4", 1, 16))
    assert result.returncode == 3
    assert "exit 9" in failed(report)["driver"]
    assert "couldn't communicate" in failed(report)["driver"]


# ------------------------------------------------------------------------ reachability


def test_box_that_never_answers_times_out(tmp_path, orch_home):
    require(sshbox.prerequisites() is None, sshbox.prerequisites() or "")
    with refused_port() as port:  # nothing listens, nor can anything else meanwhile
        closed = sshbox.make_sshbox(tmp_path / "never", start=False, port=port)
        save_box(closed, "never", make_candidate("T4", 1, 16))
        started = time.monotonic()
        result = orch("check", "never", "--timeout", "3", "--ssh-config", str(closed.ssh_config))
        elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("orch: error: no usable answer")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Connection refused" in result.stderr
    assert 3 <= elapsed < 30


def test_box_that_comes_up_late_is_retried(tmp_path, orch_home):
    require(sshbox.prerequisites() is None, sshbox.prerequisites() or "")
    late = sshbox.make_sshbox(tmp_path / "late", start=False)
    late.serve("h100")
    save_box(late, "late", make_candidate("H100-80GB", 1, 80))
    timer = threading.Timer(2.5, late.start)
    timer.start()
    try:
        result = orch(
            "check", "late", "--json", "--timeout", "40", "--ssh-config", str(late.ssh_config)
        )
    finally:
        timer.join()
        late.stop()
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["attempts"] >= 2


def test_changed_host_key_is_refused(tmp_path, orch_home):
    require(sshbox.prerequisites() is None, sshbox.prerequisites() or "")
    box_server = sshbox.make_sshbox(tmp_path / "rekey")
    try:
        box_server.serve("t4")
        save_box(box_server, "rekey", make_candidate("T4", 1, 16))
        config = str(box_server.ssh_config)
        assert orch("check", "rekey", "--timeout", ANSWERED, "--ssh-config", config).returncode == 0
        box_server.stop()
        box_server.start(new_host_key=True)  # same address, different host key
        started = time.monotonic()
        result = orch("check", "rekey", "--timeout", "60", "--ssh-config", config)
        assert result.returncode == 1
        assert "host key" in result.stderr and "does not match" in result.stderr
        assert time.monotonic() - started < 30  # refused at once, not retried until timeout
    finally:
        box_server.stop()


# --------------------------------------------------------------------------------- watch


def write_sequence(path: Path, frames: list[list[tuple[int, int]]], total: int = 23028) -> Path:
    """Readings per frame as (utilisation %, MiB used) for GPU 0..n; total from the A10G capture."""
    lines = ["frame,index,utilization.gpu,memory.used,memory.total"]
    for frame, gpus in enumerate(frames):
        for index, (util, used) in enumerate(gpus):
            lines.append(f"{frame},{index},{util},{used},{total}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_watch_warns_on_sustained_low_utilisation(server, orch_home, tmp_path):
    # Busy for two samples, then idle (under 30 %) for four: with a window of three samples
    # (3 s at 1 s intervals) the warning comes once, at the third idle sample.
    frames = [[(95, 20000)], [(90, 20000)], [(12, 3000)], [(8, 3000)], [(5, 3000)], [(3, 3000)]]
    server.serve_sequence(write_sequence(tmp_path / "seq.csv", frames))
    save_box(server, "idle", make_candidate("A10G", 1, 24))
    result = orch(
        "watch",
        "idle",
        "--json",
        "--interval",
        "0.1",
        "--count",
        "6",
        "--window",
        "0.3",
        "--ssh-config",
        str(server.ssh_config),
    )
    assert result.returncode == 0, result.stderr
    samples = [json.loads(line) for line in result.stdout.splitlines()]
    assert [s["gpus"][0]["utilization_pct"] for s in samples] == [95, 90, 12, 8, 5, 3]
    warned = [i for i, s in enumerate(samples) if s["warnings"]]
    assert warned == [4]
    assert "utilisation under 30%" in samples[4]["warnings"][0]


def test_watch_warns_when_memory_nearly_full(server, orch_home, tmp_path):
    frames = [[(97, 20000)], [(98, 22100)], [(99, 22500)], [(99, 15000)], [(99, 22600)]]
    server.serve_sequence(write_sequence(tmp_path / "mem.csv", frames))
    save_box(server, "full", make_candidate("A10G", 1, 24))
    result = orch(
        "watch", "full", "--interval", "0.1", "--count", "5", "--ssh-config", str(server.ssh_config)
    )
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stdout.splitlines() if "warning:" in line]
    # 22100/23028 = 96 % (warn), 22500 stays full (no repeat), 15000 clears, 22600 warns again.
    assert len(warnings) == 2
    assert all("memory" in w and "full" in w for w in warnings)
    assert "util  97%" in result.stdout


def test_watch_reports_missing_driver(server, orch_home):
    server.serve("t4")
    server.remove_driver()
    save_box(server, "watchnodriver", make_candidate("T4", 1, 16))
    result = orch("watch", "watchnodriver", "--count", "1", "--ssh-config", str(server.ssh_config))
    server.serve("t4")
    assert result.returncode == 3
    assert "nvidia-smi not found" in result.stderr
