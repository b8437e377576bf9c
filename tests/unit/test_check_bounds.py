"""Pieces of the check's transport and verdicts, run on this machine (no sshd needed)."""

from __future__ import annotations

import os
import time

import pytest

from orchestrator.check import drivers, nvidia_smi, transport
from orchestrator.check.verify import Expected, evaluate
from orchestrator.errors import UsageError


def test_bounded_run_stops_reading_at_one_mebibyte():
    started = time.monotonic()
    with pytest.raises(transport.OutputTooLarge, match="more than 1024 KiB"):
        transport.run_bounded(["/bin/sh", "-c", "yes junk"], 30, "yes")  # endless output
    assert time.monotonic() - started < 10


def test_bounded_run_kills_the_whole_group_on_timeout(tmp_path):
    pid_file = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {pid_file}; wait"
    with pytest.raises(transport.Unreachable, match="did not finish within 1s"):
        transport.run_bounded(["/bin/sh", "-c", script], 1, "sleeper")
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 60  # a bound on a hang: the loop ends once it is gone
    while time.monotonic() < deadline and os.path.exists(f"/proc/{child}"):
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{child}")


def test_bounded_run_replaces_bytes_that_are_not_utf8():
    result = transport.run_bounded(["/bin/sh", "-c", r"printf 'A\377B'"], 10, "printf")
    assert result.stdout == "A\ufffdB"


def test_remote_exit_marker_is_found_and_removed():
    script = transport.wrap_remote("exit 255", "abc123")
    assert script.startswith("( exit 255\n); printf")
    code, stderr = transport.unwrap_remote("boom\n\nORCH-REMOTE-EXIT-abc123 255\n", "abc123")
    assert (code, stderr) == (255, "boom\n")
    # Another nonce (a box replaying an old marker) or none at all: no remote status.
    assert transport.unwrap_remote("ORCH-REMOTE-EXIT-other 0\n", "abc123")[0] is None
    assert transport.unwrap_remote("Connection refused\n", "abc123") == (
        None,
        "Connection refused\n",
    )


@pytest.mark.parametrize(
    "host", ["-oProxyCommand=id", "a b", "box\n", "", "x" * 300, "h;id", "%h", "[::1]"]
)
def test_bad_hosts_are_refused(host):
    with pytest.raises(UsageError):
        transport.validate_host(host)


@pytest.mark.parametrize("host", ["203.0.113.10", "ec2-1-2-3-4.compute.amazonaws.com", "::1"])
def test_good_hosts_pass(host):
    assert transport.validate_host(host) == host


@pytest.mark.parametrize("user", ["-oProxyCommand=id", "root;id", "a b", "", "u\n"])
def test_bad_users_are_refused(user):
    with pytest.raises(UsageError):
        transport.validate_user(user)


def test_driver_requirements_follow_gpu_and_cuda():
    assert drivers.parse_version("570.133.20") == (570, 133, 20)
    assert drivers.parse_version("570.x") is None and drivers.parse_version("1e400") is None
    a10g = drivers.requirements("A10G", "Ampere", None)
    assert [n.version for n in a10g] == [(455, 23)]
    v100 = drivers.requirements("V100-16GB", "Volta", "12.4")
    assert [n.version for n in v100] == [(384, 81), (525, 60, 13)]
    assert drivers.requirements(None, None, None) == []


def inventory(*rows: str) -> list[nvidia_smi.GpuInventory]:
    return nvidia_smi.parse_inventory("\n".join(rows) + "\n")


def test_duplicate_uuid_under_two_indices_is_caught():
    rows = inventory(
        "0, NVIDIA A10G, 23028, 580.95.05, 0, 00000000:00:1E.0, GPU-1",
        "1, NVIDIA A10G, 23028, 580.95.05, 0, 00000000:00:1F.0, GPU-1",
    )
    checks = {c.name: c for c in evaluate(rows, Expected("A10G", 2, 24))}
    assert not checks["gpu_ids"].ok and "UUID GPU-1" in checks["gpu_ids"].message


def test_mixed_driver_versions_fail():
    rows = inventory(
        "0, NVIDIA A10G, 23028, 580.95.05, 0, 00000000:00:1E.0, GPU-1",
        "1, NVIDIA A10G, 23028, 390.157, 0, 00000000:00:1F.0, GPU-2",
    )
    checks = {c.name: c for c in evaluate(rows, Expected("A10G", 2, 24))}
    assert not checks["driver"].ok and "different drivers" in checks["driver"].message


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e400", "9" * 400])
def test_non_finite_numbers_are_parse_errors(value):
    with pytest.raises(nvidia_smi.NvidiaSmiParseError):
        nvidia_smi.parse_usage(f"0, {value}, 10, 100\n")
