"""Power-capped GPUs (gpus.toml `sustained_tflops`): a T4 cannot hold its 65 fp16 TFLOPS under
continuous matrix multiplies (about 24 at its 70 W limit), so the throughput model must not
transfer it a rate from GPUs that hold their clocks as if it could (issue 20)."""

from __future__ import annotations

import json

import pytest

from orchestrator.catalog import load_gpus
from orchestrator.cli import main
from orchestrator.sizing.throughput import calibrated_efficiency, gpu_rate


def test_t4_has_a_sourced_sustained_rate_below_its_peak() -> None:
    t4 = load_gpus()["T4"]
    assert 0 < t4.sustained_tflops["fp16"] < t4.peak_tflops["fp16"]
    assert t4.sustained_source is not None and t4.sustained_source.url.startswith("https://")


@pytest.mark.parametrize("workload", ["transformer", "transformer-eager"])
def test_t4_never_runs_above_its_sustained_matmul_rate(workload: str) -> None:
    t4 = load_gpus()["T4"]
    rate = gpu_rate(t4, "amp-bf16", workload)
    assert rate.precision_used == "amp-fp16"  # no bf16 on Turing
    assert rate.basis == "transferred"
    achieved = rate.peak_tflops * rate.efficiency
    measured = [
        e
        for (_, k, w), e in calibrated_efficiency().items()
        if w == workload and k in ("fp16", "bf16")
    ]
    ceiling = t4.sustained_tflops["fp16"] * sorted(measured)[len(measured) // 2]
    assert achieved <= ceiling * 1.001
    assert achieved < t4.sustained_tflops["fp16"]


def test_gpus_without_a_sustained_figure_keep_their_transferred_rate() -> None:
    gpus = load_gpus()
    assert not gpus["A10G"].sustained_tflops
    rate = gpu_rate(gpus["A10G"], "amp-bf16", "transformer")
    assert rate.efficiency > 0.5  # transferred from the A10 and others, uncapped


def _best(capsys: pytest.CaptureFixture[str], gpu: str) -> dict:
    """The cheapest box with this GPU for the QLoRA job of the issue."""
    flags = ["--quantize", "4bit", "--lora-rank", "16", "--gpu", gpu, "--top", "1"]
    try:
        main(["plan", "--model", "mistral-7b", "--json", *flags])
    except SystemExit as exc:
        assert not exc.code
    return json.loads(capsys.readouterr().out)["choice"]


def test_qlora_on_a_t4_costs_more_than_on_a_24_gb_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    t4, l4, a10g = (_best(capsys, gpu) for gpu in ("T4", "L4", "A10G"))
    assert t4["precision_used"] == "amp-fp16"
    assert t4["cost"] > a10g["cost"]
    # Turing at 70 W is the slowest of the three (it was ranked as fast as the L4)
    assert t4["tokens_per_s_per_gpu"] < 0.6 * l4["tokens_per_s_per_gpu"]
    assert l4["tokens_per_s_per_gpu"] < a10g["tokens_per_s_per_gpu"]
