"""The launcher's argv and environment for each node (run/launcher.py, run/on_cluster.py), and
how a node without a public address is reached through rank 0 (run/nodes.py)."""

from __future__ import annotations

import shlex
import socket
from pathlib import Path

import pytest

from orchestrator.check.ports import parse_ports
from orchestrator.check.transport import CommandResult
from orchestrator.errors import UsageError
from orchestrator.provision.cluster import ClusterNode
from orchestrator.run import remote
from orchestrator.run.launcher import Topology, node_command, node_env, resolve_launcher
from orchestrator.run.on_cluster import node_specs, rendezvous_ports
from orchestrator.run.spec import RunSpec, parse_env
from tests.support import require_module

RUN_ID = "r-20261205-080000-abcdef"
TWO = Topology(node_ips=("10.0.1.4", "10.0.1.5"), gpus_per_node=8, run_id=RUN_ID)


def option(argv: list[str], name: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")]
    return value


def test_auto_is_torchrun_with_more_than_one_gpu_or_node():
    assert resolve_launcher("auto", 1, 1) == "none"
    assert resolve_launcher("auto", 1, 8) == "torchrun"  # one 8-GPU box is used as 8 GPUs
    assert resolve_launcher("auto", 2, 1) == "torchrun"
    assert resolve_launcher("none", 4, 8) == "none"
    with pytest.raises(UsageError):
        resolve_launcher("deepspeed", 1, 1)


def test_torchrun_argv_per_rank_with_the_python_the_user_named():
    argv0 = node_command(["/opt/venv/bin/python", "train.py", "--lr", "1e-4"], TWO, 0, "torchrun")
    argv1 = node_command(["python3", "-m", "pkg.train"], TWO, 1, "torchrun")
    assert argv0[:3] == ["/opt/venv/bin/python", "-m", "torch.distributed.run"]
    assert argv0[-3:] == ["train.py", "--lr", "1e-4"]
    assert argv1[-2:] == ["-m", "pkg.train"]
    for rank, argv in enumerate((argv0, argv1)):
        assert option(argv, "nnodes") == "2" and option(argv, "nproc-per-node") == "8"
        assert option(argv, "node-rank") == str(rank)
        # static: node I's workers are global ranks I*GPUS.. (c10d would ignore --node-rank)
        assert option(argv, "rdzv-backend") == "static" and option(argv, "rdzv-id") == RUN_ID
        assert option(argv, "rdzv-endpoint") == f"10.0.1.4:{TWO.rdzv_port}"
        assert option(argv, "local-addr") == TWO.node_ips[rank]
        assert option(argv, "max-restarts") == "0"
    # Rank 0 hosts the rendezvous store (static: by its node rank); every node waits at most
    # the timeout for the others to join.
    assert option(argv0, "rdzv-conf") == option(argv1, "rdzv-conf") == "timeout=600"
    assert 29400 <= TWO.rdzv_port < 29500 <= TWO.master_port < 29600


def test_interpreter_options_reach_every_worker_as_written():
    """`python -u train.py`: torchrun's parser knows no -u ("unrecognized arguments: -u"), so
    a command with the interpreter's own options runs under `--no-python` as written, still
    launched by the interpreter the user named."""
    for command in (
        ["python", "-u", "train.py", "--lr", "1e-4"],
        ["/opt/venv/bin/python3", "-X", "faulthandler", "-W", "ignore", "-m", "pkg.train"],
        ["python3", "-OO", "-c", "import train"],
    ):
        argv = node_command(command, TWO, 1, "torchrun")
        assert argv[:3] == [command[0], "-m", "torch.distributed.run"]
        assert argv[-len(command) - 1 :] == ["--no-python", *command]
        assert option(argv, "node-rank") == "1"
    with pytest.raises(UsageError, match="--launcher none"):
        node_command(["python", "-u", "-m", "torch.distributed.run", "t.py"], TWO, 0, "torchrun")


def test_torchrun_s_own_parser_takes_the_argv():
    run = require_module("torch.distributed.run", "torch (pip install -e '.[trace]')")
    parse = run.get_args_parser().parse_args
    args = parse(node_command(["python", "-u", "train.py", "-v"], TWO, 0, "torchrun")[3:])
    assert (args.no_python, args.training_script, args.training_script_args) == (
        True,
        "python",
        ["-u", "train.py", "-v"],
    )
    args = parse(node_command(["python", "-m", "pkg", "-u"], TWO, 0, "torchrun")[3:])
    assert (args.module, args.training_script, args.training_script_args) == (True, "pkg", ["-u"])


def test_a_command_that_is_not_python_runs_under_torchrun_no_python():
    argv = node_command(["./train.sh", "a b"], TWO, 1, "torchrun")
    assert argv[0] == "torchrun" and argv[-3:] == ["--no-python", "./train.sh", "a b"]
    with pytest.raises(UsageError, match="--launcher none"):
        node_command(["torchrun", "--nnodes=2", "t.py"], TWO, 0, "torchrun")
    with pytest.raises(UsageError):
        node_command(["python"], TWO, 0, "torchrun")
    with pytest.raises(UsageError):
        node_command(["python", "t.py"], TWO, 2, "torchrun")  # no rank 2 in a 2-node cluster


def test_none_exports_the_cluster_for_the_user_s_launcher():
    assert node_command(["deepspeed", "t.py"], TWO, 1, "none") == ["deepspeed", "t.py"]
    assert node_env(TWO, 1, "none") == {
        "ORCH_NODE_RANK": "1",
        "ORCH_NUM_NODES": "2",
        "ORCH_NODE_IPS": "10.0.1.4,10.0.1.5",
        "ORCH_GPUS_PER_NODE": "8",
        "MASTER_ADDR": "10.0.1.4",
        "MASTER_PORT": str(TWO.master_port),
    }
    # Under torchrun, torchrun sets MASTER_* for its workers.
    assert "MASTER_ADDR" not in node_env(TWO, 0, "torchrun")


def test_node_specs_quote_user_strings_and_refuse_clashing_env(tmp_path: Path):
    hostile = "x'; touch /tmp/pwned; echo '$(id)"
    spec = RunSpec(command=["python", "t.py", hostile], workdir=tmp_path, run_id=RUN_ID,
                   env={"TOKEN": "a b"})  # fmt: skip
    first, second = node_specs(spec, TWO, "torchrun")
    # The command reaches the box's shell as quoted words: one argv entry per word.
    words = shlex.split(first.command_line)
    assert words[-1] == hostile and words[:3] == ["python", "-m", "torch.distributed.run"]
    assert second.env == {"TOKEN": "a b", **node_env(TWO, 1, "torchrun")}
    script = remote.launch_script(second, remote.LaunchEnv(1, "aws"))
    assert "ORCH_NODE_RANK" not in script  # values travel in the env file, base64-encoded
    with pytest.raises(UsageError, match="MASTER_PORT"):
        node_specs(RunSpec(["python", "t.py"], tmp_path, env={"MASTER_PORT": "1"}), TWO, "none")
    with pytest.raises(UsageError, match="ORCH_NODE_RANK"):
        parse_env(["ORCH_NODE_RANK=3"])


def test_a_single_box_keeps_its_own_master_and_meets_on_the_loopback(tmp_path: Path):
    one = Topology(node_ips=("127.0.0.1",), gpus_per_node=8, run_id=RUN_ID)
    spec = RunSpec(["python", "t.py"], tmp_path, env={"MASTER_PORT": "1234"}, run_id=RUN_ID)
    (none,) = node_specs(spec, one, "none")
    assert none.command == ["python", "t.py"] and none.env["MASTER_PORT"] == "1234"
    (torchrun,) = node_specs(spec, one, "torchrun")
    assert option(torchrun.command, "nproc-per-node") == "8"
    assert option(torchrun.command, "rdzv-endpoint").startswith("127.0.0.1:")


def test_ports_node_0_named_replace_the_ones_derived_from_the_run_id():
    named = Topology(node_ips=TWO.node_ips, gpus_per_node=8, run_id=RUN_ID, ports=(41234, 41235))
    for rank in (0, 1):
        argv = node_command(["python", "t.py"], named, rank, "torchrun")
        assert option(argv, "rdzv-endpoint") == "10.0.1.4:41234"
        assert node_env(named, rank, "none")["MASTER_PORT"] == "41235"
    for bad in ((41234, 41234), (80, 41235), (41234, 70000)):
        with pytest.raises(UsageError, match="rendezvous ports"):
            Topology(node_ips=TWO.node_ips, gpus_per_node=8, run_id=RUN_ID, ports=bad)


class _Answer:
    """A node's transport that answers every script with one fixed result."""

    def __init__(self, code: int, stdout: str):
        self.code, self.stdout, self.scripts = code, stdout, []

    def run(self, script: str, timeout: float) -> CommandResult:
        self.scripts.append(script)
        return CommandResult(self.code, self.stdout, "")


def test_node_0_names_two_free_ports_only_when_the_launch_uses_them():
    from orchestrator.check.transport import LocalTransport

    # This machine as node 0: its kernel's choice, two distinct ports nobody listens on.
    ports = rendezvous_ports(LocalTransport(), "torchrun", 1)
    assert ports is not None and ports[0] != ports[1]
    for port in ports:
        with socket.create_server(("127.0.0.1", port)):  # free: it binds
            pass
    silent = _Answer(0, "41234 41235\n")
    assert rendezvous_ports(silent, "none", 1) is None and silent.scripts == []  # no round trip
    assert rendezvous_ports(silent, "none", 2) == (41234, 41235)  # MASTER_PORT for the user's
    # Whatever node 0 cannot answer well leaves the ports derived from the run id.
    for code, stdout in ((127, ""), (0, "41234"), (0, "41234 41234"), (0, "22 41235"),
                         (0, "41234 4x")):  # fmt: skip
        assert rendezvous_ports(_Answer(code, stdout), "torchrun", 2) is None, stdout
    assert parse_ports("41234 41235 41236", 3) == (41234, 41235, 41236)


def test_topology_refuses_what_cannot_launch():
    with pytest.raises(UsageError):
        Topology(node_ips=("10.0.0.1", ""), gpus_per_node=1, run_id=RUN_ID)
    with pytest.raises(UsageError):
        Topology(node_ips=("10.0.0.1",), gpus_per_node=0, run_id=RUN_ID)
    with pytest.raises(UsageError):
        Topology(node_ips=("10.0.0.1",), gpus_per_node=1, run_id=RUN_ID, join_timeout_s=1)


def test_a_node_without_public_address_goes_through_rank_0_for_streams_and_rsync(tmp_path):
    from orchestrator.check.transport import SshTransport
    from orchestrator.run.shell import rsync_shell, stream_argv

    key, known = tmp_path / "id %h", tmp_path / "known_hosts"
    rank0 = SshTransport("203.0.113.5", "ubuntu", key, known)
    node = SshTransport("10.0.1.5", "ubuntu", key, known, via=rank0)
    argv = stream_argv(node, "tail -f x")  # no hop log: orch run's long-lived streams
    (proxy,) = [a.removeprefix("ProxyCommand=") for a in argv if a.startswith("ProxyCommand=")]
    words = shlex.split(proxy)
    # The hop uses the box's key and pinned known_hosts, non-interactively; '%' is escaped.
    assert f"IdentityFile={tmp_path}/id %%h" in words and "BatchMode=yes" in words
    assert words[-4:] == ["-W", "[%h]:%p", "--", "203.0.113.5"]
    assert argv[-2:] == ["10.0.1.5", "tail -f x"]
    # rsync's -e: its own quoting (quotes doubled inside quotes), read back word for word.
    assert rsync_words(rsync_shell(node)) == argv[: argv.index("--")]
    assert ClusterNode(1, "i-1", None, "10.0.1.5").reached_via_rank0


def rsync_words(command: str) -> list[str]:
    """Split an `rsync -e` command as rsync does (rsync main.c, do_cmd: spaces separate,
    single and double quotes group, a doubled quote inside quotes is one quote)."""
    words, word, quote, i, started = [], [], "", 0, False
    while i < len(command):
        c = command[i]
        if c == " " and not quote:
            if started:
                words.append("".join(word))
            word, started = [], False
        elif c in "'\"" and (not quote or quote == c):
            started = True
            if quote and command[i + 1 : i + 2] == c:
                word.append(c)
                i += 1
            else:
                quote = "" if quote else c
        else:
            word.append(c)
            started = True
        i += 1
    if started:
        words.append("".join(word))
    return words
