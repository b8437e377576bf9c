"""The step's peak is the largest of its phases (orchestrator/sizing/step_phases.py): which
phase dominates follows from the job, and each knob moves the phase it acts on."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.sizing.activation_layers import activation_fn_bytes, dtypes
from orchestrator.sizing.architectures import from_hf_config
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.memory import estimate_memory
from orchestrator.sizing.runtime_stack import STACKS

ROOT = Path(__file__).resolve().parents[2]
GPU_CONFIGS = ROOT / "benchmarks" / "gpu" / "configs"


def arch(name: str):
    return from_hf_config(json.loads((GPU_CONFIGS / f"{name}.json").read_text()), name)


QWEN = arch("qwen2.5-0.5b")  # vocabulary 151,936
LLAMA8B = arch("llama-3-8b")


def test_loss_phase_dominates_a_large_vocabulary_decoder_at_long_seq() -> None:
    m = estimate_memory(QWEN, JobSpec(batch=8, seq=2048, precision="bf16"))
    assert m.peak_phase == "loss"
    t_v = 8 * 2048 * QWEN.head.vocab
    # Beyond the forward's end: the two fp32 gradients (nll's and log-softmax's) of t x vocab,
    # instead of the bf16 logits and their fp32 upcast.
    assert m.phases["loss"] - m.phases["forward"] == pytest.approx(t_v * (8 - 2 - 4), abs=2)


def test_fused_ce_removes_the_loss_phase() -> None:
    job = JobSpec(batch=8, seq=2048, precision="bf16")
    plain = estimate_memory(QWEN, job)
    fused = estimate_memory(QWEN, replace(job, fused_ce=True))
    assert fused.peak_phase != "loss"
    assert fused.phases["loss"] - fused.phases["forward"] == 0
    assert fused.total_bytes < plain.total_bytes - 8 * 2048 * QWEN.head.vocab * 4 * 2


def test_optimizer_phase_dominates_when_activations_are_tiny() -> None:
    job = JobSpec(batch=1, seq=512, precision="bf16", grad_checkpointing=True)
    m = estimate_memory(LLAMA8B, job)
    assert m.peak_phase == "optimizer"
    # foreach AdamW: weights, gradients, both states and one state-sized sqrt temporary.
    assert m.phases["optimizer"] == pytest.approx(
        m.parameters_bytes + m.gradients_bytes + 1.5 * m.optimizer_bytes, abs=4
    )
    loop = estimate_memory(LLAMA8B, replace(job, memory_stack="hf-trainer-2022"))
    assert loop.phases["optimizer"] < m.phases["optimizer"] - m.optimizer_bytes / 4
    fused = estimate_memory(LLAMA8B, replace(job, stack="optimised"))  # fused AdamW
    assert fused.phases["optimizer"] == pytest.approx(
        m.phases["optimizer"] - m.optimizer_bytes / 2, abs=4
    )
    assert fused.assumptions["optimizer_implementation"] == "fused"


def test_states_and_gradients_never_add_to_the_activation_peak() -> None:
    m = estimate_memory(QWEN, JobSpec(batch=8, seq=2048, precision="bf16"))
    assert (
        m.phases["loss"]
        < m.parameters_bytes
        + m.gradients_bytes
        + m.optimizer_bytes
        + m.activations_bytes
        + 8 * 2048 * QWEN.head.vocab * 8
    )
    kept = estimate_memory(
        QWEN, JobSpec(batch=8, seq=2048, precision="bf16", memory_stack="hf-trainer-2022")
    )
    # A stack whose zero_grad keeps the gradients carries them through the forward.
    assert kept.phases["forward"] - m.phases["forward"] == pytest.approx(m.gradients_bytes, abs=2)


def test_checkpointing_recomputes_one_layer_in_backward_only() -> None:
    job = JobSpec(batch=4, seq=2048, precision="bf16", grad_checkpointing=True)
    m = estimate_memory(LLAMA8B, job)
    assert m.phases["backward"] > m.phases["forward"] - 4 * 2048 * LLAMA8B.head.vocab * 8


def test_gelu_new_under_autocast_keeps_fp32_intermediates() -> None:
    amp, fp32, bf16 = (dtypes(p) for p in ("amp-bf16", "fp32", "bf16"))
    assert activation_fn_bytes("gelu_new", fp32) == 16
    assert activation_fn_bytes("gelu_new", bf16) == 8
    # pow's fp32 input copy, tanh and 1 + tanh in fp32, 0.5 x in bf16.
    assert activation_fn_bytes("gelu_new", amp) == 4 + 4 + 4 + 2


def test_every_stack_states_its_basis() -> None:
    for stack in STACKS.values():
        assert stack.basis and 0 < stack.reserve_fraction < 0.2 and stack.context_gib > 0
        assert stack.optimizer_impl in ("foreach", "for-loop", "fused")
