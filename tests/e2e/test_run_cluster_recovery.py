"""A cluster that `orch run` provisions loses a node and recovers (issue 24 item 5), end to end:
real Terraform core + hashicorp/aws against moto (behind the tests' proxy, which serves the
placement groups moto lacks), a real sshd per node on loopback, real rsync, checkpoints in
moto's S3 with the credentials the metadata stand-in hands each node, and a real `python -m
torch.distributed.run` (CPU, gloo) DDP job across the nodes.

2 x g5.xlarge on-demand, `--spot-recovery 1` (the recovery budget), `--launcher torchrun`: a
tiny DDP model trained one step per count, rank 0 checkpointing the count and the weights (orch
restores the checkpoint on every node; rank 0's is uploaded). Node 1 is lost mid-run, the first
attempt waiting at HOLD so the loss never races the count (no SSH answer for `--ssh-lost-after`,
every process of it killed, its disk gone, EC2 still says running): orch replaces node 1 alone
in the cluster's Terraform root (`terraform apply -replace`), node 0 keeps its instance, both
stay in the placement group, the job starts again with the same world size at the new node's
address, every rank resumes from the same checkpoint, the count finishes exactly once (and the
weights are those of a run never interrupted), node I holds global rank I and the final
all_reduce sees both ranks, the report counts the loss and the replacement per node, and nothing
tagged is left.

moto's addresses cannot be reached, so each instance's public address is routed to an sshd of
its own (`NodeRouter`, keyed by the instance's orch:node tag): the replacement of node 1 is a
new machine (its own sshd, host key and disk). Their private addresses would be nowhere too: the
proxy puts each on this machine's loopback (`CapacityProxy.private_ips_on_loopback`, in every
EC2 answer, so Terraform's outputs carry them), so torchrun's rendezvous at rank 0's private
address and each node's --local-addr are real.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests import support
from tests.e2e import sshbox
from tests.e2e.conftest import moto_client
from tests.e2e.test_aws_cluster import tagged_left
from tests.e2e.test_run import (
    CIDR,
    Lines,
    assert_nothing_tagged,
    candidate,
    checkpointed_count,
    instances,
    wait_until,
)
from tests.e2e.test_run_cluster import results
from tests.support import plan_file, require

pytestmark = pytest.mark.e2e

NAME = "run-nodes"
COUNT = 40
HOLD = 10  # the first attempt counts to here, then waits to lose node 1
BUCKET = "ckpt-recovery"  # this test's own: the moto server is shared
# Small enough that one step more or less moves every weight by ~1e-3 (measured: 8e-4 at the
# least), far over `trained`'s tolerance; large enough that 40 steps are far from converged.
LR = 0.001

# test_run_cluster.py's DDP_PY with test_run.py's COUNTER_PY in it: one DDP step a count, the
# count and the weights checkpointed by rank 0 (whole or absent), restored by every rank from
# its node's checkpoint folder (orch restores it on every node: remote.LaunchEnv, wrapper.py).
DDP_COUNTER_PY = """\
import json, os, pathlib, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
attempt = os.environ["ORCH_ATTEMPT"]
target, lr, hold = int(sys.argv[1]), float(sys.argv[3]), int(sys.argv[4])
# The first attempt counts slowly and stops counting at `hold` (it ends only when node 1 is
# lost, however slow this machine: the loss never races the count), the second counts fast.
delay = float(sys.argv[2]) / (1 if attempt == "1" else 20)
ckpt = pathlib.Path(os.environ["ORCH_CHECKPOINT_DIR"])
state = ckpt / "state.json"
saved = json.loads(state.read_text()) if state.exists() else {"done": [], "model": {}}
done = saved["done"]
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
if saved["model"]:
    model.load_state_dict({k: torch.tensor(v) for k, v in saved["model"].items()})
restored = [None] * world
dist.all_gather_object(restored, len(done))  # how far each rank's checkpoint got
got = ",".join(str(n) for n in restored)
if rank == 0:
    print(f"attempt={attempt} resumed={os.environ['ORCH_RESUMED']} world={world} "
          f"ips={os.environ['ORCH_NODE_IPS']} restored={got} from={len(done)}", flush=True)
ddp = DistributedDataParallel(model)
optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
for n in range(len(done) + 1, target + 1):
    loss = ddp(torch.full((8, 4), float(rank + 1))).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    done.append(n)
    if rank == 0:
        weights = {k: v.tolist() for k, v in model.state_dict().items()}
        tmp = ckpt / "state.json.tmp"
        tmp.write_text(json.dumps({"done": done, "model": weights}))
        os.replace(tmp, state)  # a checkpoint is whole or absent
        print(f"count {n}", flush=True)
    time.sleep(delay)
    while attempt == "1" and n == hold:
        time.sleep(0.2)
total = torch.tensor([float(rank)])
dist.all_reduce(total)  # the final all_reduce: 0 + 1 + ... + world - 1 on every rank
result = json.dumps({
    "rank": rank, "world": world, "local_rank": int(os.environ["LOCAL_RANK"]),
    "node": int(os.environ["ORCH_NODE_RANK"]), "nodes": int(os.environ["ORCH_NUM_NODES"]),
    "master": os.environ["MASTER_ADDR"], "attempt": int(attempt), "sum": total.item(),
    "weights": [p.detach().flatten().tolist() for p in model.parameters()]})
os.write(1, f"RESULT {result}\\n".encode())  # one write: a node's workers share its log
if rank == 0:
    pathlib.Path("outputs").mkdir(exist_ok=True)
    pathlib.Path("outputs", "count.json").write_text(json.dumps(done))
dist.barrier()  # every rank here before any tears gloo down (test_run_cluster.py's DDP_PY)
dist.destroy_process_group()
os._exit(0)  # no C++ teardown at interpreter exit (test_run_cluster.py's DDP_PY)
"""


class NodeRouter:
    """An ORCH_SSH_CONFIG that sends each instance of the cluster to an sshd of its own: a
    thread lists the cluster's instances (DescribeInstances by its orch:box tag) and gives the
    first instance of node K `servers[K][0]`, a replacement of node K the next one. The host
    key is pinned under the instance's public address (HostKeyAlias), as on real instances.
    `seen`: every instance it routed, (node, placement group), by instance id, in the order
    they came; `private`: their private addresses, as EC2 (the proxy) gives them."""

    def __init__(self, ec2: Any, servers: dict[int, list[sshbox.SshBox]], path: Path):
        self.ec2, self.servers, self.path = ec2, servers, path
        self.seen: dict[str, tuple[int, str]] = {}
        self.private: dict[str, str] = {}
        self.routes: dict[str, tuple[str, sshbox.SshBox]] = {}  # instance id -> (address, sshd)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        path.write_text("")

    def __enter__(self) -> NodeRouter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            changed = False
            for instance in instances(self.ec2, NAME):
                address, group = instance.get("PublicIpAddress"), instance["Placement"]
                if instance["InstanceId"] in self.routes:  # the group is known once it launched
                    node, known = self.seen[instance["InstanceId"]]
                    self.seen[instance["InstanceId"]] = (node, known or group.get("GroupName", ""))
                    continue
                if not address:
                    continue
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                node = int(tags["orch:node"])
                used = sum(1 for n, _ in self.seen.values() if n == node)
                if used >= len(self.servers[node]):  # a node replaced once too often
                    self.seen[instance["InstanceId"]] = (node, "unrouted")
                    continue
                self.seen[instance["InstanceId"]] = (node, group.get("GroupName", ""))
                self.private[instance["InstanceId"]] = instance.get("PrivateIpAddress", "")
                self.routes[instance["InstanceId"]] = (address, self.servers[node][used])
                changed = True
            if changed:
                self._write()

    def _write(self) -> None:
        blocks = [
            f"Host {address}\n  HostName 127.0.0.1\n  Port {server.port}\n"
            f"  HostKeyAlias {address}\n  IdentityFile {server.key_path}\n"
            for address, server in self.routes.values()
        ]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(blocks))
        os.replace(tmp, self.path)


def stored_count(s3: Any) -> int:
    """How far the newest checkpoint in the store got (0 before the first one)."""
    listing = s3.list_objects_v2(Bucket=BUCKET, Prefix="runs/").get("Contents", [])
    stored = any(o["Key"].endswith("/LATEST") for o in listing)
    return checkpointed_count(s3, BUCKET) if stored else 0


def power_off(home: Path) -> None:
    """Kill every process of that machine, as losing it does, until none is left."""

    def killed() -> bool:
        pids = sshbox.processes_of(home)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return not pids

    wait_until(killed, f"every process of {home.name} to be gone", timeout=30)


def trained(steps: int, world: int) -> list[float]:
    """The weights DDP_COUNTER_PY ends with after `steps` steps never interrupted, flattened:
    DDP applies the mean of the ranks' gradients."""
    torch = support.require_module("torch")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for _ in range(steps):
        optimizer.zero_grad()
        for rank in range(world):
            (model(torch.full((8, 4), float(rank + 1))).pow(2).mean() / world).backward()
        optimizer.step()
    return [w for p in model.parameters() for w in p.detach().flatten().tolist()]


def node_server(root: Path, home: Path, extra: dict[str, str]) -> sshbox.SshBox:
    server = sshbox.make_sshbox(root)
    sshbox.set_box_environment(server, home, extra)
    server.serve("a10g")  # g5.xlarge's GPU
    return server


def test_a_lost_node_is_replaced_alone_and_the_ddp_job_finishes_the_count_once(
    orch_process, aws_env, capacity_proxy, s3, ec2, tmp_path
):
    from tests.sim.identity import MotoInstanceIdentity
    from tests.sim.metadata import MetadataService

    require(sshbox.prerequisites() is None, sshbox.prerequisites() or "")
    require(shutil.which("rsync"), "rsync (orch run syncs with it)")
    support.require_module("torch", "torch (the job runs torch.distributed.run)")
    s3.create_bucket(Bucket=BUCKET)
    endpoint = aws_env["AWS_ENDPOINT_URL"]
    homes = [tmp_path / "home-0", tmp_path / "home-1", tmp_path / "home-1b"]
    servers: list[sshbox.SshBox] = []
    with MetadataService() as metadata:
        # The nodes' credentials for the store: the cluster's instance role, from the metadata.
        metadata.aws_identity = MotoInstanceIdentity(endpoint, "us-east-1", NAME)
        extra = {"AWS_ENDPOINT_URL": endpoint, "ORCH_AGENT_METADATA_URL": metadata.url}
        try:
            for n, home in enumerate(homes):
                servers.append(node_server(tmp_path / f"sshd-{n}", home, extra))
            routes = tmp_path / "routes"
            router = NodeRouter(
                moto_client("ec2", aws_env), {0: servers[:1], 1: servers[1:]}, routes
            )
            with capacity_proxy.private_ips_on_loopback(), router:
                report, out, saved = _run_and_lose_node_1(
                    orch_process, aws_env, s3, ec2, router, servers[1], homes[1], tmp_path
                )
        finally:
            for server in servers:
                server.stop()

    # Node 1 alone was replaced: node 0 kept its one instance, node 1 had two; all three in
    # the cluster's placement group.
    nodes = sorted(router.seen.values())
    assert nodes == [(0, f"orch-{NAME}"), (1, f"orch-{NAME}"), (1, f"orch-{NAME}")], nodes
    assert report["exit_code"] == 0 and report["recoveries"] == 1, report
    lost, finished = report["attempts"]
    assert lost["outcome"] == "lost" and lost["lost_node"] == 1
    assert lost["recovery"] == "node replaced" and finished["outcome"] == "completed"
    assert report["losses_by_node"] == {"1": 1}
    assert report["recoveries_by_node"] == {"1": {"lost": 1, "node replaced": 1}}
    assert any("replacing node 1 alone" in line for line in out.lines)

    # Both attempts had the same world, rank 0 at node 0's private address (on the loopback)
    # and node 1 at its instance's: the replacement's the second time.
    addresses: dict[int, list[str]] = {}
    for instance_id, (node, _) in router.seen.items():
        addresses.setdefault(node, []).append(router.private[instance_id])
    (rank0,), (node1, replacement) = addresses[0], addresses[1]
    assert all(ipaddress.ip_address(a).is_loopback for a in (rank0, node1, replacement))
    starts = [
        dict(word.split("=", 1) for word in line.split())
        for line in out.lines
        if line.startswith("attempt=")
    ]  # rank 0's; node 0's log of the first attempt is not replayed
    assert [(s["attempt"], s["resumed"], s["world"], s["ips"]) for s in starts] == [
        ("1", "0", "2", f"{rank0},{node1}"), ("2", "1", "2", f"{rank0},{replacement}")
    ], starts  # fmt: skip
    # Resumed from the checkpoint, every rank from the same one; the count finished once.
    resumed = int(starts[1]["from"])
    assert saved <= resumed <= HOLD and starts[1]["restored"] == f"{resumed},{resumed}"
    assert starts[0]["restored"] == "0,0"

    assert_the_finished_attempt_trained_as_one(report["node_logs"], rank0)
    workdir = tmp_path / "project"
    assert json.loads((workdir / "outputs" / "count.json").read_text()) == list(range(1, COUNT + 1))
    assert_nothing_tagged(ec2, NAME)
    assert tagged_left(ec2, NAME) == []  # placement group, launch template, address too


def assert_the_finished_attempt_trained_as_one(node_logs: list[str], rank0: str) -> None:
    """Every node's log of the attempt that finished: node I held global rank I, the final
    all_reduce saw both ranks, DDP kept the weights equal, and they are those of 40 steps
    never interrupted (a step replayed or lost would move them by ~1e-3). The lost attempt
    never got there (node 1's log went with it)."""
    logs = {f"{Path(p).parent.name}/{Path(p).name}": Path(p) for p in node_logs}
    assert sorted(logs) == ["attempt-1/node-0.log", "attempt-2/node-0.log", "attempt-2/node-1.log"]
    assert results(logs["attempt-1/node-0.log"].read_text()) == []
    found = [results(logs[f"attempt-2/node-{i}.log"].read_text()) for i in range(2)]
    for node, (line,) in enumerate(found):
        assert (line["node"], line["rank"], line["local_rank"]) == (node, node, 0), line
        assert (line["world"], line["nodes"], line["attempt"], line["sum"]) == (2, 2, 2, 1.0)
        assert line["master"] == rank0
    weights = [[w for p in line["weights"] for w in p] for (line,) in found]
    assert weights[0] == weights[1]
    assert weights[0] == pytest.approx(trained(COUNT, 2), abs=1e-5)


def _run_and_lose_node_1(
    orch_process: Any,
    aws_env: dict[str, str],
    s3: Any,
    ec2: Any,
    router: NodeRouter,
    server1: sshbox.SshBox,
    home1: Path,
    tmp_path: Path,
) -> tuple[dict[str, Any], Lines, int]:
    """The run; node 1 is lost once rank 0 has checkpointed. (report, output, saved)."""
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "ddp_counter.py").write_text(DDP_COUNTER_PY)
    plan = plan_file(tmp_path, candidate("g5.xlarge", "on-demand", nodes=2))
    proc = orch_process(
        "run", "--plan", plan, "--name", NAME, "--ssh-cidr", CIDR, "--workdir", str(workdir),
        "--watch-interval", "1", "--ssh-lost-after", "5", "--launcher", "torchrun",
        "--checkpoint-dir", "ckpt", "--store", f"s3://{BUCKET}/runs",
        "--checkpoint-interval", "1",
        "--spot-recovery", "1", "--fetch", "outputs", "--json",
        # The interpreter with torch (test_run_cluster.py): the nodes are this machine.
        "--", sys.executable, "ddp_counter.py", str(COUNT), "0.5", str(LR), str(HOLD),
        env={**aws_env, "ORCH_SSH_CONFIG": str(router.path)},
    )  # fmt: skip
    out = Lines(proc.stderr)  # under --json, rank 0's output and orch's lines are on stderr
    try:
        out.wait_for("count 4", timeout=300)
        wait_until(lambda: stored_count(s3) >= 3, "rank 0's checkpoint in the store")
        saved = stored_count(s3)
        # Node 1 is lost (its instance still running, as far as EC2 says): no SSH answer,
        # its processes and its disk gone; rank 0 waits at HOLD until orch stops it.
        server1.stop()
        power_off(home1)
        shutil.rmtree(home1 / ".orch")
        shutil.rmtree(home1 / "orch")
        code = proc.wait(timeout=300)
        stdout = proc.stdout.read()  # the report: printed at the end, small
        assert code == 0, "\n".join([*out.lines[-40:], stdout])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        (tmp_path / "orch.log").write_text("\n".join(out.lines))
    out.thread.join(timeout=10)
    return json.loads(stdout), out, saved
