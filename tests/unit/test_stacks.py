"""The implementation class ("stack") as an explicit throughput assumption: eager PyTorch vs an
optimised stack, each calibrated on its own runs; eager MoE loops, QLoRA dequantisation, and
the LLM figures (tokens/s per GPU, MFU) in the plan's table and JSON."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.catalog import load_gpus
from orchestrator.catalog.measurements import load_single_gpu_runs
from orchestrator.errors import UsageError
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.planning import plan_job
from orchestrator.sizing.resolve import resolve_architecture
from orchestrator.sizing.select import PlanOptions, rank
from orchestrator.sizing.stack_runs import run_job
from orchestrator.sizing.stacks import (
    A100_40GB_BANDWIDTH,
    DEQUANT_BYTES,
    LITGPT_NF4_RUNS,
    dequant_seconds,
    quantised_weights,
)

ROOT = Path(__file__).resolve().parents[2]
BOX = PlanOptions(cloud="aws", instance_type="p5en.48xlarge", headroom=1.0)  # 8 x H200


def run_orch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, timeout=120
    )


def rate(job: JobSpec, options: PlanOptions = BOX) -> float:
    ranking = rank(job, options)
    assert ranking.candidates, ranking.rejected
    return ranking.candidates[0].samples_per_s


def mfu(job: JobSpec, options: PlanOptions = BOX) -> float:
    candidate = rank(job, options).candidates[0]
    assert candidate.mfu is not None
    return candidate.mfu


def test_eager_is_slower_than_optimised_for_the_same_job() -> None:
    for job in (
        JobSpec(model="llama-3-8b", batch=4, seq=2048, lora_rank=16, grad_checkpointing=True),
        JobSpec(model="bert-large", batch=16, seq=512),
        JobSpec(model="gpt2-medium", batch=8, seq=1024),
    ):
        eager = rate(replace(job, stack="eager"))
        optimised = rate(replace(job, stack="optimised"))
        assert eager < optimised, job.model


def test_the_default_stack_is_eager() -> None:
    assert JobSpec().stack == "eager"
    job = JobSpec(model="llama-3-8b", batch=4, seq=2048, lora_rank=16, grad_checkpointing=True)
    assert rate(job) == rate(replace(job, stack="eager"))


def test_eager_attention_with_dropout_costs_more_than_without() -> None:
    """GPT-2's attention dropout (0.1) is what slows the eager stack most: the same shape
    with dropout off runs faster on the eager stack, and is unchanged on the optimised one."""
    from orchestrator.sizing.resolve import resolve_architecture
    from orchestrator.sizing.throughput import shape_of

    job = JobSpec(model="gpt2-medium", batch=8, seq=1024)
    arch, _ = resolve_architecture(job)
    assert shape_of(arch, job, "eager").dropout
    assert not shape_of(arch, job, "optimised").dropout


def test_stack_runs_match_the_raw_measurements() -> None:
    """Every real-GPU file in benchmarks/data has its usable runs as [[single_gpu]] rows
    (benchmarks/stack_rows.py prints them), figure for figure, and the model config each row
    names has the measured parameter count (adapters aside)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import stack_rows

    files = sorted((ROOT / "benchmarks/data").glob("h200_*.jsonl"))
    assert files
    for path in files:
        raw = [row for row in stack_rows.rows(path) if stack_rows.usable(row)]
        url = f"repo:benchmarks/data/{path.name}"
        runs = [r for r in load_single_gpu_runs() if r.source.url == url]
        assert len(runs) == len(raw), path.name
        for run, row in zip(runs, raw, strict=True):
            assert run.gpu == stack_rows.gpu_name(row["gpu"])
            assert run.batch == row["batch"] and run.precision == row["precision"]
            assert run.quantize == row.get("quantize")
            assert run.samples_per_s == pytest.approx(row["samples_per_s"], rel=1e-4)
            if row.get("quantize"):
                continue  # bitsandbytes packs quantised weights: numel() is not the count
            arch, _ = run_job(run)
            adapters = row["trainable"] if row["lora"] else 0
            assert arch.parameters == row["params"] - adapters, run.arch


def test_eager_leave_one_out_meets_the_target() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import throughput_accuracy as bench

    errors = []
    for i, (kind, m) in enumerate(bench._cases()):
        if bench.stack_of(kind, m) != "eager":
            continue
        measured = bench._job(kind, m)[2]
        errors.append(abs(bench.held_out_prediction(i)[0] - measured) / measured)
    assert len(errors) >= 7
    assert statistics.median(errors) <= 0.15, errors
    assert max(errors) <= 0.30, errors


def test_eager_moe_runs_far_below_the_dense_rate() -> None:
    """HF's eager MoE loops over its experts in Python: its MFU falls far below the optimised
    stack's, while a dense model's eager MFU stays near its optimised one."""
    moe = JobSpec(model="qwen1.5-moe-a2.7b", batch=4, seq=2048, precision="bf16",
                  lora_rank=16, grad_checkpointing=True)  # fmt: skip
    dense = replace(moe, model="qwen2-7b")
    assert mfu(moe) < 0.5 * mfu(replace(moe, stack="optimised"))
    assert mfu(dense) > 0.7 * mfu(replace(dense, stack="optimised"))


def test_quantised_base_weights_cost_dequantisation() -> None:
    lora = JobSpec(model="mistral-7b", batch=4, seq=2048, lora_rank=16, grad_checkpointing=True)
    for bits in ("4bit", "8bit"):
        assert rate(replace(lora, quantize=bits)) < rate(lora)
    # Checkpointing dequantises each weight once more (the recompute): a larger share of time.
    plain = replace(lora, grad_checkpointing=False)
    slower_gc = rate(lora) / rate(replace(lora, quantize="4bit"))
    slower = rate(plain) / rate(replace(plain, quantize="4bit"))
    assert slower_gc > slower > 1


@pytest.mark.parametrize(("model", "weights", "plain_min", "nf4_min"), LITGPT_NF4_RUNS)
def test_nf4_dequantisation_reproduces_litgpts_measured_cost(
    model: str, weights: int, plain_min: float, nf4_min: float
) -> None:
    """The NF4 figure is LitGPT's measured A100 cost of bnb.nf4-dq over bf16 LoRA: the rows'
    weight counts are the model's quantised linears plus lm_head (LitGPT quantises it too),
    and the model gives back each row's extra time within the rows' spread."""
    arch, _ = resolve_architecture(JobSpec(model=model))
    head = next(w for w in arch.weights if w.name == "lm_head")
    assert weights == quantised_weights(arch) + head.shape[0] * head.shape[1]
    a100 = load_gpus()["A100-40GB"]
    assert a100.memory_bandwidth_gbps * 1e9 == A100_40GB_BANDWIDTH
    job = JobSpec(model=model, batch=1, seq=1304, precision="bf16", lora_rank=8, quantize="4bit")
    measured = (nf4_min - plain_min) * 60 / 1000  # s per micro-batch
    modelled = dequant_seconds(arch, job, a100) * weights / quantised_weights(arch)
    assert modelled == pytest.approx(measured, rel=0.1)
    assert 2.5 < DEQUANT_BYTES["4bit"] < DEQUANT_BYTES["8bit"]  # below Qwen's GPTQ profile


def test_gradient_accumulation_amortises_the_optimizer_step() -> None:
    job = JobSpec(model="llama-3-8b", batch=1, seq=2048, precision="bf16",
                  grad_checkpointing=True, zero=3)  # fmt: skip
    assert rate(replace(job, grad_accum=8)) > rate(job)


def test_a_plan_with_a_bad_stack_is_refused() -> None:
    with pytest.raises(UsageError, match="--stack"):
        plan_job(JobSpec(model="bert-large", stack="jit"))
    with pytest.raises(UsageError, match="--grad-accum"):
        plan_job(JobSpec(model="bert-large", grad_accum=0))


def test_table_and_json_name_the_stack_and_llm_figures() -> None:
    args = ("plan", "--model", "llama-3-8b", "--lora-rank", "16", "--cloud", "aws", "--top", "3")
    table = run_orch(*args)
    assert table.returncode == 0, table.stderr
    assert "throughput assumes eager PyTorch" in table.stdout
    assert "tok/s/GPU" in table.stdout and "MFU" in table.stdout
    optimised = run_orch(*args, "--stack", "optimised")
    assert "throughput assumes optimised" in optimised.stdout
    as_json = run_orch(*args, "--json")
    plan = json.loads(as_json.stdout)
    assert plan["job"]["stack"] == "eager"
    assert plan["estimate"]["throughput"]["stack"] == "eager"
    choice = plan["choice"]
    per_gpu = choice["samples_per_s"] / choice["gpu_count"]
    assert choice["tokens_per_s_per_gpu"] == pytest.approx(per_gpu * 512, rel=1e-3)
    assert 0 < choice["mfu"] < 1
    encoder = json.loads(run_orch("plan", "--model", "bert-large", "--json").stdout)
    assert (
        encoder["choice"]["mfu"] is None
        and "tok/s/GPU" not in run_orch("plan", "--model", "bert-large").stdout
    )


def test_samples_per_second_has_three_significant_figures_in_the_table() -> None:
    from orchestrator.commands.plan import three_figures

    assert three_figures(0.012345) == "0.0123"
    assert three_figures(12.345) == "12.3"
    assert three_figures(5.0) == "5.00"
    assert three_figures(1234.5) == "1,230"
    assert three_figures(118.44) == "118"


def test_quantize_needs_lora_and_a_known_mode() -> None:
    with pytest.raises(UsageError, match="--quantize needs --lora-rank"):
        plan_job(JobSpec(model="mistral-7b", quantize="4bit"))
    with pytest.raises(UsageError, match="--quantize"):
        plan_job(JobSpec(model="mistral-7b", quantize="3bit", lora_rank=16))


def test_eager_stays_below_optimised_on_every_gpu() -> None:
    """A GPU without an eager run takes the class's measured ratio to the optimised stack, so
    eager never comes out faster than optimised, whatever the GPU's own calibration."""
    from orchestrator.catalog import load_gpus
    from orchestrator.sizing.throughput import gpu_rate

    for gpu in load_gpus().values():
        if "bf16" not in gpu.peak_tflops:
            continue
        eager = gpu_rate(gpu, "bf16", "transformer-eager")
        optimised = gpu_rate(gpu, "bf16", "transformer")
        assert eager.efficiency < optimised.efficiency, gpu.name


# LitGPT's config-hub table (Lightning-AI/litgpt config_hub/finetune/README.md, commit 03ffc55,
# read 2026-12-05): 1 x A10G, bf16-true, Alpaca2k (1,900 training samples after its 5 %
# validation split), 4 epochs, micro-batch 2, max seq 512, LoRA r 32 on q and v, no
# checkpointing: minutes of lora.yaml and of qlora.yaml (bnb.nf4). The times include LitGPT's
# periodic validation and sample generation, so their difference bounds the NF4 cost from above.
LITGPT_A10G_RUNS = (("mistral-7b", 31.00, 44.75), ("llama-2-7b", 32.82, 45.67))
LITGPT_A10G_MICRO_BATCHES = 4 * 1900 // 2


@pytest.mark.parametrize(("model", "lora_min", "qlora_min"), LITGPT_A10G_RUNS)
def test_nf4_cost_calibrated_on_the_a100_does_not_understate_a_24_gb_a10g(
    model: str, lora_min: float, qlora_min: float
) -> None:
    """The A100-calibrated NF4 figure, moved to the A10G by its bandwidth alone, gives at least
    LitGPT's published A10G cost of NF4 over bf16 LoRA (an upper bound) and at most 1.5x it:
    the model does not flatter the 24 GB card's QLoRA speed through dequantisation."""
    arch, _ = resolve_architecture(JobSpec(model=model))
    head = next(w for w in arch.weights if w.name == "lm_head")
    litgpt_weights = quantised_weights(arch) + head.shape[0] * head.shape[1]
    job = JobSpec(model=model, batch=2, seq=512, precision="bf16", lora_rank=32, quantize="4bit")
    a10g = load_gpus()["A10G"]
    modelled = dequant_seconds(arch, job, a10g) * litgpt_weights / quantised_weights(arch)
    published = (qlora_min - lora_min) * 60 / LITGPT_A10G_MICRO_BATCHES
    assert published <= modelled <= 1.5 * published
