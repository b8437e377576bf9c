"""Multi-node plans (issue 24 item 1): the plan file's `nodes`, sharding over nodes, EFA vs
TCP scaling, ranking (type, nodes) pairs by cost per job, and `--nodes` on the command line."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.catalog.network import NodeNetwork
from orchestrator.errors import UsageError
from orchestrator.plan import Candidate, Plan, read_plan
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.memory import estimate_memory
from orchestrator.sizing.nodes import FABRIC_EFFICIENCY, cluster_rate, internode_seconds
from orchestrator.sizing.planning import plan_job
from orchestrator.sizing.resolve import resolve_architecture
from orchestrator.sizing.select import PlanOptions, rank
from tests.support import candidate, plan_file, run_cli

GIB = 1024**3

# ------------------------------------------------------------------------------ plan file


def test_a_plan_file_keeps_each_candidate_s_nodes(tmp_path: Path) -> None:
    path = plan_file(tmp_path, candidate("p5.48xlarge", nodes=2), candidate("g5.xlarge"))
    assert json.loads(Path(path).read_text())["choice"]["nodes"] == 2
    plan = read_plan(path)
    assert [c.nodes for c in plan.candidates()] == [2, 1]


def test_an_older_plan_without_nodes_reads_as_one_node(tmp_path: Path) -> None:
    data = json.loads(Path(plan_file(tmp_path, candidate("g5.xlarge"))).read_text())
    del data["choice"]["nodes"]
    assert Plan.from_dict(data).choice.nodes == 1


@pytest.mark.parametrize("nodes", [0, -1, 65, 1.5, "2", True, None])
def test_a_plan_with_bad_nodes_is_refused_naming_the_candidate(nodes: object) -> None:
    row = candidate("g5.xlarge").to_dict()
    with pytest.raises(UsageError, match="plan alternative 1: nodes"):
        Candidate.from_dict(dict(row, nodes=nodes), "alternative 1")
    assert replace(candidate("g5.xlarge"), nodes=64).nodes == 64


# ------------------------------------------------------------------------------ sizing

LLAMA_70B = JobSpec(model="llama-2-70b", batch=1, seq=2048, zero=3, grad_checkpointing=True)
LLAMA_7B = JobSpec(model="llama-2-7b", batch=2, seq=2048, zero=3, grad_checkpointing=True)


def test_sharding_over_nodes_divides_the_sharded_state_per_gpu() -> None:
    """ZeRO-3 over 2 nodes x 8 GPUs: weights, gradients and optimizer states per GPU are half
    of 1 node's; activations (not sharded) stay the same."""
    arch, _ = resolve_architecture(LLAMA_70B)
    one, two = (estimate_memory(arch, LLAMA_70B.with_gpus(n)) for n in (8, 16))
    assert two.parameters == one.parameters
    for part in ("parameters_bytes", "gradients_bytes", "optimizer_bytes"):
        assert getattr(two, part) == pytest.approx(getattr(one, part) / 2, rel=0.01), part
    assert two.activations_bytes == one.activations_bytes
    assert two.total_bytes < one.total_bytes
    # DDP (--zero 0) replicates everything: more nodes do not lower per-GPU memory.
    ddp = replace(LLAMA_7B, zero=0)
    arch7, _ = resolve_architecture(ddp)
    assert estimate_memory(arch7, ddp.with_gpus(16)).optimizer_bytes == (
        estimate_memory(arch7, ddp.with_gpus(8)).optimizer_bytes
    )


@pytest.mark.parametrize(
    "options",
    [
        PlanOptions(),  # --cloud any: Aliyun's unverified prices cannot win
        PlanOptions(max_price=10.0),  # a p4de node ($27.45/h) is past it
        PlanOptions(spot=True, max_price=5.0),
    ],
)
def test_the_multi_node_hint_names_flags_that_plan(options: PlanOptions) -> None:
    """The nothing-fits hint counts only prices the plan could choose: running the flags it
    prints gives a plan with that many nodes of that type."""
    job = JobSpec(model="llama-3-8b")
    with pytest.raises(UsageError) as caught:
        plan_job(job, options)
    found = re.search(
        r"needs (\d+) × (\S+) with ZeRO-3 .*?plan it with --nodes \d+", str(caught.value)
    )
    assert found is not None, caught.value.message
    nodes, box = int(found[1]), found[2]
    plan = plan_job(replace(job, zero=3), replace(options, nodes=nodes))
    assert plan.choice.nodes == nodes
    assert box in {c.instance_type for c in plan.candidates()}


def test_a_70b_full_fine_tune_gets_a_multi_node_winner_with_nodes_auto() -> None:
    with pytest.raises(UsageError) as caught:  # one node: nothing fits, the hint says so
        plan_job(LLAMA_70B, PlanOptions(cloud="aws"))
    assert "plan it with --nodes" in caught.value.message
    # ... and "cheaper if" plans the lever: its winner is a cluster, with its cost.
    assert re.search(
        r"--nodes auto: \d × \S+ \(aws [^)]*\) \$[\d,.]+ for the job", caught.value.message
    )
    plan = plan_job(LLAMA_70B, PlanOptions(cloud="aws", nodes=None))
    win = plan.choice
    assert win.nodes in (2, 4, 8)
    assert win.memory_per_gpu_bytes <= win.gpu_memory_gib * GIB * 0.9
    assert win.cost == pytest.approx(win.nodes * win.price_per_hour * win.hours, abs=0.02)
    assert plan.job["gpus"] == win.nodes * win.gpu_count  # the data-parallel world
    assert all(c.nodes in (1, 2, 4, 8) for c in plan.alternatives)
    # Cost per job ranks them: the winner is no dearer than any alternative.
    assert all(win.cost <= c.cost for c in plan.alternatives if c.cost is not None)


def test_nodes_n_plans_exactly_n_nodes() -> None:
    rows = rank(LLAMA_70B, PlanOptions(cloud="aws", nodes=4)).candidates
    assert rows and {c.nodes for c in rows} == {4}
    single = rank(LLAMA_7B, PlanOptions(instance_type="p4d.24xlarge")).candidates
    assert {c.nodes for c in single} == {1}  # the default stays one node


def _aliyun_spot_at_half_price(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped Aliyun catalog has no spot prices: spot offers at half the on-demand price
    stand in for them."""
    from orchestrator.catalog.schema import InstanceType

    real = InstanceType.price

    def with_spot(self: InstanceType, region: str, spot: bool = False) -> float | None:
        on_demand = real(self, region)
        return on_demand / 2 if spot and on_demand is not None else real(self, region, spot)

    monkeypatch.setattr(InstanceType, "price", with_spot)


def test_aliyun_clusters_are_never_planned_spot(monkeypatch: pytest.MonkeyPatch) -> None:
    """ECS puts no spot instance in a deployment set: no spot Aliyun cluster row is offered,
    while spot Aliyun single boxes still are."""
    _aliyun_spot_at_half_price(monkeypatch)
    rows = rank(LLAMA_7B, PlanOptions(cloud="aliyun", nodes=None, spot=True)).candidates
    assert {c.market for c in rows if c.nodes > 1} == {"on-demand"}
    assert "spot" in {c.market for c in rows if c.nodes == 1}


def test_scaling_offers_no_spot_cluster_where_the_planner_plans_none(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spot Aliyun winner's `scaling` rows on 2, 4 and 8 nodes have no cost (nor speed or
    hours): the planner never offers a spot Aliyun cluster, so they were costs of something
    `orch plan --nodes N` could not choose. On-demand Aliyun clusters keep theirs."""
    _aliyun_spot_at_half_price(monkeypatch)
    where = ("--cloud", "aliyun", "--region", "cn-hangzhou", "--allow-unverified-prices")
    args = ("plan", "--model", "gpt2", *where, "--instance-type", "ecs.gn6v-c8g1.8xlarge", "--json")
    code, out, err = run_cli(capsys, *args, "--spot")
    assert code == 0, err
    data = json.loads(out)
    assert data["choice"]["market"] == "spot" and data["choice"]["nodes"] == 1
    rows = {row["nodes"]: row for row in data["scaling"]}
    assert rows[1]["cost"] == pytest.approx(data["choice"]["cost"], abs=0.02)
    for nodes in (2, 4, 8):
        assert rows[nodes]["cost"] is None, rows[nodes]
        assert rows[nodes]["samples_per_s"] is rows[nodes]["hours"] is None, rows[nodes]
    code, out, err = run_cli(capsys, *args)  # on-demand: clusters are planned
    assert code == 0, err
    data = json.loads(out)
    assert data["choice"]["market"] == "on-demand"
    assert all(row["cost"] is not None for row in data["scaling"])


def _rate(instance_type: str, nodes: int) -> float:
    options = PlanOptions(instance_type=instance_type, region="us-east-1", nodes=nodes)
    return rank(LLAMA_7B, options).candidates[0].samples_per_s


def test_efa_scales_nearly_linearly_and_tcp_scales_poorly() -> None:
    """The same job on 8 nodes: p4d (400 Gbps EFA) keeps most of 8x one box's speed; g5.48xlarge
    (100 Gbps TCP) loses much more to inter-node collectives. Neither exceeds linear scaling by
    more than the optimizer step's sharding gives."""
    efa = _rate("p4d.24xlarge", 8) / (8 * _rate("p4d.24xlarge", 1))
    tcp = _rate("g5.48xlarge", 8) / (8 * _rate("g5.48xlarge", 1))
    assert 0.7 < efa <= 1.1
    assert tcp < 0.75 and tcp < efa - 0.15
    # More nodes are faster, never slower, but each doubling gains less over TCP.
    rates = [_rate("g5.48xlarge", n) for n in (1, 2, 4, 8)]
    assert rates == sorted(rates)
    assert rates[3] / rates[2] < 2 and rates[1] / rates[0] < 2


def test_a_slower_network_gives_a_slower_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inter-node time follows the catalog's bandwidth: a tenth of it, slower cluster."""
    from orchestrator.catalog import network

    fast = _rate("p4d.24xlarge", 4)
    real = network.load_networks()
    slow = replace(real[("aws", "p4d.24xlarge")], gbps=40.0)
    monkeypatch.setattr(network, "load_networks", lambda: {**real, ("aws", "p4d.24xlarge"): slow})
    assert _rate("p4d.24xlarge", 4) < 0.8 * fast


def test_internode_seconds_is_bytes_over_effective_bandwidth() -> None:
    efa = NodeNetwork(gbps=400, fabric="efa", source=None)  # type: ignore[arg-type]
    params = 1_000_000_000
    # DDP under amp: fp32 gradients, all-reduce moves 2(n-1)/n of them; 2 nodes: 1 x 4 GB.
    seconds = internode_seconds(params, params, 0, "amp-bf16", 2, efa)
    assert seconds == pytest.approx(4e9 / (50e9 * FABRIC_EFFICIENCY["efa"]))
    assert internode_seconds(params, params, 0, "amp-bf16", 1, efa) == 0.0
    # Partial overlap: collectives shorter than half a step are hidden, longer ones are not.
    assert cluster_rate(10.0, 8, 2, 0.3) == pytest.approx(20.0)
    assert cluster_rate(10.0, 8, 2, 1.6) == pytest.approx(2 * 8 / (0.8 + 1.2))


def test_burstable_types_are_not_planned_across_nodes() -> None:
    ranking = rank(LLAMA_7B, PlanOptions(instance_type="g5.xlarge", nodes=2))
    assert ranking.candidates == []
    assert "not planned across nodes" in ranking.rejected["2 × g5.xlarge"]


def test_every_network_row_is_a_catalog_type_with_a_dated_source() -> None:
    from orchestrator.catalog import load_instances
    from orchestrator.catalog.network import load_networks

    known = {(i.cloud, i.name) for cloud in ("aws", "aliyun") for i in load_instances(cloud)}
    rows = load_networks()
    assert set(rows) <= known
    assert {k for k, n in rows.items() if n.fabric == "efa"} == {
        ("aws", name)
        for name in (
            "p4d.24xlarge",
            "p4de.24xlarge",
            "p5.48xlarge",
            "p5e.48xlarge",
            "p5en.48xlarge",
            "p6-b200.48xlarge",
        )
    }
    assert rows[("aws", "p5en.48xlarge")].gbps == 3200 and rows[("aws", "p4d.24xlarge")].gbps == 400
    assert all(n.source.url.startswith("https://") and n.source.date for n in rows.values())


# ------------------------------------------------------------------------------ command line


SEVENTY_B = (
    "--model",
    "llama-2-70b",
    "--batch",
    "1",
    "--seq",
    "2048",
    "--zero",
    "3",
    "--grad-checkpointing",
)


def test_json_shows_the_winner_s_type_on_1_2_4_and_8_nodes(capsys, tmp_path) -> None:
    out_file = tmp_path / "plan.json"
    code, out, err = run_cli(
        capsys, "plan", *SEVENTY_B, "--grad-checkpointing", "--nodes", "auto", "--cloud", "aws",
        "--json", "-o", str(out_file),
    )  # fmt: skip
    assert code == 0, err
    data = json.loads(out)
    scaling = data["scaling"]
    assert [row["nodes"] for row in scaling] == [1, 2, 4, 8]
    assert scaling[0]["fits"] is False and all(row["fits"] for row in scaling[1:])
    memory = [row["memory_per_gpu_bytes"] for row in scaling]
    assert memory == sorted(memory, reverse=True)
    assert [r["samples_per_s"] for r in scaling] == sorted(r["samples_per_s"] for r in scaling)
    win = data["choice"]
    same = next(row for row in scaling if row["nodes"] == win["nodes"])
    assert same["cost"] == pytest.approx(win["cost"], abs=0.02)
    assert read_plan(out_file).choice.nodes == win["nodes"] > 1


def test_the_table_shows_nodes_times_type(capsys) -> None:
    code, out, err = run_cli(capsys, "plan", *SEVENTY_B, "--nodes", "2", "--cloud", "aws",
                         "--instance-type", "p5en.48xlarge", "--region", "us-east-1")  # fmt: skip
    assert code == 0, err
    assert "2 × p5en.48xlarge" in out and "Winner: 2 × p5en.48xlarge" in out


@pytest.mark.parametrize("value", ["0", "-1", "65", "1.5", "two", "", "2x"])
def test_bad_nodes_are_a_usage_error(capsys, value: str) -> None:
    code, out, err = run_cli(capsys, "plan", "--model", "gpt2", "--nodes", value)
    lines = err.strip().splitlines()
    assert code == 2 and out == ""
    assert len(lines) == 1 and lines[0].startswith("orch: error: --nodes"), err


def test_the_job_file_sets_nodes(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "orch.yaml").write_text(
        "model: llama-2-70b\njob:\n  batch: 1\n  seq: 2048\n  zero: 3\n  grad_checkpointing: true\n"
        "resources:\n  nodes: 2\n  cloud: aws\n  instance_type: p5en.48xlarge\n"
    )
    code, out, err = run_cli(capsys, "plan", "--json")
    assert code == 0, err
    assert json.loads(out)["choice"]["nodes"] == 2
    (tmp_path / "orch.yaml").write_text("model: gpt2\nresources:\n  nodes: 0\n")
    code, _, err = run_cli(capsys, "plan", "--json")
    assert code == 2 and "nodes" in err


def test_a_price_cap_names_the_cheapest_box_that_could_win_without_it() -> None:
    """Past --max-price, the line names a box the plan could choose once the cap is raised to
    its price: under --cloud any not one whose price is unverified (Aliyun's shipped prices)."""
    job = JobSpec(model="llama-3-8b", zero=3)
    options = PlanOptions(nodes=2, max_price=5.0)
    with pytest.raises(UsageError) as caught:
        plan_job(job, options)
    found = re.search(r"cheapest fitting box is (\S+) at \$([\d.]+)/h", caught.value.message)
    assert found is not None, caught.value.message
    plan = plan_job(job, replace(options, max_price=float(found[2]) + 0.001))
    assert plan.choice.instance_type == found[1]
