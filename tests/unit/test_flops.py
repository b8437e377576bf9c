"""Training FLOPs per sample: the 6N rule, attention, checkpointing, LoRA, published CNN/ViT."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.sizing.architectures import from_hf_config
from orchestrator.sizing.flops import resnet_forward_flops, training_flops_per_sample
from orchestrator.sizing.job import JobSpec

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "hf_configs"


def arch(name: str):
    return from_hf_config(json.loads((FIXTURES / f"{name}.json").read_text()), name)


LLAMA = arch("llama-2-7b")


def test_decoder_is_about_six_n_per_token_at_short_sequences() -> None:
    job = JobSpec(batch=1, seq=128)
    flops = training_flops_per_sample(LLAMA, job)
    six_n = 6 * LLAMA.matmul_parameters * 128
    assert six_n <= flops <= 1.05 * six_n


def test_attention_term_grows_quadratically() -> None:
    short = training_flops_per_sample(LLAMA, JobSpec(seq=2048, attention="eager"))
    long = training_flops_per_sample(LLAMA, JobSpec(seq=4096, attention="eager"))
    assert long > 2 * short  # linear part doubles, attention part quadruples
    # Eager: 12 L s^2 d on top of 6 N s (3 x forward of 4 s^2 d per layer).
    expected_attention = 3 * 32 * 4 * 4096**2 * 4096
    linear = 6 * LLAMA.matmul_parameters * 4096
    assert long == pytest.approx(linear + expected_attention, rel=0.01)


def test_causal_sdpa_skips_masked_blocks() -> None:
    eager = training_flops_per_sample(LLAMA, JobSpec(seq=4096, attention="eager"))
    sdpa = training_flops_per_sample(LLAMA, JobSpec(seq=4096, attention="sdpa"))
    assert sdpa < eager
    # Bidirectional encoders are not halved.
    bert = arch("bert-large-uncased")
    assert training_flops_per_sample(bert, JobSpec(attention="sdpa")) == (
        training_flops_per_sample(bert, JobSpec(attention="eager"))
    )


def test_checkpointing_adds_one_forward_of_the_layers() -> None:
    job = JobSpec(seq=512, attention="eager")
    plain = training_flops_per_sample(LLAMA, job)
    ckpt = training_flops_per_sample(LLAMA, replace(job, grad_checkpointing=True))
    assert 1.25 * plain < ckpt < 1.34 * plain  # ~4/3, less the LM head (not recomputed)


def test_lora_skips_weight_gradients_of_frozen_weights() -> None:
    job = JobSpec(seq=128)
    full = training_flops_per_sample(LLAMA, job)
    lora = training_flops_per_sample(LLAMA, replace(job, lora_rank=16))
    assert lora == pytest.approx(full * 2 / 3, rel=0.03)


def test_per_sample_flops_do_not_depend_on_batch() -> None:
    one = training_flops_per_sample(LLAMA, JobSpec(batch=1))
    assert training_flops_per_sample(LLAMA, JobSpec(batch=64)) == one


def test_resnet50_forward_matches_published_4_1_gmacs() -> None:
    # torchvision lists ResNet-50 at 4.09 GFLOPS counted as multiply-adds, i.e. 8.2e9 FLOPs.
    resnet = arch("resnet-50")
    forward = resnet_forward_flops(resnet.resnet, 224)
    assert forward == pytest.approx(2 * 4.09e9, rel=0.03)
    assert training_flops_per_sample(resnet, JobSpec(image_size=224)) == 3 * forward


def test_vit_b16_matches_published_17_6_gmacs() -> None:
    # torchvision lists ViT-B/16 at 17.56 GFLOPS (multiply-adds) at 224 px.
    vit = arch("vit-base-patch16-224")
    forward = training_flops_per_sample(vit, JobSpec(image_size=224)) / 3
    assert forward == pytest.approx(2 * 17.56e9, rel=0.03)


def test_encoder_decoder_counts_both_lengths() -> None:
    t5 = arch("t5-small")
    base = training_flops_per_sample(t5, JobSpec(seq=512, target_seq=128))
    longer_target = training_flops_per_sample(t5, JobSpec(seq=512, target_seq=256))
    longer_source = training_flops_per_sample(t5, JobSpec(seq=1024, target_seq=128))
    assert longer_target > base and longer_source > base
