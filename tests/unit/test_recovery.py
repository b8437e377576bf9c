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


def test_a_run_recovers_a_lost_cluster_node_within_the_budget_then_gives_up(tmp_path):
    """Run._run's loop (run/session.py) with the policy: node 1 lost twice on a 2-node
    cluster, --spot-recovery 1 --fallback-on-demand: the cluster is replaced twice (the second
    on on-demand), then the attempt that follows completes; losses counted per node."""
    from types import SimpleNamespace

    from orchestrator.provision.request import build_request
    from orchestrator.run.session import BoxLost, Run, RunRequest
    from orchestrator.run.spec import RunSpec

    lost_cluster = candidate("p4d.24xlarge", "spot", nodes=2, gpu_count=8, region="us-east-1")
    up = build_request(plan_of(lost_cluster), name="c1", ttl="1h", ssh_cidrs=["203.0.113.7/32"])
    request = RunRequest(spec=RunSpec(["true"], tmp_path), box_name="c1", up_options=up,
                         spot_recovery=1, fallback_on_demand=True)  # fmt: skip
    said: list[str] = []
    run = Run(request, said.append, None, None)  # type: ignore[arg-type]
    box = SimpleNamespace(name="c1", candidate=lost_cluster)
    replaced: list[bool] = []
    outcomes = iter(["lost", "lost", "done"])

    def attempt() -> None:
        run._open_attempt(lost_cluster, 0.0, "us-east-1a")
        if next(outcomes) == "lost":
            raise BoxLost(SILENT, node=1, message="node 1 of the cluster is lost: silent")
        run._close_attempt("completed", "", 0)

    run._first_box = lambda: box  # type: ignore[method-assign]
    run._attempt = attempt  # type: ignore[method-assign]
    run._replace_box = lambda lost, on_demand: replaced.append(on_demand) or box  # type: ignore[method-assign]
    run._run()
    assert replaced == [False, True]
    assert run.report.losses_by_node() == {"1": 2} and run.report.recoveries == 2
    assert [a.outcome for a in run.report.attempts] == ["lost", "lost", "completed"]
    assert "recovery 2 of 2: re-provisioning the whole cluster (2 nodes), on on-demand" in said[1]
    # A third loss would be past the budget: the loss ends the run.
    outcomes = iter(["lost", "lost", "lost"])
    run.report.attempts.clear()
    replaced.clear()
    with pytest.raises(BoxLost):
        run._run()
    assert replaced == [False, True]
