"""Issue 10 items 5-6 in selection: unverified prices, precision fallback, input-bound vision
jobs, the ZeRO one-GPU warning, --instance-type, and the multi-node hint."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from orchestrator.catalog import find_instance, loader
from orchestrator.catalog import overlay as ov
from orchestrator.catalog.schema import Price
from orchestrator.errors import UsageError
from orchestrator.sizing.input_pipeline import DECODE_PER_VCPU, decode_ceiling
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.planning import plan_job
from orchestrator.sizing.select import PlanOptions, rank, winners

GPT2 = JobSpec(model="gpt2", batch=8, seq=512)
RESNET = JobSpec(model="resnet50", batch=64, precision="amp-bf16", samples=1_281_167)
SHIPPED = "ecs.gn6i-c4g1.xlarge"  # a converted CNY list price (unverified), cn-hangzhou


def run_orch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    loader.clear_cache()
    yield tmp_path / "data"
    loader.clear_cache()


# ------------------------------------------------------------------ unverified prices


def test_shipped_aliyun_prices_are_unverified_and_aws_ones_are_not(data_home):
    assert not find_instance("aliyun", SHIPPED).price_verified("cn-hangzhou")
    assert find_instance("aws", "p5.48xlarge").price_verified("us-east-1")


def test_unverified_prices_win_only_when_allowed_or_their_cloud_is_named(data_home):
    """Issue 23: `--cloud aliyun` ranks Aliyun's boxes although every price is unverified
    (with the warning); under `--cloud any` they never win without --allow-unverified-prices."""
    ranking = rank(GPT2, PlanOptions(cloud="aliyun"))
    priced = [c for c in ranking.candidates if c.cost is not None]
    assert priced and not any(c.price_verified for c in priced)
    assert winners(ranking, PlanOptions(cloud="aliyun")) == priced
    named = plan_job(GPT2, PlanOptions(cloud="aliyun"))
    assert named.choice.cloud == "aliyun" and named.choice.price_verified is False
    assert any("NOT RE-VERIFIED" in w for w in named.choice.warnings)
    anywhere = rank(GPT2, PlanOptions(cloud="any"))
    assert all(c.price_verified for c in winners(anywhere, PlanOptions(cloud="any")))
    allowed = plan_job(GPT2, PlanOptions(cloud="aliyun", allow_unverified_prices=True))
    assert allowed.choice.cloud == "aliyun" and allowed.choice.price_verified is False


def test_unverified_prices_rank_after_verified_ones(data_home):
    ranking = rank(GPT2, PlanOptions())
    flags = [c.price_verified for c in ranking.candidates if c.cost is not None]
    assert False in flags and flags == sorted(flags, reverse=True)  # all True, then all False


def test_a_refreshed_region_becomes_verified_and_can_win(data_home):
    entry = ov.OverlayEntry(Price(0.01, None), "2026-12-03", "Alibaba Cloud DescribePrice API")
    ov.write_overlay("aliyun", {SHIPPED: {"cn-hangzhou": entry}}, "2026-12-03")
    loader.clear_cache()
    assert find_instance("aliyun", SHIPPED).price_verified("cn-hangzhou")
    plan = plan_job(GPT2, PlanOptions(cloud="aliyun"))
    assert (plan.choice.instance_type, plan.choice.price_verified) == (SHIPPED, True)


def test_catalog_instances_marks_unverified_prices_in_table_and_json():
    table = run_orch("catalog", "instances", "--cloud", "aliyun")
    row = next(line for line in table.stdout.splitlines() if line.split()[1:2] == [SHIPPED])
    assert "price NOT RE-VERIFIED" in row
    data = json.loads(run_orch("catalog", "instances", "--json").stdout)
    by_name = {r["name"]: r for r in data}
    assert by_name[SHIPPED]["price_verified"] is False
    assert by_name[SHIPPED]["unverified_prices"] == ["cn-hangzhou"]
    assert by_name["p5.48xlarge"]["price_verified"] is True


# ------------------------------------------------------------------ precision fallback


def test_amp_bf16_on_t4_runs_amp_fp16_and_says_so():
    ranking = rank(RESNET, PlanOptions(cloud="aws", instance_type="g4dn.2xlarge"))
    c = ranking.candidates[0]
    assert c.precision_used == "amp-fp16"
    assert "T4 has no bf16: runs amp-fp16 instead" in c.warnings
    a10g = rank(RESNET, PlanOptions(cloud="aws", instance_type="g5.2xlarge")).candidates[0]
    assert a10g.precision_used == "amp-bf16"
    assert not any("no bf16" in w for w in a10g.warnings)


def test_plan_table_and_json_show_the_precision_used():
    args = ["plan", "--model", "resnet50", "--precision", "amp-bf16", "--cloud", "aws"]
    table = run_orch(*args, "--instance-type", "g4dn.2xlarge")
    assert table.returncode == 0, table.stderr
    assert "precision" in table.stdout.splitlines()[2]
    assert "amp-fp16" in table.stdout.splitlines()[3]
    assert "warning: T4 has no bf16" in table.stdout
    body = json.loads(run_orch(*args, "--instance-type", "g4dn.2xlarge", "--json").stdout)
    assert body["choice"]["precision_used"] == "amp-fp16"


# ----------------------------------------------------------------- input-bound vision


def test_vision_throughput_is_capped_by_decode_on_the_boxs_vcpus():
    small = rank(RESNET, PlanOptions(cloud="aws", instance_type="g5.xlarge")).candidates[0]
    assert small.samples_per_s == pytest.approx(decode_ceiling(4)) == 3 * DECODE_PER_VCPU
    assert any(w.startswith("input-bound:") for w in small.warnings)
    # The same GPU with 16 vCPUs is not input-bound: more vCPUs, more images/s.
    big = rank(RESNET, PlanOptions(cloud="aws", instance_type="g5.4xlarge")).candidates[0]
    assert big.samples_per_s > small.samples_per_s
    assert not any(w.startswith("input-bound:") for w in big.warnings)


def test_measured_throughput_overrides_the_decode_ceiling():
    options = PlanOptions(cloud="aws", instance_type="g4dn.xlarge", throughput={"T4": 390.0})
    c = rank(RESNET, options).candidates[0]
    assert c.samples_per_s == pytest.approx(390.0)
    assert not any(w.startswith("input-bound:") for w in c.warnings)


def test_text_models_are_not_decode_bound():
    c = rank(GPT2, PlanOptions(cloud="aws", instance_type="g4dn.xlarge")).candidates[0]
    assert not any(w.startswith("input-bound:") for w in c.warnings)


# ------------------------------------------------------------- ZeRO one-GPU warning


def test_zero_one_gpu_warning_only_on_one_gpu_boxes():
    job = JobSpec(model="llama-2-7b", batch=1, seq=1024, precision="bf16", zero=3)
    ranking = rank(job, PlanOptions(cloud="aws"))
    note = "--zero 3 with one GPU shards nothing"
    assert note not in ranking.warnings
    for c in ranking.candidates:
        assert (note in c.warnings) == (c.gpu_count == 1), c.instance_type
    eight = run_orch("plan", "--model", "llama-2-13b", "--zero", "3", "--precision", "bf16",
                     "--cloud", "aws")  # fmt: skip
    assert eight.returncode == 0, eight.stderr
    assert "8x" in eight.stdout.splitlines()[3] and note not in eight.stdout


# --------------------------------------------------------------------- --instance-type


def test_instance_type_costs_only_that_box_in_each_priced_region():
    rows = rank(GPT2, PlanOptions(instance_type="p5.48xlarge")).candidates
    assert {c.instance_type for c in rows} == {"p5.48xlarge"}
    assert {c.region for c in rows} == set(find_instance("aws", "p5.48xlarge").prices)


def test_unknown_instance_type_is_one_line_with_close_names():
    result = run_orch("plan", "--model", "gpt2", "--instance-type", "p5.48xlarg")
    assert result.returncode == 2
    assert result.stderr.startswith("orch: error:") and "p5.48xlarge" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------- multi-node hint


def test_a_job_no_box_fits_says_how_many_nodes_of_which_type():
    job = JobSpec(model="llama-2-70b", batch=1, seq=2048, zero=3, grad_checkpointing=True)
    with pytest.raises(UsageError) as caught:
        plan_job(job, PlanOptions(instance_type="p4de.24xlarge"))
    message = caught.value.message
    assert "needs 3 × p4de.24xlarge with ZeRO-3 (24 GPUs" in message
    # The hint's node count is the smallest that fits: one node fewer does not.
    from orchestrator.sizing.memory import estimate_memory
    from orchestrator.sizing.resolve import resolve_architecture

    arch, _ = resolve_architecture(job)
    limit = 80 * 1024**3 * 0.9
    assert estimate_memory(arch, job.with_gpus(24)).total_bytes <= limit
    assert estimate_memory(arch, job.with_gpus(16)).total_bytes > limit
