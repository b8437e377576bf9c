"""`orch check CLUSTER` pieces that need no sshd: the bus-bandwidth arithmetic, what a type's
network should give, the verdict, the launch script and reading the nodes' answers."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.catalog.network import network_of
from orchestrator.check import allreduce, busbw
from orchestrator.check.transport import CommandResult, SshTransport
from orchestrator.errors import OrchError
from tests.support import run_cli

# NVIDIA/nccl issue #527 (2022-07-25): all_reduce_perf on 2 x p4d.24xlarge (16 ranks),
# 1 GiB: 35215 us, algbw 30.49 GB/s, busbw 57.17 GB/s.
NCCL_527 = {"bytes": 1073741824, "seconds": 35215e-6, "world": 16, "algbw": 30.49, "busbw": 57.17}


def probe_answer(**changes: object) -> dict[str, object]:
    answer = {"world_size": 2, "bytes": 4 << 20, "iters": 20, "seconds": 0.5, "backend": "gloo"}
    return {**answer, "correct": True, **changes}


def test_busbw_matches_nccl_tests_on_a_published_run():
    row = NCCL_527
    assert busbw.algbw_gbps(row["bytes"], row["seconds"]) == pytest.approx(row["algbw"], abs=0.01)
    assert busbw.busbw_gbps(row["bytes"], row["seconds"], row["world"]) == pytest.approx(
        row["busbw"], abs=0.01
    )


def test_bus_factor_is_two_n_minus_one_over_n():
    assert busbw.bus_factor(2) == 1.0
    assert busbw.bus_factor(16) == pytest.approx(1.875)
    assert busbw.bus_factor(1) == 0.0
    with pytest.raises(ValueError):
        busbw.bus_factor(0)


def test_measurement_is_the_slowest_rank_per_iteration():
    m = busbw.measurement_from(probe_answer(world_size=4, seconds=2.0, iters=20))
    assert m.seconds_per_op == pytest.approx(0.1)
    assert m.algbw_gbps == pytest.approx((4 << 20) / 0.1 / 1e9)
    assert m.busbw_gbps == pytest.approx(m.algbw_gbps * 1.5)


@pytest.mark.parametrize(
    "bad",
    [
        {"seconds": float("nan")},
        {"seconds": 0},
        {"seconds": -1.0},
        {"seconds": True},
        {"world_size": 1},
        {"world_size": "2"},
        {"bytes": 2},
        {"iters": 0},
        {"backend": "mpi"},
    ],
)
def test_a_probe_answer_with_an_absurd_field_is_refused(bad):
    with pytest.raises(OrchError, match="all_reduce probe"):
        busbw.measurement_from(probe_answer(**bad))


def test_two_p4d_are_held_to_the_rate_their_plan_assumed():
    p4d = network_of("aws", "p4d.24xlarge")
    expected = busbw.expected_for("p4d.24xlarge", p4d, nodes=2, world_size=16, box_busbw_gbps=225)
    # 400 Gbit/s EFA = 50 GB/s, 80 % of it as planned (sizing/nodes.py) = 40 GB/s per node;
    # x 15/16 x 2/1 for a ring over two nodes of 8 GPUs.
    assert expected.busbw_gbps == pytest.approx(75.0)
    assert expected.efa and "400 Gbit/s EFA per node" in expected.basis
    assert p4d is not None and p4d.source.url in expected.source
    many = busbw.expected_for("p4d.24xlarge", p4d, nodes=8, world_size=64, box_busbw_gbps=225)
    assert many.busbw_gbps == pytest.approx(40 * 63 / 64 * 8 / 7, abs=1e-3)


def test_tcp_is_held_to_the_plan_s_socket_ceiling():
    g6e = network_of("aws", "g6e.48xlarge")  # 400 Gbit/s, TCP: 50 % capped at 50 Gbit/s
    expected = busbw.expected_for("g6e.48xlarge", g6e, nodes=2, world_size=16)
    assert expected.busbw_gbps == pytest.approx(50 / 8 * 15 / 16 * 2, abs=1e-3)
    assert not expected.efa and "TCP" in expected.basis


def test_the_box_s_own_gpu_interconnect_bounds_the_figure():
    p5 = network_of("aws", "p5.48xlarge")  # 3200 Gbit/s EFA: 320 GB/s per node as planned
    expected = busbw.expected_for("p5.48xlarge", p5, nodes=2, world_size=16, box_busbw_gbps=340)
    assert expected.busbw_gbps == 340 and "340 GB/s between its GPUs" in expected.basis
    # One GPU per node: nothing inside the box to bound.
    one = busbw.expected_for("p5.48xlarge", p5, nodes=2, world_size=2, box_busbw_gbps=1)
    assert one.busbw_gbps == pytest.approx(320 * 1 / 2 * 2)


def test_a_burst_rate_network_gives_no_floor():
    assert network_of("aws", "g4dn.xlarge") is None  # "Up to 25 Gigabit": not in network.toml
    expected = busbw.expected_for("g4dn.xlarge", None, nodes=2, world_size=2)
    assert expected.busbw_gbps is None and "up to" in expected.basis
    m = busbw.measurement_from(probe_answer())
    assert busbw.verdict(m, expected).ok


def efa_two_p4d() -> busbw.Expectation:
    return busbw.expected_for("p4d.24xlarge", network_of("aws", "p4d.24xlarge"), 2, 16, 225)


def measured(busbw_gbps: float, network: str | None = None) -> busbw.Measurement:
    """A 16-rank, 1 GiB measurement whose busbw is the given figure."""
    seconds = (1 << 30) / (busbw_gbps / 1.875 * 1e9) * 20
    answer = probe_answer(world_size=16, bytes=1 << 30, seconds=seconds, backend="nccl")
    return busbw.measurement_from(answer, network)


def test_efa_in_use_passes():
    # 77 GB/s: SkyPilot PR #8966's 2 x p4d.24xlarge with EFA.
    result = busbw.verdict(measured(77.0), efa_two_p4d())
    assert result.ok and result.fraction == pytest.approx(77 / 75)


def test_efa_not_in_use_fails_and_says_why():
    # About 20 GB/s where 77.9 was expected: SkyPilot #8391 (2 x A100:8, NCCL on TCP).
    result = busbw.verdict(measured(20.0, network="Socket"), efa_two_p4d())
    assert not result.ok
    assert "20.00 GB/s bus bandwidth, 75.00 GB/s expected (27%" in result.line
    assert "NCCL used the 'Socket' network" in result.line
    assert "aws-ofi-nccl" in result.line and "FI_PROVIDER=efa" in result.line
    assert "\n" not in result.line


def test_a_slow_tcp_cluster_is_told_about_placement():
    g5 = network_of("aws", "g5.12xlarge")  # 40 Gbit/s, TCP
    expected = busbw.expected_for("g5.12xlarge", g5, nodes=2, world_size=8)
    result = busbw.verdict(measured(1.0), expected)
    assert not result.ok and "placement group" in result.line and "EFA" not in result.line


def test_wrong_sums_fail_whatever_the_speed():
    m = busbw.measurement_from(probe_answer(correct=False))
    assert not busbw.verdict(m, busbw.given_expectation(0.0001)).ok


def test_an_expectation_given_by_option_is_used_as_is():
    m = busbw.measurement_from(probe_answer())  # 4 MiB x 20 in 0.5 s: 0.168 GB/s busbw
    assert busbw.verdict(m, busbw.given_expectation(0.1)).ok
    assert not busbw.verdict(m, busbw.given_expectation(1.0)).ok


# ------------------------------------------------------------------------------ the launch


def launch(index: int, local: str | None = "10.0.1.5") -> allreduce.NodeLaunch:
    transport = SshTransport("203.0.113.5", "ubuntu", Path("/k"), Path("/kh"))
    return allreduce.NodeLaunch(index, transport, local)


SETTINGS = allreduce.ProbeSettings("nccl", 256 << 20, 8, 300)


def test_the_launch_script_is_valid_shell_carrying_the_probe_intact(tmp_path):
    script = allreduce.launch_script(launch(1), 2, "10.0.1.4:29500", "orch-check-ab12", SETTINGS)
    bash = shutil.which("bash")
    assert bash
    assert subprocess.run([bash, "-n", "-c", script]).returncode == 0
    assert allreduce.PROBE.read_text() in script
    assert "--rdzv-endpoint 10.0.1.4:29500" in script and "is_host=0" in script
    assert "--nnodes 2 --nproc-per-node 8" in script and "--local-addr 10.0.1.5" in script
    node0 = allreduce.launch_script(launch(0), 2, "10.0.1.4:29500", "x", SETTINGS)
    assert "is_host=1" in node0


FAKE_TORCHRUN = """#!{python}
import json, runpy, sys
args = sys.argv[1:]
at = next(i for i, a in enumerate(args) if a.endswith(".py"))
namespace = runpy.run_path(args[at])  # not as __main__: only its definitions
parsed = vars(namespace["parse_args"](args[at + 1 :]))
print("ORCH-ALLREDUCE " + json.dumps({{"launcher": args[:at], "probe": parsed}}))
"""


def test_the_launch_script_runs_the_probe_it_carries(tmp_path):
    """The script as a node runs it, with a stand-in torchrun that loads the shipped probe and
    parses its arguments: the heredoc, the quoting and the result line survive the trip."""
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "torchrun").write_text(FAKE_TORCHRUN.format(python=sys.executable))
    (bin_dir / "torchrun").chmod(0o755)
    script = allreduce.launch_script(launch(0, None), 2, "127.0.0.1:1", "id-1", SETTINGS)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "TMPDIR": str(tmp_path)}
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("ORCH-ALLREDUCE ")]
    answer = json.loads(line.split(" ", 1)[1])
    assert answer["probe"] == {
        "backend": "nccl",
        "bytes": 256 << 20,
        "iters": 20,
        "warmup": 5,
        "timeout": 300.0,
    }
    assert answer["launcher"][answer["launcher"].index("--rdzv-id") + 1] == "id-1"
    assert list(tmp_path.glob("orch-allreduce.*")) == []  # the node keeps nothing


def outcome(index: int, code: int | None, stdout: str = "", problem: str = ""):
    return allreduce.NodeOutcome(index, code, stdout, problem)


def test_the_result_is_read_from_whichever_node_had_global_rank_0():
    line = "ORCH-ALLREDUCE " + json.dumps(probe_answer())
    run = allreduce._collect([outcome(0, 0, "ORCH-NET AWS Libfabric\n"), outcome(1, 0, line)])
    assert run.measurement is not None and run.measurement.network == "AWS Libfabric"


def test_a_failed_node_is_named_and_its_text_escaped():
    hostile = allreduce._failure_line(CommandResult(1, "", "RuntimeError: \x1b[2Jgone\n"))
    assert "\x1b" not in hostile and "\\x1b" in hostile
    run = allreduce._collect([outcome(0, 0), outcome(1, 1, problem=hostile)])
    assert run.measurement is None and "node 1: exit 1: RuntimeError" in run.problem


def test_a_forged_or_missing_result_is_no_measurement():
    assert "no node printed" in allreduce._collect([outcome(0, 0), outcome(1, 0)]).problem
    forged = "ORCH-ALLREDUCE " + json.dumps(probe_answer(seconds=-1))
    assert "positive" in allreduce._collect([outcome(0, 0, forged), outcome(1, 0)]).problem
    assert (
        "not JSON" in allreduce._collect([outcome(0, 0, "ORCH-ALLREDUCE {"), outcome(1, 0)]).problem
    )


def test_probe_settings_refuse_an_unknown_backend():
    with pytest.raises(OrchError):
        allreduce.ProbeSettings("mpi", 1024, 1, 10)


# --------------------------------------------------------------------------- command line


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ORCH_SSH_CONFIG", raising=False)
    return tmp_path / "home"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code, _, err = run_cli(capsys, *argv)
    return code, err


def saved(name: str, nodes: list[dict[str, object]] | None) -> None:
    from orchestrator.provision.boxes import Box, box_directory
    from tests.support import candidate

    directory = box_directory(name)
    directory.mkdir(parents=True, mode=0o700)
    outputs: dict[str, object] = {"public_ip": "203.0.113.5", "ssh_user": "ubuntu"}
    if nodes is not None:
        outputs["nodes"] = nodes
    Box(
        name=name,
        directory=directory,
        cloud="aws",
        region="us-east-1",
        candidate=candidate("p4d.24xlarge", nodes=2 if nodes else 1),
        state="up",
        created_at="2026-12-05T08:00:00Z",
        expires_at=None,
        outputs=outputs,
        owner="me",
        state_url=None,
    ).save()


PAIR = [
    {"index": 0, "public_ip": "203.0.113.5", "private_ip": "10.0.1.4"},
    {"index": 1, "public_ip": "", "private_ip": "10.0.1.5"},
]


@pytest.mark.parametrize(
    ("argv", "nodes", "message"),
    [
        (["one", "--backend", "gloo"], None, "--backend goes with a cluster; box one has one"),
        (["pair", "--via", "ssm"], PAIR, "a cluster is checked over ssh"),
        (["pair", "--expect-busbw", "nan"], PAIR, "--expect-busbw must be a number"),
        (["pair", "--expect-busbw", "-3"], PAIR, "--expect-busbw must be a number"),
        (["pair", "--allreduce-size", "0"], PAIR, "--allreduce-size"),
    ],
)
def test_cluster_options_are_checked_before_any_node_is_reached(home, capsys, argv, nodes, message):
    saved(argv[0], nodes)
    code, err = run(capsys, "check", *argv)
    assert code == 2 and message in err


def test_local_takes_no_cluster_option(home, capsys):
    code, err = run(capsys, "check", "--local", "--expect-busbw", "10")
    assert code == 2 and "--expect-busbw goes with a cluster, not --local" in err


def test_a_damaged_node_list_is_one_line_not_a_traceback(home, capsys):
    saved("bad", [{"index": 0, "public_ip": "-oProxyCommand=x", "private_ip": "10.0.0.1"}])
    code, err = run(capsys, "check", "bad")
    assert code == 1 and "bad address" in err and "Traceback" not in err


def test_a_node_without_public_address_goes_through_node_0(home):
    from orchestrator.check.cluster import node_transports
    from orchestrator.provision.boxes import load_box

    saved("pair", PAIR)
    (_, first), (_, second) = node_transports(load_box("pair"), None)
    assert first.via is None and second.via is first and second.host == "10.0.1.5"
    argv = second.argv("true", 5, Path("/tmp/hop.log"))
    proxy = next(a for a in argv if a.startswith("ProxyCommand="))
    # The hop is node 0 with the box's own key and pinned known_hosts, then -W to the node.
    assert "IdentityFile=" in proxy and "UserKnownHostsFile=" in proxy
    assert proxy.endswith("-W '[%h]:%p' -- 203.0.113.5")
    assert argv[-2:] == ["10.0.1.5", "true"]


def test_a_single_box_addressed_by_name_is_not_read_as_a_cluster(home):
    from orchestrator.commands.check_cluster import is_cluster
    from orchestrator.provision.boxes import load_box

    saved("alias", None)
    box = load_box("alias")
    box.outputs["public_ip"] = "box-under-test"  # an ssh_config alias: fine for one box
    assert not is_cluster(box)
    saved("pair", PAIR)
    assert is_cluster(load_box("pair"))
