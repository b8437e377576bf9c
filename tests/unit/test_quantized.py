"""QLoRA memory (orchestrator/sizing/quantized.py): NF4 with double quantisation or LLM.int8
base weights, fp32 adapters, dequantisation transients, and a 7B plan on a 24 GB GPU."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from orchestrator.cli import main
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.memory import GIB, estimate_memory
from orchestrator.sizing.quantized import NF4_BYTES_PER_WEIGHT, quantized_parameters
from orchestrator.sizing.resolve import resolve_architecture

JOB = JobSpec(model="mistral-7b", lora_rank=16, batch=4, seq=2048, grad_checkpointing=True)


def sized(job: JobSpec):
    arch, _ = resolve_architecture(job)
    return arch, estimate_memory(arch, job)


def test_nf4_weights_hold_about_four_bits_plus_constants() -> None:
    arch, m = sized(replace(JOB, quantize="4bit"))
    linear = quantized_parameters(arch)
    assert 0.9 * arch.parameters < linear < arch.parameters  # all but embeddings and lm_head
    assert pytest.approx(0.5 + 0.127 / 8, abs=1e-3) == NF4_BYTES_PER_WEIGHT  # QLoRA paper
    rest = arch.parameters - linear
    assert m.parameters_bytes == pytest.approx(
        linear * NF4_BYTES_PER_WEIGHT + rest * 4 + m.trainable_parameters * 4, abs=2
    )


def test_8bit_sits_between_4bit_and_16bit_and_keeps_its_inputs() -> None:
    _, four = sized(replace(JOB, quantize="4bit"))
    _, eight = sized(replace(JOB, quantize="8bit"))
    _, lora = sized(replace(JOB, precision="bf16"))
    assert four.parameters_bytes < eight.parameters_bytes < lora.parameters_bytes
    assert eight.activations_bytes > four.activations_bytes  # MatMul8bitLt saves A and CAt
    assert four.total_bytes < 16 * GIB < lora.total_bytes


def test_older_bitsandbytes_kept_the_4bit_input() -> None:
    _, now = sized(replace(JOB, quantize="4bit"))
    _, then = sized(replace(JOB, quantize="4bit", memory_stack="litgpt-2023"))
    assert then.activations_bytes > now.activations_bytes


def test_plan_qlora_mistral_7b_fits_a_24_gb_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        main(["plan", "--quantize", "4bit", "--lora-rank", "16", "--model", "mistral-7b", "--json"])
    except SystemExit as exc:
        assert not exc.code
    plan = json.loads(capsys.readouterr().out)
    text = json.dumps(plan)
    assert "A10G" in text or "L4" in text  # 24 GB GPUs are among the boxes that fit
    assert plan["estimate"]["memory"]["total_bytes"] < 24e9 * 0.9
    assert plan["job"]["grad_checkpointing"] is True  # the QLoRA recipe's default
