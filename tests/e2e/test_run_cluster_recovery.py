"""A cluster that `orch run` provisions loses a node and recovers (issue 24 item 5), end to end:
real Terraform core + hashicorp/aws against moto (behind the tests' proxy, which serves the
placement groups moto lacks), a real sshd per node on loopback, real rsync, checkpoints in
moto's S3 with the credentials the metadata stand-in hands each node.

2 x g5.xlarge on-demand, `--spot-recovery 1` (the recovery budget), `--launcher none`: every
node runs the same counter (each restores the checkpoint; rank 0's is streamed and uploaded).
Node 1 goes silent mid-run (no SSH answer for `--ssh-lost-after`, its processes and disk gone,
EC2 still says running): orch replaces node 1 alone in the cluster's Terraform root
(`terraform apply -replace`), node 0 keeps its instance, both stay in the placement group, the
count resumes from the checkpoint and finishes exactly once, the report counts the loss and
the replacement per node, and nothing tagged is left.

moto's addresses cannot be reached, so each instance's public address is routed to an sshd of
its own (`NodeRouter`, keyed by the instance's orch:node tag): the replacement of node 1 is a
new machine (its own sshd, host key and disk).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import sshbox
from tests.e2e.conftest import moto_client
from tests.e2e.test_aws_cluster import tagged_left
from tests.e2e.test_run import (
    CIDR,
    COUNTER_PY,
    Lines,
    assert_nothing_tagged,
    candidate,
    checkpointed_count,
    instances,
    wait_until,
)
from tests.support import plan_file, require

pytestmark = pytest.mark.e2e

NAME = "run-nodes"
COUNT = 40
BUCKET = "ckpt-recovery"  # this test's own: the moto server is shared


class NodeRouter:
    """An ORCH_SSH_CONFIG that sends each instance of the cluster to an sshd of its own: a
    thread lists the cluster's instances (DescribeInstances by its orch:box tag) and gives the
    first instance of node K `servers[K][0]`, a replacement of node K the next one. The host
    key is pinned under the instance's public address (HostKeyAlias), as on real instances.
    `seen`: every instance it routed, (node, placement group), by instance id."""

    def __init__(self, ec2: Any, servers: dict[int, list[sshbox.SshBox]], path: Path):
        self.ec2, self.servers, self.path = ec2, servers, path
        self.seen: dict[str, tuple[int, str]] = {}
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


def node_server(root: Path, home: Path, extra: dict[str, str]) -> sshbox.SshBox:
    server = sshbox.make_sshbox(root)
    sshbox.set_box_environment(server, home, extra)
    server.serve("a10g")  # g5.xlarge's GPU
    return server


def test_a_lost_node_is_replaced_alone_and_the_count_finishes_once(
    orch_process, aws_env, s3, ec2, tmp_path
):
    from tests.sim.identity import MotoInstanceIdentity
    from tests.sim.metadata import MetadataService

    require(sshbox.prerequisites() is None, sshbox.prerequisites() or "")
    require(shutil.which("rsync"), "rsync (orch run syncs with it)")
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
            with router:
                report, out, saved = _run_and_silence_node_1(
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

    # Resumed from the checkpoint; the count finished exactly once.
    starts = [line.split(" from=")[0] for line in out.lines if line.startswith("attempt=")]
    assert starts == ["attempt=1 resumed=0", "attempt=2 resumed=1"]  # node 0's log not replayed
    resumed = [line for line in out.lines if line.startswith("attempt=2 resumed=1 from=")]
    assert len(resumed) == 1 and saved <= int(resumed[0].rsplit("=", 1)[1]) < COUNT
    workdir = tmp_path / "project"
    assert json.loads((workdir / "outputs" / "count.json").read_text()) == list(range(1, COUNT + 1))
    assert_nothing_tagged(ec2, NAME)
    assert tagged_left(ec2, NAME) == []  # placement group, launch template, address too


def _run_and_silence_node_1(
    orch_process: Any,
    aws_env: dict[str, str],
    s3: Any,
    ec2: Any,
    router: NodeRouter,
    server1: sshbox.SshBox,
    home1: Path,
    tmp_path: Path,
) -> tuple[dict[str, Any], Lines, int]:
    """The run; node 1 goes silent once rank 0 has checkpointed. (report, output, saved)."""
    workdir = tmp_path / "project"
    workdir.mkdir()
    # The first attempt counts slowly (it must outlast the loss's detection), the second fast.
    counter = COUNTER_PY.replace(
        "float(sys.argv[2])",
        'float(sys.argv[2]) / (1 if os.environ["ORCH_ATTEMPT"] == "1" else 20)',
    )
    assert counter != COUNTER_PY
    (workdir / "counter.py").write_text(counter)
    plan = plan_file(tmp_path, candidate("g5.xlarge", "on-demand", nodes=2))
    proc = orch_process(
        "run", "--plan", plan, "--name", NAME, "--ssh-cidr", CIDR, "--workdir", str(workdir),
        "--watch-interval", "1", "--ssh-lost-after", "5", "--launcher", "none",
        "--checkpoint-dir", "ckpt", "--store", f"s3://{BUCKET}/runs",
        "--checkpoint-interval", "1",
        "--spot-recovery", "1", "--fetch", "outputs", "--json",
        "--", "python3", "counter.py", str(COUNT), "0.5",
        env={**aws_env, "ORCH_SSH_CONFIG": str(router.path)},
    )  # fmt: skip
    out = Lines(proc.stderr)  # under --json, rank 0's output and orch's lines are on stderr
    try:
        out.wait_for("count 4", timeout=240)
        wait_until(lambda: stored_count(s3) >= 3, "rank 0's checkpoint in the store")
        saved = stored_count(s3)
        # Node 1 goes silent (its instance still running, as far as EC2 says): no SSH answer,
        # its processes and its disk gone.
        (run_dir,) = (home1 / ".orch" / "runs").iterdir()
        server1.stop()
        os.killpg(int((run_dir / "pid").read_text()), signal.SIGKILL)
        shutil.rmtree(home1 / ".orch")
        shutil.rmtree(home1 / "orch")
        code = proc.wait(timeout=240)
        stdout = proc.stdout.read()  # the report: printed at the end, small
        assert code == 0, "\n".join([*out.lines[-40:], stdout])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        (tmp_path / "orch.log").write_text("\n".join(out.lines))
    out.thread.join(timeout=10)
    return json.loads(stdout), out, saved
