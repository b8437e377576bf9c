"""`orch check CLUSTER` against two real OpenSSH servers on loopback, one per "node".

Each node is an sshd (tests/e2e/sshbox.py) with the fake nvidia-smi on its PATH and this
venv's torch: the GPU check runs on both, then the real probe runs under real torchrun (c10d
rendezvous at node 0's private address, gloo on CPUs) across the two. Node 0 has a public
address; node 1 has none and is reached through node 0 (ssh ProxyCommand through rank 0, as
a cluster whose nodes carry several EFA cards is). The box record is built here, as
`orch up` writes a cluster's (provision/cluster.py: outputs["nodes"], rank 0 first).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e import sshbox
from tests.support import candidate, require

pytestmark = pytest.mark.e2e

NODE0_PUBLIC = "198.51.100.10"  # TEST-NET-2: only the test's ssh_config knows where it is
NODE1_PRIVATE = "127.0.0.2"  # loopback, so torchrun can bind it; ssh routes it to node 1


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    require(sshbox.prerequisites() is None, sshbox.prerequisites() or "")
    require(Path(sys.executable).with_name("torchrun").exists(), "torchrun in the venv")
    root = tmp_path_factory.mktemp("cluster")
    servers = [sshbox.make_sshbox(root / f"node{i}") for i in range(2)]
    key = servers[0].key_path  # one cluster, one key: node 1 accepts node 0's
    (servers[1].key_path).write_bytes(key.read_bytes())
    (servers[1].key_path.with_suffix(".pub")).write_bytes(key.with_suffix(".pub").read_bytes())
    for i, server in enumerate(servers):
        sshbox.set_box_environment(server, home_of(server, i))
    config = root / "ssh_config"
    config.write_text(
        f"Host {NODE0_PUBLIC}\n  HostName 127.0.0.1\n  Port {servers[0].port}\n"
        f"Host {NODE1_PRIVATE}\n  HostName 127.0.0.1\n  Port {servers[1].port}\n"
    )
    yield servers, config
    for server in servers:
        server.stop()


def home_of(server: sshbox.SshBox, index: int) -> Path:
    """The node's HOME (its "disk"), beside its sshd's folder."""
    return server.root.parent / f"home{index}"


@pytest.fixture
def orch_home(tmp_path, monkeypatch):
    home = tmp_path / "orch-home"
    monkeypatch.setenv("ORCH_HOME", str(home))
    monkeypatch.delenv("ORCH_SSH_CONFIG", raising=False)
    return home


def save_cluster(servers, name: str):
    from orchestrator.provision.boxes import Box, box_directory

    directory = box_directory(name)
    directory.mkdir(parents=True, mode=0o700)
    node_list = [
        {"index": 0, "instance_id": "i-0", "public_ip": NODE0_PUBLIC, "private_ip": "127.0.0.1"},
        {"index": 1, "instance_id": "i-1", "public_ip": "", "private_ip": NODE1_PRIVATE},
    ]
    box = Box(
        name=name,
        directory=directory,
        cloud="aws",
        region="us-east-1",
        candidate=candidate("g4dn.xlarge", ssh_user=servers[0].user, nodes=2),
        state="up",
        created_at="2026-01-01T00:00:00Z",
        expires_at=None,
        outputs={
            "public_ip": NODE0_PUBLIC,
            "private_ip": "127.0.0.1",
            "instance_id": "i-0",
            "ssh_user": servers[0].user,
            "nodes": node_list,
        },
        owner="test",
        state_url=None,
    )
    box.save()
    box.key_path.write_bytes(servers[0].key_path.read_bytes())
    box.key_path.chmod(0o600)
    return box


def check(name: str, config: Path, *more: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "orchestrator", "check", name, "--ssh-config", str(config)]
    argv += ["--timeout", "60", "--backend", "gloo", "--allreduce-size", "4", *more]
    return subprocess.run(argv, capture_output=True, text=True, timeout=400, env=os.environ.copy())


def test_cluster_passes_against_a_low_expectation(nodes, orch_home):
    servers, config = nodes
    for server in servers:
        server.serve("t4")
    box = save_cluster(servers, "pair")
    result = check("pair", config, "--expect-busbw", "0.0001", "--json")
    assert result.returncode == 0, result.stderr + result.stdout
    report = json.loads(result.stdout)
    assert [n["ok"] for n in report["nodes"]] == [True, True]
    assert "via 198.51.100.10" in report["nodes"][1]["transport"]
    measurement = report["allreduce"]["run"]["measurement"]
    assert measurement["world_size"] == 2 and measurement["correct"] is True
    assert measurement["size_bytes"] == 4 * 2**20 and measurement["backend"] == "gloo"
    # busbw = algbw x 2(n-1)/n, with n = 2: the two are equal.
    assert measurement["busbw_gbps"] == pytest.approx(measurement["algbw_gbps"], rel=1e-3)
    assert report["allreduce"]["verdict"]["ok"] is True
    # Both nodes were really asked (their own nvidia-smi), and both host keys are pinned.
    assert all(any("--query-gpu" in call for call in s.calls()) for s in servers)
    pinned = box.known_hosts_path.read_text()  # ssh names them by HostName and Port
    assert all(f"[127.0.0.1]:{s.port} " in pinned for s in servers)


def test_cluster_far_below_its_expectation_fails_with_one_line(nodes, orch_home):
    servers, config = nodes
    for server in servers:
        server.serve("t4")
    save_cluster(servers, "slow")
    result = check("slow", config, "--expect-busbw", "1000000")
    assert result.returncode == 3, result.stderr + result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("orch: error:")]
    assert len(errors) == 1, result.stderr
    assert "1000000.00 GB/s expected" in errors[0] and "below 50%" in errors[0]
    assert "[FAIL] all_reduce" in result.stdout


def test_a_node_whose_gpus_do_not_match_is_named(nodes, orch_home):
    servers, config = nodes
    servers[0].serve("t4")
    servers[1].serve("a10g")  # the plan says T4
    save_cluster(servers, "mixed")
    result = check("mixed", config, "--expect-busbw", "0.0001", "--json")
    assert result.returncode == 3, result.stderr + result.stdout
    report = json.loads(result.stdout)
    assert [n["ok"] for n in report["nodes"]] == [True, False]
    failed = {c["name"] for c in report["nodes"][1]["report"]["checks"] if not c["ok"]}
    assert "gpu_model" in failed
    assert report["allreduce"]["skipped"] == "node 1 failed the GPU check"


def test_a_node_without_torch_is_named_before_any_launch(nodes, orch_home, tmp_path):
    servers, config = nodes
    for server in servers:
        server.serve("t4")
    home = home_of(servers[1], 1)
    # Node 1's PATH without this venv: no torchrun, and the system python3 has no torch.
    path = f"{servers[1].bin_dir}:/usr/local/bin:/usr/bin:/bin"
    sshbox.set_box_environment(servers[1], home, {"PATH": path})
    try:
        save_cluster(servers, "notorch")
        result = check("notorch", config, "--expect-busbw", "0.0001")
    finally:
        sshbox.set_box_environment(servers[1], home)
    assert result.returncode == 1, result.stderr + result.stdout
    assert "node 1: torchrun not found and python3 cannot import torch" in result.stderr
    assert "node 0:" not in result.stderr  # node 0 has torch


def test_a_node_that_never_answers_is_named_and_the_exit_is_1(nodes, orch_home):
    servers, config = nodes
    servers[0].serve("t4")
    save_cluster(servers, "half")
    servers[1].stop()
    try:
        argv = [sys.executable, "-m", "orchestrator", "check", "half", "--ssh-config"]
        argv += [str(config), "--timeout", "3", "--backend", "gloo", "--json"]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    finally:
        servers[1].start()
    assert result.returncode == 1, result.stderr + result.stdout
    report = json.loads(result.stdout)
    assert [n["ok"] for n in report["nodes"]] == [True, False]
    assert "no usable answer" in report["nodes"][1]["unreachable"]
    assert report["allreduce"]["skipped"] == "node 1 failed the GPU check"


def test_up_s_check_of_a_cluster_names_the_node_that_does_not_match(nodes, orch_home):
    """The check `orch up` runs once a cluster is up (commands/boxes.py `_check`) asks every
    node, not rank 0 alone: node 1's wrong GPU fails it with exit 3."""
    from orchestrator.commands.boxes import _check
    from orchestrator.errors import OrchError

    servers, config = nodes
    servers[0].serve("t4")
    servers[1].serve("a10g")
    box = save_cluster(servers, "upmixed")
    with pytest.raises(OrchError) as failed:
        _check(box, True, "ssh", 30, str(config))
    assert failed.value.exit_code == 3
    assert "cluster upmixed is up but not every node matches its plan: node 1:" in str(failed.value)
    servers[1].serve("t4")
    _check(box, True, "ssh", 30, str(config))  # both match: no error
