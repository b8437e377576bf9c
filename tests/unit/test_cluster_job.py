"""A cluster run's verdict (run/cluster_job.py) and its losses in the report (run/session.py)."""

from __future__ import annotations

import time
from pathlib import Path

from orchestrator.check.transport import SshTransport
from orchestrator.clouds.values import InstanceState
from orchestrator.provision.cluster import ClusterNode
from orchestrator.run.cluster_job import ClusterJob, NodeJob, parallel
from orchestrator.run.session import UNREACHABLE, Attempt, BoxLost, RunReport
from orchestrator.run.spec import RunSpec

RUN_ID = "r-20261205-080000-abcdef"


def cluster(tmp_path: Path, *codes: tuple[int | None, bool]) -> ClusterJob:
    spec = RunSpec(["python", "t.py"], tmp_path, run_id=RUN_ID)
    jobs = []
    for index, (code, stopped) in enumerate(codes):
        transport = SshTransport(f"10.0.0.{index + 1}", "u", tmp_path / "k", tmp_path / "kh")
        job = NodeJob(ClusterNode(index, "", None, f"10.0.0.{index + 1}"), transport, spec)
        job.exit_code, job.stopped = code, stopped
        jobs.append(job)
    return ClusterJob(box=None, jobs=jobs, say=lambda _: None)  # type: ignore[arg-type]


def test_the_worst_node_is_the_first_that_failed_by_itself(tmp_path: Path):
    assert cluster(tmp_path, (0, False), (0, False)).exit_code() == 0
    # Node 1 failed; orch stopped node 0 (143) and node 2 because of it: node 1's status wins.
    assert cluster(tmp_path, (143, True), (3, False), (143, True)).exit_code() == 3
    assert cluster(tmp_path, (0, False), (137, True)).exit_code() == 137
    assert cluster(tmp_path, (0, False), (None, False)).exit_code() == 1  # never known


def test_parallel_runs_every_call_and_raises_the_first_failure_in_order():
    ran: list[int] = []

    def work(n: int) -> int:
        time.sleep(0.01 * (3 - n))
        ran.append(n)
        if n in (1, 2):
            raise ValueError(n)
        return n

    try:
        parallel(work, [0, 1, 2])
    except ValueError as exc:
        assert exc.args == (1,)
    else:
        raise AssertionError("no failure raised")
    assert sorted(ran) == [0, 1, 2]
    assert parallel(lambda n: n * 2, [1, 2, 3]) == [2, 4, 6]


def test_what_is_recovered_and_the_losses_counted_per_node():
    assert BoxLost(InstanceState("terminated", "x", spot_reclaimed=True)).recoverable
    assert not BoxLost(InstanceState("terminated", "User initiated")).recoverable
    assert BoxLost(InstanceState(UNREACHABLE, "no SSH answer"), node=1).recoverable
    # A node someone terminated was meant to go, as a box is.
    assert not BoxLost(InstanceState("terminated", "User initiated"), node=1).recoverable

    def attempt(number: int, outcome: str, node: int | None) -> Attempt:
        return Attempt(number, "aws", "us-east-1", "p4d.24xlarge", "spot", "us-east-1a", 1.0,
                       started=0.0, outcome=outcome, lost_node=node)  # fmt: skip

    report = RunReport(RUN_ID, "c1", 0, attempts=[
        attempt(1, "lost", 1), attempt(2, "reclaimed", 0), attempt(3, "lost", 1),
        attempt(4, "completed", None)])  # fmt: skip
    assert report.losses_by_node() == {"1": 2, "0": 1}
    assert report.to_dict()["losses_by_node"] == {"1": 2, "0": 1} and report.recoveries == 3


def test_a_node_is_not_silent_for_the_time_its_sync_took(tmp_path: Path, monkeypatch):
    """Each node's last SSH answer was stamped when its NodeJob was made, before the nodes
    were prepared and synced; a sync longer than --ssh-lost-after then made the first status
    look that missed an answer a lost node ("no SSH answer for 900 s"): a recovery for a box
    that had answered every call."""
    import types

    from orchestrator.check.transport import Unreachable
    from orchestrator.run import cluster_job, remote

    clock = [5000.0]
    monkeypatch.setattr(
        cluster_job, "time", types.SimpleNamespace(monotonic=lambda: clock[0], sleep=None)
    )
    job_cluster = cluster(tmp_path, (None, False))
    job_cluster.box = types.SimpleNamespace(name="c1")  # type: ignore[assignment]
    (job,) = job_cluster.jobs
    job.last_answer = clock[0]

    def call_ok(transport: object, script: str, **kwargs: object) -> str:
        return "prepared /home/u/orch/work/project" if "prepared" in script else "started 7 setsid"

    def push(*args: object) -> None:
        clock[0] += 900.0  # a big working directory

    def no_answer(*args: object, **kwargs: object) -> None:
        raise Unreachable("ssh: connection timed out")

    monkeypatch.setattr(cluster_job.shell, "call_ok", call_ok)
    monkeypatch.setattr(cluster_job.sync, "push", push)
    job.transport = types.SimpleNamespace(run=no_answer)  # type: ignore[assignment]
    job_cluster.start(None, lambda job: remote.LaunchEnv(attempt=1, cloud="aws"))
    assert job_cluster._check(job, rank0_running=True) == "ok"


def test_rank_0_stopped_by_its_box_on_a_spot_notice_is_a_reclaimed_node(tmp_path: Path):
    """Rank 0's agent stopped the job on the spot notice (status reclaim=1): the node is lost
    to the spot service (recovered from), not a job that exited 143."""
    import types

    job_cluster = cluster(tmp_path, (None, False))
    (job,) = job_cluster.jobs
    line = "pid=4 alive=0 exit=143 cmd size=3 free=12 reclaim=1\n"
    answer = types.SimpleNamespace(stdout=line)
    job.transport = types.SimpleNamespace(run=lambda *a, **k: answer)  # type: ignore[assignment]
    lost = job_cluster._check(job, rank0_running=True)
    assert not isinstance(lost, str) and lost.index == 0
    assert lost.state is not None and lost.state.spot_reclaimed
    assert BoxLost(lost.state, node=0).recoverable
