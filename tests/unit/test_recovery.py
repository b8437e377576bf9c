"""run/recovery.py: what a run does after its box (or a cluster node) went away (issue 19
item 2, issue 24 item 5): whether to recover, on which market, how many recoveries are left,
and which candidates a cluster's replacement may be."""

from __future__ import annotations

import pytest

from orchestrator.clouds.values import InstanceState
from orchestrator.plan import Plan
from orchestrator.run import recovery
from orchestrator.run.recovery import UNREACHABLE, RecoveryPolicy
from tests.support import candidate

RECLAIMED = InstanceState("terminated", "Server.SpotInstanceTermination", spot_reclaimed=True)
TERMINATED = InstanceState("terminated", "User initiated")
SILENT = InstanceState(UNREACHABLE, "no SSH answer for 300 s")


def plan_of(*candidates) -> Plan:
    return Plan(job={}, estimate={}, choice=candidates[0], alternatives=list(candidates[1:]),
                created_at="2026-12-05T00:00:00Z")  # fmt: skip


def test_the_budget_is_spot_recoveries_then_one_on_demand():
    policy = RecoveryPolicy(spot_recoveries=2, fallback_on_demand=True)
    steps = [policy.after_loss(used, RECLAIMED, None) for used in range(4)]
    assert [(s.number, s.allowed, s.on_demand, s.left) for s in steps[:3]] == [
        (1, 3, False, 2), (2, 3, False, 1), (3, 3, True, 0)
    ]  # fmt: skip
    assert steps[3] is None  # spent: the run ends with the loss
    assert RecoveryPolicy().after_loss(0, RECLAIMED, None) is None  # no --spot-recovery


@pytest.mark.parametrize(
    ("state", "node", "recovered"),
    [
        (RECLAIMED, None, True),
        (TERMINATED, None, False),  # someone terminated the box: meant
        (SILENT, 1, True),  # a cluster node gone silent
        (RECLAIMED, 2, True),  # a cluster node reclaimed
        (TERMINATED, 1, False),  # a node someone terminated: meant, as a box is
        (InstanceState("stopped", "User initiated"), 0, False),
    ],
)
def test_which_losses_are_recovered_from(state, node, recovered):
    assert recovery.recoverable(state, node) is recovered
    step = RecoveryPolicy(spot_recoveries=1).after_loss(0, state, node)
    assert (step is not None) is recovered


def test_gone_is_the_cloud_saying_so():
    assert recovery.gone(RECLAIMED) and recovery.gone(TERMINATED)
    assert recovery.gone(InstanceState("stopped", ""))
    assert not recovery.gone(InstanceState("running", "")) and not recovery.gone(None)


def test_a_cluster_is_replaced_only_by_candidates_of_its_world_size():
    lost = candidate("p4d.24xlarge", "spot", nodes=2, gpu_count=8)
    wider = candidate("p4de.24xlarge", "spot", nodes=4, gpu_count=8)
    same = candidate("p5.48xlarge", "spot", nodes=2, gpu_count=8)
    one = candidate("p5.48xlarge", "on-demand", nodes=1, gpu_count=8)
    plan = recovery.recovery_plan(plan_of(wider, lost, same, one), lost, on_demand=False)
    assert plan.candidates() == [lost, same]
    fallback = recovery.recovery_plan(plan_of(wider, lost, same, one), lost, on_demand=True)
    assert [(c.instance_type, c.market, c.nodes) for c in fallback.candidates()] == [
        ("p4d.24xlarge", "on-demand", 2), ("p5.48xlarge", "on-demand", 2)
    ]  # fmt: skip
    # One box: any candidate may follow (the job runs on whatever GPUs it gets).
    single = candidate("g5.xlarge", "spot")
    assert len(recovery.recovery_plan(plan_of(single, one), single, False).candidates()) == 2


def test_what_the_run_says_before_it_recovers():
    step = RecoveryPolicy(1, True).after_loss(1, SILENT, 1)
    assert step is not None
    line = recovery.describe(step, "c1", "node 1 of the cluster is lost: x", nodes=3)
    assert line == (
        "box c1 is gone (node 1 of the cluster is lost: x); recovery 2 of 2: re-provisioning"
        " the whole cluster (3 nodes), on on-demand, then resuming from the latest checkpoint"
    )


def test_a_lost_node_is_replaced_alone_only_on_the_same_market():
    spot = RecoveryPolicy(spot_recoveries=1, fallback_on_demand=True)
    first, fallback = spot.after_loss(0, SILENT, 1), spot.after_loss(1, SILENT, 1)
    assert first is not None and fallback is not None and fallback.on_demand
    assert recovery.replaces_node(first, "spot", 1, can=True)
    # Spot recoveries spent: every node moves on-demand, a new cluster.
    assert not recovery.replaces_node(fallback, "spot", 1, can=True)
    # An on-demand cluster stays on-demand: its node can still be replaced alone.
    assert recovery.replaces_node(fallback, "on-demand", 1, can=True)
    # One box (no node), or a cloud that cannot name a node's resource: the whole thing.
    assert not recovery.replaces_node(first, "spot", None, can=True)
    assert not recovery.replaces_node(first, "spot", 1, can=False)
    line = recovery.describe(first, "c1", "node 1 of the cluster is lost: x", nodes=3, node=1)
    assert line == (
        "box c1 is gone (node 1 of the cluster is lost: x); recovery 1 of 2: replacing node 1"
        " alone, in the cluster's placement group (2 other nodes stay), then resuming from the"
        " latest checkpoint"
    )


def test_which_clusters_can_replace_a_node_alone():
    from types import SimpleNamespace

    from orchestrator.provision.node_replace import can_replace_node

    def box(cloud: str, nodes: int) -> SimpleNamespace:
        return SimpleNamespace(cloud=cloud, candidate=candidate("x", nodes=nodes))

    assert can_replace_node(box("aws", 2)) and can_replace_node(box("aliyun", 4))  # type: ignore[arg-type]
    assert not can_replace_node(box("aws", 1))  # type: ignore[arg-type]


def _cluster_run(tmp_path, market: str = "spot"):
    """A Run of a 2-node cluster it created (--spot-recovery 1 --fallback-on-demand) whose
    attempts are scripted; the box is a stand-in (Run._first_box)."""
    from types import SimpleNamespace

    from orchestrator.provision.request import build_request
    from orchestrator.run.session import Run, RunRequest
    from orchestrator.run.spec import RunSpec

    lost_cluster = candidate("p4d.24xlarge", market, nodes=2, gpu_count=8, region="us-east-1")
    up = build_request(plan_of(lost_cluster), name="c1", ttl="1h", ssh_cidrs=["203.0.113.7/32"])
    request = RunRequest(spec=RunSpec(["true"], tmp_path), box_name="c1", up_options=up,
                         spot_recovery=1, fallback_on_demand=True)  # fmt: skip
    said: list[str] = []
    run = Run(request, said.append, None, None)  # type: ignore[arg-type]
    box = SimpleNamespace(name="c1", cloud="aws", candidate=lost_cluster, outputs={})
    run._first_box = lambda: box  # type: ignore[method-assign]
    return run, box, lost_cluster, said


def _script(run, cluster, outcomes):
    from orchestrator.run.session import BoxLost

    steps = iter(outcomes)

    def attempt() -> None:
        if not run.report.attempts or run.report.attempts[-1].ended is not None:
            run._open_attempt(cluster, 0.0, "us-east-1a")
        if next(steps) == "lost":
            raise BoxLost(SILENT, node=1, message="node 1 of the cluster is lost: silent")
        run._close_attempt("completed", "", 0)

    return attempt


def test_a_run_replaces_the_lost_node_then_the_whole_cluster_on_demand(tmp_path, monkeypatch):
    """Run._run's loop (run/session.py) with the policy: node 1 lost twice on a 2-node spot
    cluster, --spot-recovery 1 --fallback-on-demand: first node 1 alone is replaced (same
    market), then the whole cluster on on-demand; then the attempt that follows completes."""
    from orchestrator.provision import node_replace
    from orchestrator.run.session import BoxLost

    run, box, cluster, said = _cluster_run(tmp_path)
    alone: list[int] = []
    whole: list[bool] = []
    monkeypatch.setattr(
        node_replace, "replace_node", lambda name, index, say, progress: alone.append(index) or box
    )
    run._attempt = _script(run, cluster, ["lost", "lost", "done"])  # type: ignore[method-assign]
    run._replace_box = lambda lost, on_demand: whole.append(on_demand) or box  # type: ignore[method-assign]
    run._run()
    assert alone == [1] and whole == [True]
    assert run.report.losses_by_node() == {"1": 2} and run.report.recoveries == 2
    assert [a.outcome for a in run.report.attempts] == ["lost", "lost", "completed"]
    assert [a.recovery for a in run.report.attempts] == [
        "node replaced", "cluster re-provisioned", ""
    ]  # fmt: skip
    assert run.report.to_dict()["recoveries_by_node"] == {
        "1": {"lost": 2, "node replaced": 1, "cluster re-provisioned": 1}
    }
    assert "recovery 1 of 2: replacing node 1 alone" in said[0]
    assert "recovery 2 of 2: re-provisioning the whole cluster (2 nodes), on on-demand" in said[1]
    # A third loss would be past the budget: the loss ends the run.
    run._attempt = _script(run, cluster, ["lost"] * 3)  # type: ignore[method-assign]
    run.report.attempts.clear()
    alone.clear()
    whole.clear()
    with pytest.raises(BoxLost):
        run._run()
    assert alone == [1] and whole == [True]


def test_a_node_that_cannot_be_replaced_falls_back_to_the_whole_cluster(tmp_path, monkeypatch):
    from orchestrator.provision import node_replace
    from orchestrator.provision.node_replace import NodeNotReplaced

    run, box, cluster, said = _cluster_run(tmp_path, market="on-demand")
    whole: list[bool] = []

    def refused(name, index, say, progress):
        raise NodeNotReplaced(
            f"node {index} could not be replaced: terraform apply failed: "
            "InsufficientInstanceCapacity"
        )

    monkeypatch.setattr(node_replace, "replace_node", refused)
    run._attempt = _script(run, cluster, ["lost", "done"])  # type: ignore[method-assign]
    run._replace_box = lambda lost, on_demand: whole.append(on_demand) or box  # type: ignore[method-assign]
    run._run()
    assert whole == [False]  # the first recovery, same market: the whole cluster, anew
    lost = run.report.attempts[0]
    assert lost.recovery == "cluster re-provisioned"
    assert "InsufficientInstanceCapacity" in lost.recovery_note
    assert any(
        "InsufficientInstanceCapacity; re-provisioning the whole cluster (2 nodes)" in line
        for line in said
    )
    assert run.report.recoveries_by_node() == {"1": {"lost": 1, "cluster re-provisioned": 1}}


def test_a_local_failure_mid_run_still_stops_the_job_and_destroys_the_box(tmp_path, monkeypatch):
    """A full disk here (the run record cannot be saved: OSError) while the job runs: the run
    went out of execute() without its teardown, leaving the job running and the box it created
    up until its TTL. Every way out tears down; the error still reaches the command line."""
    import errno
    from types import SimpleNamespace

    from orchestrator.run import record, session, shell

    run, box, _, said = _cluster_run(tmp_path, market="on-demand")
    box.outputs = {}
    box.expires_at = None
    full = OSError(errno.ENOSPC, "No space left on device")

    def attempt() -> None:
        run.box, run.job_started = box, True
        raise full

    def save_run(*args: object) -> None:
        raise full

    stopped: list[str] = []
    destroyed: list[str] = []
    run._run = attempt  # type: ignore[method-assign]
    monkeypatch.setattr(record, "save_run", save_run)
    monkeypatch.setattr(shell, "ssh_transport", lambda box, config: SimpleNamespace())
    monkeypatch.setattr(
        shell, "call_ok", lambda t, script, **kw: stopped.append(script) or "143 cmd"
    )
    monkeypatch.setattr(session, "box_exists", lambda name: True)
    monkeypatch.setattr(session.teardown, "down", lambda name, *args: destroyed.append(name))
    with pytest.raises(OSError, match="No space left"):
        run.execute()
    assert len(stopped) == 1 and destroyed == ["c1"]
    assert run.report.exit_code == 1 and "No space left" in (run.report.error or "")


def test_a_job_the_box_stopped_on_its_spot_notice_ends_the_attempt_as_a_reclaim(
    tmp_path, monkeypatch
):
    """On EC2 orch sees a reclaim only once the instance shuts down; the box's agent stops the
    job on the notice itself (status reclaim=1) and the job exits (143 here) while the cloud
    still says running. That ended the run as a failed command: no recovery. It is the spot
    service's reclaim, and recovered from like one."""
    from orchestrator.run import remote, session
    from orchestrator.run.session import BoxLost

    run, box, _, _ = _cluster_run(tmp_path)
    run.box = box
    run._open_attempt(box.candidate, 0.0, "us-east-1a")
    monkeypatch.setattr(session, "cluster_nodes", lambda box: [object()])
    monkeypatch.setattr(session, "node_count", lambda box: 1)
    run._start_on_box = lambda box, nodes, attempt: (None, "started 7 systemd")  # type: ignore[method-assign]
    run._save_record = lambda *args, **kwargs: None  # type: ignore[method-assign]
    run._follow = lambda box, transport: None  # type: ignore[method-assign]
    stopped = remote.JobStatus(found=True, exit_code=143, step="cmd", reclaim_stopped=True)
    run._final_status = lambda transport: stopped  # type: ignore[method-assign]
    with pytest.raises(BoxLost) as lost:
        run._attempt()
    assert lost.value.state.spot_reclaimed and lost.value.recoverable
    assert "spot interruption notice" in lost.value.message
    assert RecoveryPolicy(1).after_loss(0, lost.value.state, lost.value.node) is not None
