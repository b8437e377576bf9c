""" "Cheaper if": when a memory lever would make the winner cheaper (or make anything fit), the
plan names the exact flags, the winner they give and its cost, in the table and in JSON."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import UsageError
from orchestrator.sizing import levers
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.planning import plan_job
from orchestrator.sizing.select import PlanOptions, rank, winners

ROOT = Path(__file__).resolve().parents[2]
ONE_B = str(ROOT / "benchmarks/gpu/configs/llama-3.2-1b.json")
# A 1B decoder at batch 12 x 2048 trained in full: it needs over 100 GiB per GPU, so only 8-GPU
# H200/B200 boxes on AWS (a single 80 GB H100 took batch 4 once p5.4xlarge joined the catalog);
# each lever lets a cheaper box run it.
COSTLY = ("plan", "--hf-config", ONE_B, "--batch", "12", "--seq", "2048", "--cloud", "aws")
LINE = re.compile(
    r"^cheaper if (?P<flags>.+?): (?P<box>\S+) \(.*\) \$(?P<cost>[\d,.]+) for the job"
)


def run_orch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, timeout=120
    )


def test_a_costly_winner_shows_levers_whose_flags_give_that_winner() -> None:
    table = run_orch(*COSTLY)
    assert table.returncode == 0, table.stderr
    winner = re.search(r"^Winner: (\S+) .*: \$([\d,.]+) for the job", table.stdout, re.M)
    assert winner is not None
    lines = [m for line in table.stdout.splitlines() if (m := LINE.match(line))]
    assert 1 <= len(lines) <= 2, table.stdout
    for found in lines:
        cost = float(found["cost"].replace(",", ""))
        assert cost < float(winner[2].replace(",", ""))
        applied = run_orch(*COSTLY, *found["flags"].split(), "--json")
        assert applied.returncode == 0, applied.stderr
        choice = json.loads(applied.stdout)["choice"]
        assert choice["instance_type"] == found["box"]
        assert choice["cost"] == pytest.approx(cost, abs=0.01)


def test_levers_are_in_the_json_too() -> None:
    plan = json.loads(run_orch(*COSTLY, "--json").stdout)
    entries = plan["cheaper_if"]
    assert entries
    for entry in entries:
        assert entry["cost"] < plan["choice"]["cost"]
        assert 0 < entry["saving"] < 1
        assert entry["flags"].startswith("--")


def test_a_smaller_micro_batch_keeps_the_effective_batch() -> None:
    job = JobSpec(hf_config=ONE_B, batch=8, seq=2048, grad_accum=3)
    for alternatives in levers.candidate_levers(job, "causal-lm", nothing_fits=False):
        for flags, change in alternatives:
            if "batch" in change:
                assert change["batch"] * change["grad_accum"] == 8 * 3
                assert flags == f"--batch {change['batch']} --grad-accum {change['grad_accum']}"


def test_no_lever_is_tried_when_none_could_beat_the_winner(monkeypatch) -> None:
    """bert-large's winner is the cheapest box there is: no re-plans, no line, no JSON key."""
    options = PlanOptions(cloud="aws")
    job = JobSpec(model="bert-large")
    ranking = rank(job, options)

    def refuse(*args, **kwargs):
        raise AssertionError("a lever was planned although none could be cheaper")

    monkeypatch.setattr(levers, "rank", refuse)
    assert levers.cheaper_if(job, options, ranking) == []
    monkeypatch.undo()
    table = run_orch("plan", "--model", "bert-large", "--cloud", "aws")
    assert table.returncode == 0 and "cheaper if" not in table.stdout
    assert "cheaper_if" not in json.loads(run_orch("plan", "--model", "bert-large",
                                                   "--json").stdout)  # fmt: skip


def test_nothing_fits_names_a_lever_with_its_box_and_cost() -> None:
    job = JobSpec(model="llama-3-8b", batch=8, seq=2048)
    options = PlanOptions(cloud="aws")
    assert not winners(rank(job, options), options)
    with pytest.raises(UsageError) as info:
        plan_job(job, options)
    message = str(info.value)
    found = re.search(r"would fit with (?P<flags>--.+?): (?P<box>\S+) \(.*?\) \$", message)
    assert found is not None, message
    flags = found["flags"].split()
    change: dict[str, object] = {}
    for i, flag in enumerate(flags):
        if flag == "--lora-rank":
            change["lora_rank"] = int(flags[i + 1])
        elif flag == "--grad-checkpointing":
            change["grad_checkpointing"] = True
        elif flag == "--zero":
            change["zero"] = int(flags[i + 1])
        elif flag == "--fused-ce":
            change["fused_ce"] = True
        elif flag == "--quantize":
            change["quantize"] = flags[i + 1]
        elif flag == "--batch":
            change["batch"] = int(flags[i + 1])
        elif flag == "--grad-accum":
            change["grad_accum"] = int(flags[i + 1])
    from dataclasses import replace

    plan = plan_job(replace(job, **change), options)
    assert plan.choice.instance_type == found["box"]


def test_a_cluster_plan_shows_levers_too() -> None:
    """With --nodes 2 no single box is costed: a cluster ruled out by memory alone must still
    let the levers run (2 x p4de trains Llama 3 8B in full; 2 x p4d with LoRA costs less)."""
    job = JobSpec(model="llama-3-8b", zero=3)
    options = PlanOptions(cloud="aws", nodes=2)
    ranking = rank(job, options)
    assert ranking.memory_blocked_cost is not None
    found = levers.cheaper_if(job, options, ranking)
    assert found, "no lever for a cluster plan"
    base = winners(ranking, options)[0]
    for lever in found:
        assert lever.winner.nodes == 2 and lever.winner.cost < base.cost


def test_planning_the_levers_imports_no_torch() -> None:
    traced = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "orchestrator", *COSTLY],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert traced.returncode == 0, traced.stderr[-2000:]
    assert "cheaper if" in traced.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in traced.stderr.splitlines()}
    assert "torch" not in imported and "transformers" not in imported
