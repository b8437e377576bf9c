"""Memory estimator behaviour: sharding, checkpointing, attention, LoRA, precision, optimizers."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.sizing.architectures import from_hf_config
from orchestrator.sizing.job import OPTIMIZERS, PRECISIONS, JobSpec
from orchestrator.sizing.memory import activation_bytes, estimate_memory

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "hf_configs"


def arch(name: str, **changes):
    config = json.loads((FIXTURES / f"{name}.json").read_text())
    config.update(changes)
    return from_hf_config(config, name)


LLAMA = arch("llama-2-7b")
JOB = JobSpec(batch=4, seq=2048, precision="amp-bf16")


def test_total_is_the_largest_phase_plus_overhead() -> None:
    memory = estimate_memory(LLAMA, JOB)
    parts = memory.to_dict()["memory"]
    sizes = {k: v for k, v in parts.items() if k.endswith("_bytes")}
    assert all(isinstance(v, int) and v > 0 for v in sizes.values())
    assert parts["peak_bytes"] == max(parts["phases"].values())
    assert parts["phases"][parts["peak_phase"]] == parts["peak_bytes"]
    assert parts["total_bytes"] == parts["peak_bytes"] + parts["overhead_bytes"]
    # Never the sum of every kind of tensor: weights, gradients, states and activations do not
    # all live at once (gradients arrive as activations are freed).
    summed = sum(
        parts[k]
        for k in ("parameters_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes")
    )
    assert parts["peak_bytes"] < summed
    assert memory.parameters == LLAMA.parameters == memory.trainable_parameters


def test_zero3_parameters_per_gpu_shrink_with_gpus() -> None:
    sizes = [estimate_memory(LLAMA, replace(JOB, zero=3, gpus=n)) for n in (1, 2, 4, 8)]
    params = [m.parameters_bytes for m in sizes]
    assert params == sorted(params, reverse=True) and len(set(params)) == 4
    assert params[0] == pytest.approx(4 * params[2], rel=0.01)
    totals = [m.total_bytes for m in sizes]
    assert totals[-1] < totals[0]


def test_zero_stages_shard_states_then_gradients_then_weights() -> None:
    base = estimate_memory(LLAMA, replace(JOB, gpus=8, zero=0))
    z1 = estimate_memory(LLAMA, replace(JOB, gpus=8, zero=1))
    z2 = estimate_memory(LLAMA, replace(JOB, gpus=8, zero=2))
    z3 = estimate_memory(LLAMA, replace(JOB, gpus=8, zero=3))
    assert z1.optimizer_bytes == pytest.approx(base.optimizer_bytes / 8, rel=1e-6)
    assert z1.gradients_bytes == base.gradients_bytes
    assert z2.gradients_bytes == pytest.approx(base.gradients_bytes / 8, rel=1e-6)
    assert z2.parameters_bytes == z1.parameters_bytes
    assert z3.parameters_bytes < z2.parameters_bytes / 4
    assert base.total_bytes > z1.total_bytes >= z2.total_bytes > z3.total_bytes
    # Sharded gradients shrink the optimizer step; they never coexist with the loss peak.
    assert z2.phases["optimizer"] < z1.phases["optimizer"]


def test_gradient_checkpointing_reduces_activations() -> None:
    for name in ("llama-2-7b", "bert-large-uncased", "t5-small", "vit-base-patch16-224"):
        model = arch(name)
        job = JobSpec(batch=8, seq=512)
        full = activation_bytes(model, job)
        ckpt = activation_bytes(model, replace(job, grad_checkpointing=True))
        assert ckpt < full / 2, name


def test_sdpa_stores_less_than_eager_at_long_sequences() -> None:
    job = replace(JOB, seq=4096)
    eager = activation_bytes(LLAMA, replace(job, attention="eager"))
    sdpa = activation_bytes(LLAMA, replace(job, attention="sdpa"))
    assert sdpa < eager
    # Eager keeps the score matrices: quadratic in the sequence length.
    short = replace(job, seq=1024, attention="eager")
    long = replace(job, seq=2048, attention="eager")
    ratio = activation_bytes(LLAMA, long) / activation_bytes(LLAMA, short)
    assert ratio > 2.3


def test_sdpa_activations_are_linear_in_batch_and_sequence() -> None:
    one = activation_bytes(LLAMA, replace(JOB, batch=1, seq=1024))
    assert activation_bytes(LLAMA, replace(JOB, batch=4, seq=1024)) == pytest.approx(4 * one, 0.01)
    assert activation_bytes(LLAMA, replace(JOB, batch=1, seq=4096)) == pytest.approx(4 * one, 0.01)


def test_lora_removes_base_gradients_and_optimizer_states() -> None:
    full = estimate_memory(LLAMA, JOB)
    lora = estimate_memory(LLAMA, replace(JOB, lora_rank=16))
    # q and v adapters: 32 layers x 16 x (4096 + 4096) each.
    assert lora.trainable_parameters == 32 * 2 * 16 * (4096 + 4096)
    assert lora.parameters == full.parameters
    assert lora.gradients_bytes == lora.trainable_parameters * 4
    assert lora.optimizer_bytes == lora.trainable_parameters * 8
    assert lora.gradients_bytes < full.gradients_bytes / 500
    # Frozen linears keep no inputs, but norms, activations and attention still save theirs.
    assert 0 < lora.activations_bytes < full.activations_bytes
    assert lora.parameters_bytes < full.parameters_bytes  # frozen base held in bf16


def test_precision_sets_parameter_and_activation_bytes() -> None:
    fp32 = estimate_memory(LLAMA, replace(JOB, precision="fp32"))
    bf16 = estimate_memory(LLAMA, replace(JOB, precision="bf16"))
    amp = estimate_memory(LLAMA, replace(JOB, precision="amp-bf16"))
    assert fp32.parameters_bytes == 4 * LLAMA.parameters
    assert bf16.parameters_bytes == 2 * LLAMA.parameters
    # Autocast keeps fp32 weights plus a cached half copy of every matmul weight.
    assert amp.parameters_bytes == 4 * LLAMA.parameters + 2 * LLAMA.matmul_parameters
    assert amp.gradients_bytes == fp32.gradients_bytes == 2 * bf16.gradients_bytes
    assert bf16.activations_bytes < amp.activations_bytes < fp32.activations_bytes


def test_gqa_stores_smaller_keys_and_values() -> None:
    gqa = arch("mistral-7b")
    mha = arch("mistral-7b", num_key_value_heads=32)
    job = replace(JOB, attention="sdpa")
    assert activation_bytes(gqa, job) < activation_bytes(mha, job)


@pytest.mark.parametrize(
    ("optimizer", "bytes_per_param"),
    [("adamw", 8), ("adam", 8), ("sgd", 0), ("sgd-momentum", 4)],
)
def test_optimizer_state_bytes_per_parameter(optimizer: str, bytes_per_param: int) -> None:
    memory = estimate_memory(LLAMA, replace(JOB, optimizer=optimizer))
    assert memory.optimizer_bytes == bytes_per_param * LLAMA.parameters


def test_factored_and_8bit_optimizers_are_small() -> None:
    adamw = estimate_memory(LLAMA, replace(JOB, optimizer="adamw")).optimizer_bytes
    adafactor = estimate_memory(LLAMA, replace(JOB, optimizer="adafactor")).optimizer_bytes
    eight = estimate_memory(LLAMA, replace(JOB, optimizer="adamw-8bit")).optimizer_bytes
    assert adafactor < adamw / 100  # row + column statistics per matrix
    assert eight == pytest.approx(adamw / 4, rel=0.02)  # two 1-byte states (+ block scales)


def test_pure_bf16_keeps_optimizer_states_in_bf16() -> None:
    fp32_states = estimate_memory(LLAMA, replace(JOB, precision="fp32")).optimizer_bytes
    bf16_states = estimate_memory(LLAMA, replace(JOB, precision="bf16")).optimizer_bytes
    assert bf16_states * 2 == fp32_states


def test_dropout_masks_cost_activation_memory() -> None:
    with_dropout = arch("roberta-base")
    without = arch("roberta-base", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    job = JobSpec(batch=8, seq=512, attention="eager")
    assert activation_bytes(with_dropout, job) > activation_bytes(without, job)


def test_lm_logits_are_counted_in_fp32() -> None:
    gpt2 = arch("gpt2")
    small_vocab = arch("gpt2", vocab_size=1000)
    job = JobSpec(batch=2, seq=256, precision="amp-bf16")
    difference = activation_bytes(gpt2, job) - activation_bytes(small_vocab, job)
    assert difference == 2 * 256 * (50257 - 1000) * 4


def test_deberta_relative_attention_stores_more_than_absolute() -> None:
    job = JobSpec(batch=8, seq=512, attention="eager")
    roberta = arch("roberta-base", vocab_size=128100)
    deberta = arch("deberta-v3-base")
    gap = activation_bytes(deberta, job) - activation_bytes(roberta, job)
    # At least the c2p and p2c score terms: 2 x batch x heads x seq x 512 relative positions
    # per layer, in bf16 under autocast.
    assert gap >= 12 * 2 * 8 * 12 * 512 * 512 * 2


def test_activations_do_not_come_from_the_parameter_count() -> None:
    # Same shapes, 6x the vocabulary: parameters grow a lot, per-layer activations do not.
    job = JobSpec(batch=8, seq=128, precision="fp32")
    small = arch("bert-large-uncased")
    wide = arch("bert-large-uncased", vocab_size=6 * 30522)
    assert wide.parameters > 1.4 * small.parameters
    growth = activation_bytes(wide, job) - activation_bytes(small, job)
    assert growth == 8 * 128 * 5 * 30522 * 4  # only the logits grow


def test_vision_models_follow_image_size() -> None:
    vit = arch("vit-base-patch16-224")
    resnet = arch("resnet-50")
    for model in (vit, resnet):
        small = activation_bytes(model, JobSpec(batch=8, image_size=224))
        large = activation_bytes(model, JobSpec(batch=8, image_size=448))
        assert large > 3.5 * small


def test_every_precision_and_optimizer_gives_a_positive_total() -> None:
    for precision in PRECISIONS:
        for optimizer in OPTIMIZERS:
            job = JobSpec(batch=2, seq=128, precision=precision, optimizer=optimizer)
            for name in ("t5-small", "resnet-50", "deberta-v3-base"):
                memory = estimate_memory(arch(name), job)
                assert memory.total_bytes > memory.parameters_bytes > 0


def test_multi_gpu_without_zero_pays_for_ddp_buckets() -> None:
    one = estimate_memory(LLAMA, JOB)
    two = estimate_memory(LLAMA, replace(JOB, gpus=2))
    assert two.overhead_bytes - one.overhead_bytes >= one.gradients_bytes
