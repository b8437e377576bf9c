"""The traced activation model (sizing/trace/): agreement with the analytic model where that
one is exact, GPU semantics (bool dropout masks, flash/efficient SDPA, CUDA autocast policy,
balanced MoE routing), and the fallback for families the analytic model does not know.

Needs the `trace` extra (torch + transformers): skipped locally without it, failing under CI.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli import main
from orchestrator.sizing.architectures import from_hf_config
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.memory import activation_bytes
from tests.support import require_module

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "hf_configs"
EXTRA = "the trace extra: pip install -e '.[trace]'"

# StableLM 2 (a family the analytic model does not know), 2 of its 24 layers.
STABLELM = {
    "architectures": ["StableLmForCausalLM"],
    "model_type": "stablelm",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "num_hidden_layers": 2,
    "vocab_size": 100352,
    "max_position_embeddings": 4096,
    "hidden_act": "silu",
    "layer_norm_eps": 1e-5,
    "partial_rotary_factor": 0.25,
    "rope_theta": 10000,
    "use_qkv_bias": True,
    "tie_word_embeddings": False,
    "hidden_dropout": 0.0,
    "attention_dropout": 0.0,
}
# A small Mixtral-style MoE: 4 experts, top-2.
MOE = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 1024,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}


@pytest.fixture
def trace():  # noqa: ANN201 - the module under test
    require_module("torch", EXTRA)
    require_module("transformers", EXTRA)
    from orchestrator.sizing import trace

    return trace


def config(name: str, layers: int | None = None, **overrides: Any) -> dict[str, Any]:
    cfg = json.loads((FIXTURES / f"{name}.json").read_text())
    if layers is not None:
        for key in ("num_hidden_layers", "n_layer"):
            if key in cfg:
                cfg[key] = layers
    return {**cfg, **overrides}


def traced(trace, cfg: dict[str, Any], job: JobSpec):  # noqa: ANN001, ANN201
    return trace.trace_config(json.dumps(cfg, sort_keys=True), trace.trace_key(job))


FP32_EAGER = JobSpec(batch=2, seq=128, precision="fp32", attention="eager")
AMP_SDPA = JobSpec(batch=2, seq=128, precision="amp-bf16", attention="sdpa")


@pytest.mark.parametrize(
    ("name", "layers", "job", "tolerance"),
    [
        # fp32 eager: the analytic model counts exactly what PyTorch saves.
        ("bert-large-uncased", 4, FP32_EAGER, 0.005),
        ("gpt2", 2, FP32_EAGER, 0.005),
        ("llama-2-7b", 1, FP32_EAGER, 0.005),
        # The job's defaults (amp-bf16, SDPA): CUDA kernels and autocast, emulated.
        ("bert-large-uncased", 4, AMP_SDPA, 0.05),
        ("llama-2-7b", 1, AMP_SDPA, 0.05),
    ],
)
def test_trace_agrees_with_the_exact_analytic_families(
    trace, name: str, layers: int, job: JobSpec, tolerance: float
) -> None:
    cfg = config(name, layers)
    result = traced(trace, cfg, job)
    analytic = activation_bytes(from_hf_config(cfg, name), job)  # bool masks (GPU)
    assert abs(analytic / result.activation_bytes - 1) <= tolerance
    assert result.parameters == from_hf_config(cfg, name).parameters


def test_dropout_masks_count_as_bool(trace) -> None:
    """GPT-2's three dropouts per layer (embeddings, attention output, MLP output) keep only
    their masks (the dropped output feeds a residual add); CUDA's are bool: 1 byte each."""
    job = FP32_EAGER
    off = config("gpt2", 1, embd_pdrop=0.0, resid_pdrop=0.0, attn_pdrop=0.0)
    on = {**off, "embd_pdrop": 0.1, "resid_pdrop": 0.1}
    tokens_x_hidden = job.batch * job.seq * off["n_embd"]
    difference = traced(trace, on, job).activation_bytes - traced(trace, off, job).activation_bytes
    assert difference == 3 * tokens_x_hidden * 1


def test_sdpa_saves_no_score_matrix(trace) -> None:
    """Flash/efficient SDPA saves O(s) per layer; eager saves the s x s probabilities."""
    cfg = config("llama-2-7b", 1, vocab_size=1000)
    sizes = {}
    for attention in ("sdpa", "eager"):
        for seq in (256, 512):
            job = JobSpec(batch=1, seq=seq, precision="amp-bf16", attention=attention)
            sizes[attention, seq] = traced(trace, cfg, job).activation_bytes
    assert sizes["sdpa", 512] / sizes["sdpa", 256] == pytest.approx(2.0, rel=0.01)
    assert sizes["eager", 512] / sizes["eager", 256] > 2.2
    # What eager adds at 512 tokens: fp32 probabilities + their bf16 copy for P @ V (less
    # what only SDPA keeps, the fp32 log-sum-exp rows: small).
    heads = cfg["num_attention_heads"]
    scores = heads * 512 * 512 * (4 + 2)
    assert sizes["eager", 512] - sizes["sdpa", 512] == pytest.approx(scores, rel=0.01)


def test_precision_policy(trace) -> None:
    """amp-bf16: fp32 master weights; each matmul weight cast to bf16 once per forward (the
    cast cache), counted apart from activations. bf16: weights stored in bf16, no casts."""
    cfg = config("llama-2-7b", 1, vocab_size=1000)
    amp = traced(trace, cfg, AMP_SDPA)
    pure = traced(trace, cfg, replace(AMP_SDPA, precision="bf16"))
    fp32 = traced(trace, cfg, replace(AMP_SDPA, precision="fp32"))
    matmul = sum(w.numel for w in amp.weights if w.matmul)
    assert amp.parameter_bytes == 4 * amp.parameters
    assert pure.parameter_bytes == 2 * pure.parameters
    assert amp.weight_cast_bytes == 2 * matmul
    assert pure.weight_cast_bytes == fp32.weight_cast_bytes == 0
    # The fp32 residual stream and norms keep autocast's activations above pure bf16's.
    assert pure.activation_bytes < amp.activation_bytes < fp32.activation_bytes


def test_cuda_autocast_op_lists(trace) -> None:
    import torch

    from orchestrator.sizing.trace.autocast import cuda_autocast

    f = torch.nn.functional
    x = torch.empty(4, 8, device="meta")
    w = torch.nn.Parameter(torch.empty(8, 8, device="meta"))
    mode = cuda_autocast(torch, torch.bfloat16)
    with mode:
        y = f.linear(x, w)
        again = f.linear(x, w)
        probs = f.softmax(y, dim=-1)
        norm = f.layer_norm(y, (8,))
        summed = y + y
    assert y.dtype == again.dtype == summed.dtype == torch.bfloat16
    assert probs.dtype == norm.dtype == torch.float32
    assert len(mode.cast_keys) == 1  # the weight was cast once and cached


def test_moe_experts_traced_with_balanced_routing(trace) -> None:
    job = JobSpec(batch=2, seq=64, precision="bf16", attention="sdpa")
    top2 = traced(trace, MOE, job)
    top4 = traced(trace, {**MOE, "num_experts_per_tok": 4}, job)
    h, i, e, layers, vocab = 256, 512, 4, 2, 1000
    attention = h * h * 2 + 2 * h * 64  # q, o: 8 heads x 32; k, v: 2 kv heads x 32
    per_layer = attention + h * e + e * 3 * h * i + 2 * h  # router, experts, two norms
    assert top2.parameters == 2 * vocab * h + layers * per_layer + h
    # Routed rows per expert are tokens x top-k / experts: twice the top-k, about twice the
    # expert-side activations (attention and the head stay the same).
    tokens = job.batch * job.seq
    expert_rows = 2 * tokens * i * 2  # the 2 more rows per token: gate, up at bf16
    assert top4.activation_bytes - top2.activation_bytes >= layers * expert_rows


def test_unknown_family_falls_back_to_the_trace(
    trace, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(STABLELM))
    with _no_exit():
        main(["estimate", "--hf-config", str(path), "--batch", "1", "--seq", "256", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["activations_source"] == "trace"
    tokens = 256
    # At least the lm head's fp32 log-probabilities for every token.
    assert out["memory"]["activations_bytes"] > tokens * STABLELM["vocab_size"] * 4
    result = traced(trace, STABLELM, JobSpec(batch=1, seq=256))
    assert out["memory"]["activations_bytes"] == result.activation_bytes
    assert out["parameters"] == result.parameters


def test_trace_on_request_for_a_known_family(trace, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["estimate", "--model", "bert-large", "--batch", "2", "--seq", "128", "--json"]
    with _no_exit():
        main(args)
    analytic = json.loads(capsys.readouterr().out)
    with _no_exit():
        main([*args, "--trace"])
    trace_out = json.loads(capsys.readouterr().out)
    assert (analytic["activations_source"], trace_out["activations_source"]) == (
        "analytic",
        "trace",
    )
    assert trace_out["parameters"] == analytic["parameters"]
    a, t = (d["memory"]["activations_bytes"] for d in (analytic, trace_out))
    assert a != t and abs(a / t - 1) < 0.05


def test_plan_traces_on_request_and_for_unknown_families(
    trace, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(STABLELM))
    plans = {}
    for label, args in (
        ("analytic", ["--model", "bert-large"]),
        ("traced", ["--model", "bert-large", "--trace"]),
        ("unknown", ["--hf-config", str(path)]),
    ):
        with _no_exit():
            main(["plan", *args, "--batch", "2", "--seq", "256", "--json"])
        plans[label] = json.loads(capsys.readouterr().out)
    assert plans["traced"]["job"]["trace"] is True
    assert plans["analytic"]["job"]["trace"] is False
    assert plans["unknown"]["choice"]["instance_type"]
    activations = {k: v["estimate"]["memory"]["activations_bytes"] for k, v in plans.items()}
    assert activations["traced"] != activations["analytic"]
    assert abs(activations["traced"] / activations["analytic"] - 1) < 0.05


def test_trace_needs_a_config(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["estimate", "--params-m", "350", "--trace"])
    assert exit_.value.code == 2
    assert "--trace needs a model config" in capsys.readouterr().err


def test_checkpointing_keeps_layer_inputs_plus_one_layer(trace) -> None:
    cfg = config("llama-2-7b", 4, vocab_size=1000)
    plain = traced(trace, cfg, AMP_SDPA)
    checkpointed = traced(trace, cfg, replace(AMP_SDPA, grad_checkpointing=True))
    assert checkpointed.activation_bytes < plain.activation_bytes / 2
    job = replace(AMP_SDPA, grad_checkpointing=True)
    analytic = activation_bytes(from_hf_config(cfg), job)
    assert abs(analytic / checkpointed.activation_bytes - 1) < 0.1


class _no_exit:  # noqa: N801 - a context manager used like a function
    """main() exits only on errors: fail with its stderr if it does."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, value, _tb) -> bool:  # noqa: ANN001
        if kind is SystemExit:
            raise AssertionError(f"orch exited {value.code}")
        return False
