"""What to do after an attempt of `orch run` ends because its box (or one node of a cluster)
went away: whether to recover, on which market, how many recoveries are left (issue 19 item
2, issue 24 item 5). Pure decisions over values; run/session.py does what they say.

- A box is recovered from only when its cloud's spot service took it back
  (`InstanceState.spot_reclaimed`): a box someone terminated or stopped was meant to go.
- A cluster node is recovered from when it was reclaimed, or when it went silent (no SSH
  answer for --ssh-lost-after, its job gone without a status: `UNREACHABLE`). A node someone
  terminated or stopped is taken as meant, as a box is.
- The budget is --spot-recovery N (the plan's own markets), plus one on on-demand boxes with
  --fallback-on-demand. A cluster spends the same budget, and relaunches the same world size.
- A cluster replaces the lost node alone when it can (`replaces_node`): in its own Terraform
  root, the same placement group and market (provision/node_replace.py); the other nodes keep
  their instances. When its plan would replace another node too (drift), when the apply fails
  (no capacity in the group's zone, anything else), when the market changes (spot recoveries
  spent: on-demand), or when its cloud cannot name a node's resource, the whole cluster is
  re-provisioned (destroy, then up of the same request).
- A new box or cluster: the lost candidate first (its region's other zones before the lost
  zone), then the plan's other candidates; all on on-demand once the spot recoveries are spent.

`gone(state)` is the one test of "this instance will not run the job again" that the run's
watch, a cluster's node watch and the pool's member check share.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from orchestrator.catalog.loader import price_of
from orchestrator.clouds.values import InstanceState
from orchestrator.errors import OrchError
from orchestrator.plan import Candidate, Plan

UNREACHABLE = "unreachable"  # a node's state when SSH, not its cloud, says it is gone
ON_DEMAND = "on-demand"
# A box (a cluster's rank 0) whose checkpoint agent saw a spot interruption notice and stopped
# the job itself (boxside/watcher.py's JobStop; status `reclaim=1`): the instance still runs,
# but the spot service is taking it back.
NOTICE_STOPPED = InstanceState("running", "spot interruption notice", spot_reclaimed=True)
NOTICE_STOPPED_WHY = "a spot interruption notice came; the box stopped the job for the reclaim"


def gone(state: InstanceState | None) -> bool:
    """The cloud says the instance is gone or being reclaimed (None: it could not say)."""
    return state is not None and (state.lost or state.spot_reclaimed)


def recoverable(state: InstanceState, node: int | None) -> bool:
    """Whether a loss is one a run recovers from (`node`: the cluster node lost, or None)."""
    return state.spot_reclaimed or (node is not None and state.state == UNREACHABLE)


@dataclass(frozen=True, slots=True)
class Recovery:
    """One recovery that the policy allows: its number (1-based), of how many."""

    number: int
    allowed: int
    on_demand: bool  # the replacement is on-demand (the spot recoveries are spent)

    @property
    def left(self) -> int:
        return self.allowed - self.number


@dataclass(frozen=True, slots=True)
class RecoveryPolicy:
    spot_recoveries: int = 0  # --spot-recovery N
    fallback_on_demand: bool = False  # --fallback-on-demand: one more, on-demand

    @property
    def allowed(self) -> int:
        return self.spot_recoveries + (1 if self.fallback_on_demand else 0)

    def after_loss(self, used: int, state: InstanceState, node: int | None) -> Recovery | None:
        """The next recovery after `used` of them, or None: the run ends with the loss."""
        if used >= self.allowed or not recoverable(state, node):
            return None
        number = used + 1
        return Recovery(number, self.allowed, on_demand=number > self.spot_recoveries)


NODE_REPLACED = "node replaced"  # what a recovery did, per lost node (Attempt.recovery)
CLUSTER_REPROVISIONED = "cluster re-provisioned"
BOX_REPLACED = "box replaced"


def replaces_node(recovery: Recovery, market: str, node: int | None, can: bool) -> bool:
    """Whether this recovery replaces the lost node alone (`market`: the cluster's; `can`: the
    box is a cluster whose cloud names its nodes' resource). Not when the market changes: a
    spot cluster going on-demand is a new cluster (every node on the new market)."""
    same_market = not recovery.on_demand or market == ON_DEMAND
    return can and node is not None and same_market


def describe(recovery: Recovery, box: str, why: str, nodes: int, node: int | None = None) -> str:
    """The line a run says before it recovers (`node`: the node replaced alone, if so)."""
    if node is not None:
        others = f"{nodes - 1} other node{'s stay' if nodes > 2 else ' stays'}"
        what = f"replacing node {node} alone, in the cluster's placement group ({others})"
    else:
        what = "re-provisioning " + ("box" if nodes == 1 else f"the whole cluster ({nodes} nodes)")
    market = ", on on-demand" if recovery.on_demand else ""
    return (
        f"box {box} is gone ({why}); recovery {recovery.number} of {recovery.allowed}:"
        f" {what}{market}, then resuming from the latest checkpoint"
    )


def recovery_plan(plan: Plan, lost: Candidate, on_demand: bool) -> Plan:
    """The lost box's candidate first (its other zones are tried first: avoid_zones), then the
    plan's other candidates; all on-demand once spot recoveries are used up. A cluster's job
    needs the same world size: only candidates with its nodes and GPUs per node follow it."""
    rest = [c for c in plan.candidates() if c != lost and _same_world(c, lost)]
    order = [lost, *rest]
    if on_demand:
        order = _on_demand(order)
    return replace(plan, choice=order[0], alternatives=order[1:])


def _same_world(candidate: Candidate, lost: Candidate) -> bool:
    if lost.nodes == 1:
        return True  # one box: the job runs on whatever GPUs the next one has
    return (candidate.nodes, candidate.gpu_count) == (lost.nodes, lost.gpu_count)


def _on_demand(candidates: list[Candidate]) -> list[Candidate]:
    result: list[Candidate] = []
    seen: set[tuple[str, str, str, int]] = set()
    for candidate in candidates:
        where = (candidate.cloud, candidate.region, candidate.instance_type, candidate.nodes)
        if where in seen:
            continue
        if candidate.market == ON_DEMAND:
            seen.add(where)
            result.append(candidate)
            continue
        price = price_of(candidate.cloud, candidate.instance_type, candidate.region)
        if price is None:
            continue
        seen.add(where)
        result.append(replace(candidate, market=ON_DEMAND, price_per_hour=price))
    if not result:
        raise OrchError("no on-demand price for any plan candidate: cannot fall back")
    return result
