"""run/recovery.py: what a run does after its box (or a cluster node) went away (issue 19
item 2, issue 24 item 5): whether to recover, on which market, how many recoveries are left,
and which candidates a cluster's replacement may be."""

from __future__ import annotations

import pytest

from orchestrator.clouds.base import InstanceState
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
