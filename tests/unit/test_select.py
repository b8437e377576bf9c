"""Selection: fit, ranking by cost per job, filters, failover order, nothing-fits advice."""

from __future__ import annotations

import pytest

from orchestrator.catalog import load_gpus
from orchestrator.errors import UsageError
from orchestrator.plan import read_plan, write_plan
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.planning import plan_job
from orchestrator.sizing.select import PlanOptions, job_samples, rank

BERT = JobSpec(model="bert-large", batch=8, seq=512)


def test_every_candidate_fits_within_headroom_and_is_ranked_by_cost() -> None:
    # Allowed, unverified prices rank by cost like the others (default: after them).
    ranking = rank(BERT, PlanOptions(allow_unverified_prices=True))
    priced = [c for c in ranking.candidates if c.cost is not None]
    assert len(priced) > 10
    assert all(c.memory_fraction <= 0.9 for c in ranking.candidates)
    costs = [c.cost for c in priced]
    assert costs == sorted(costs)
    # cost is price x hours (rounded to cents)
    for c in priced[:5]:
        assert c.cost == pytest.approx(c.price_per_hour * c.hours, abs=0.01)


def test_memory_fraction_matches_gpu_capacity() -> None:
    gpus = load_gpus()
    for c in rank(BERT, PlanOptions()).candidates[:10]:
        capacity = gpus[c.gpu].memory_gib * 1024**3
        assert c.memory_fraction == pytest.approx(c.memory_per_gpu_bytes / capacity, abs=1e-3)


def test_bigger_batch_rules_out_small_gpus() -> None:
    small = {c.instance_type for c in rank(BERT, PlanOptions()).candidates}
    big_job = JobSpec(model="bert-large", batch=64, seq=512, attention="eager", precision="fp32")
    big = {c.instance_type for c in rank(big_job, PlanOptions()).candidates}
    assert big < small  # strictly fewer types fit the heavier job
    assert big_job.batch > BERT.batch


def test_cloud_and_region_filters() -> None:
    aliyun = rank(BERT, PlanOptions(cloud="aliyun")).candidates
    assert aliyun and {c.cloud for c in aliyun} == {"aliyun"}
    east = rank(BERT, PlanOptions(cloud="aws", region="us-east-1")).candidates
    assert east and {c.region for c in east} == {"us-east-1"}


def test_max_price_and_deadline_filters() -> None:
    cheap = rank(BERT, PlanOptions(max_price=1.0)).candidates
    assert cheap and all(c.price_per_hour <= 1.0 for c in cheap)
    fastest = min(c.hours for c in rank(BERT, PlanOptions()).candidates)
    quick = rank(BERT, PlanOptions(deadline_hours=fastest * 1.5)).candidates
    assert quick and all(c.hours <= fastest * 1.5 for c in quick)


def test_spot_adds_cheaper_spot_rows() -> None:
    with_spot = rank(BERT, PlanOptions(spot=True, cloud="aws")).candidates
    spot_rows = [c for c in with_spot if c.market == "spot"]
    assert spot_rows
    on_demand = {
        (c.instance_type, c.region): c.price_per_hour for c in with_spot if c.market != "spot"
    }
    for c in spot_rows:
        # p5e.48xlarge has a spot price but no on-demand one (Capacity Blocks only).
        if on_demand[(c.instance_type, c.region)] is not None:
            assert c.price_per_hour < on_demand[(c.instance_type, c.region)]


def test_legacy_p3_is_plannable_with_a_warning() -> None:
    rows = rank(BERT, PlanOptions(cloud="aws")).candidates
    p3 = [c for c in rows if c.instance_type.startswith("p3")]
    assert p3, "P3 must stay plannable"
    assert all(any("legacy" in w.lower() or "dlami" in w.lower() for w in c.warnings) for c in p3)


def test_pure_bf16_excludes_gpus_without_bf16() -> None:
    rows = rank(JobSpec(model="bert-base", precision="bf16"), PlanOptions()).candidates
    assert rows
    assert not {c.gpu for c in rows} & {"T4", "V100-16GB", "V100-32GB"}


def test_throughput_override_scales_time() -> None:
    job = JobSpec(model="bert-base", samples=1_000_000)
    opts = PlanOptions(cloud="aws", region="us-east-1", gpus=1)
    base = {c.instance_type: c for c in rank(job, opts).candidates if c.gpu == "A10G"}
    fast = rank(job, PlanOptions(cloud="aws", region="us-east-1", gpus=1, throughput={"A10G": 1e4}))
    for c in fast.candidates:
        if c.gpu == "A10G":
            assert c.samples_per_s == pytest.approx(1e4)
            assert c.hours < base[c.instance_type].hours


def test_unknown_gpu_in_throughput_is_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown GPU"):
        rank(BERT, PlanOptions(throughput={"B9000": 5.0}))


def test_job_size_from_epochs_and_dataset() -> None:
    assert job_samples(JobSpec(model="gpt2", epochs=2, dataset_size=1000)) == (2000, False)
    assert job_samples(JobSpec(model="gpt2"))[1] is True


def test_more_samples_cost_more_but_keep_the_same_winner() -> None:
    small = plan_job(JobSpec(model="bert-base", samples=10_000))
    large = plan_job(JobSpec(model="bert-base", samples=10_000_000))
    assert large.choice.cost > small.choice.cost


def test_plan_has_failover_alternatives_and_round_trips(tmp_path) -> None:
    plan = plan_job(BERT, PlanOptions(cloud="aws"))
    assert plan.alternatives
    order = [c.cost for c in plan.candidates()]
    assert order == sorted(order)
    assert plan.choice.root_volume_gib >= 100  # DLAMI root plus checkpoints
    path = write_plan(plan, tmp_path / "plan.json")
    again = read_plan(path)
    assert again.choice == plan.choice
    assert again.alternatives == plan.alternatives


def test_nothing_fits_suggests_what_would() -> None:
    job = JobSpec(model="llama-2-70b", batch=1, seq=4096, optimizer="adamw")
    with pytest.raises(UsageError) as info:
        plan_job(job, PlanOptions(gpus=1))
    message = str(info.value)
    assert "nothing fits" in message
    assert "--lora-rank" in message or "--zero" in message or "--grad-checkpointing" in message


def nothing_fits(job: JobSpec, options: PlanOptions) -> str:
    with pytest.raises(UsageError) as info:
        plan_job(job, options)
    return str(info.value)


def test_nothing_fits_names_only_the_flags_the_job_does_not_use_yet() -> None:
    job = JobSpec(model="llama-3-70b", batch=8, seq=4096, optimizer="adamw", zero=3)
    message = nothing_fits(job, PlanOptions(cloud="aliyun"))
    assert "--grad-checkpointing" in message
    assert "--zero 3" not in message  # already on
    assert "even on 8 GPUs" in message  # the most GPUs one box shards it over
    sharded = nothing_fits(
        JobSpec(model="llama-3-70b", batch=8, seq=4096, zero=3, grad_checkpointing=True),
        PlanOptions(cloud="aliyun"),
    )
    assert sharded.endswith("try a smaller --batch or --seq"), sharded


def test_nothing_fits_without_sharding_names_no_gpu_count() -> None:
    message = nothing_fits(JobSpec(model="llama-3-70b", batch=8, seq=4096), PlanOptions())
    assert "GiB per GPU;" in message
    assert "GPU(s)" not in message and "even on" not in message
    assert "more GPUs with --zero 3" in message
