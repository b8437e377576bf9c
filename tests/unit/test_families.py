"""The families added for the models people fine-tune now (issue 10): parameter counts of the
catalog's configs against the figures their model cards publish, and the structure that the
memory and FLOPs estimates read (experts, soft-capping, q/k norms, multi-query attention)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.catalog.loader import find_model
from orchestrator.sizing.architectures import ConfigError, from_hf_config
from orchestrator.sizing.flops import training_flops_per_sample
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.memory import activation_bytes

# Model-card (or Hub page) parameter counts, as published (rounded as published).
PUBLISHED = {
    "gemma-7b": ("gemma", 8.54e9),  # Hub page: 8.54B params
    "gemma-2-9b": ("gemma2", 9.24e9),  # Hub page: 9.24B params
    "gemma-3-1b": ("gemma3_text", 1.0e9),  # model card: 1B
    "phi-3-mini-4k": ("phi3", 3.8e9),  # model card: 3.8B parameters
    "qwen3-8b": ("qwen3", 8.2e9),  # model card: Number of Parameters 8.2B
    "olmo-2-7b": ("olmo2", 7.3e9),  # Hub page: 7.3B params
    "falcon-7b": ("falcon", 6.92e9),  # Hub page: 6.92B params
    "bloom-560m": ("bloom", 559e6),  # model card: 559M parameters
    "mixtral-8x7b": ("mixtral", 46.7e9),  # Mistral AI: 46.7B total parameters
    "qwen1.5-moe-a2.7b": ("qwen2_moe", 14.3e9),  # model card: 14.3B total
    "qwen3-30b-a3b": ("qwen3_moe", 30.5e9),  # model card: 30.5B total, 3.3B activated
    "bart-large": ("bart", 406e6),  # Hub page: 406M params
    "mbart-large-50": ("mbart", 611e6),  # Hub page: 611M params
    "xlm-roberta-large": ("xlm-roberta", 560e6),  # model card: 560M parameters
    "modernbert-base": ("modernbert", 149e6),  # model card: 149M parameters
    "whisper-small": ("whisper", 244e6),  # model card table: small, 244 M
    "convnext-base": ("convnext", 88.6e6),  # Hub page: 88.6M params (paper: 89M)
    "clip-vit-base-patch32": ("clip", 151.3e6),  # Hub page: 151M params
    "siglip-base-patch16-224": ("siglip", 203e6),  # Hub page: 203M params
    "swin-base": ("swin", 88e6),  # model card / paper: 88M parameters
    "deepseek-v3": ("deepseek_v3", 671e9),  # model card: 671B main model (+14B MTP, not built)
}


def config(name: str) -> dict:
    return dict(find_model(name).config)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_matches_the_model_card_within_one_percent(name: str) -> None:
    family, published = PUBLISHED[name]
    arch = from_hf_config(config(name), name)
    assert arch.family == family
    assert abs(arch.parameters / published - 1) < 0.01, arch.parameters
    assert find_model(name).parameters == pytest.approx(published, rel=0.005)


def test_every_expert_is_a_parameter_but_a_token_activates_top_k() -> None:
    mixtral = from_hf_config(config("mixtral-8x7b"))
    fewer = from_hf_config(dict(config("mixtral-8x7b"), num_local_experts=4))
    # Each of 32 layers loses 4 experts of 3 x 4096 x 14336 weights and 4 router rows.
    assert mixtral.parameters - fewer.parameters == 32 * 4 * (3 * 4096 * 14336 + 4096)
    job = JobSpec(batch=1, seq=512)
    # Activations follow the top-2 routing: only the router's softmax width changes.
    diff = activation_bytes(mixtral, job) - activation_bytes(fewer, job)
    assert 0 < diff == 32 * 512 * 4 * 4
    top4 = from_hf_config(dict(config("mixtral-8x7b"), num_experts_per_tok=4))
    assert activation_bytes(top4, job) > 1.5 * activation_bytes(mixtral, job)
    # FLOPs per token: about 6 x the active parameters (12.9B for Mixtral 8x7B).
    active = training_flops_per_sample(mixtral, JobSpec(batch=1, seq=1)) / 6
    assert active == pytest.approx(12.9e9, rel=0.03)


def test_qwen_moe_shared_expert_and_dense_layers() -> None:
    base = config("qwen1.5-moe-a2.7b")
    arch = from_hf_config(base)
    moe = arch.stacks[0].moe
    assert moe is not None and (moe.experts, moe.top_k, moe.layers) == (60, 4, 24)
    assert moe.shared_intermediate == 5632 and moe.shared_gate
    # Every second layer dense (decoder_sparse_step 2): 12 MoE layers, 12 dense MLPs of 5632.
    stepped = from_hf_config(dict(base, decoder_sparse_step=2))
    assert stepped.stacks[0].moe.layers == 12
    per_moe_layer = 60 * 3 * 2048 * 1408 + 60 * 2048 + 3 * 2048 * 5632 + 2048
    assert arch.parameters - stepped.parameters == 12 * (per_moe_layer - 3 * 2048 * 5632)
    with pytest.raises(ConfigError, match="experts per token"):
        from_hf_config(dict(base, num_experts_per_tok=61))


def test_gemma2_soft_capping_costs_activations_and_forces_eager() -> None:
    arch = from_hf_config(config("gemma-2-9b"))
    assert arch.stacks[0].attn_softcap and arch.head.softcap and not arch.sdpa
    assert arch.stacks[0].post_norms and arch.stacks[0].head_dim == 256
    uncapped = replace(
        arch,
        stacks=(replace(arch.stacks[0], attn_softcap=False),),
        head=replace(arch.head, softcap=False),
    )
    job = JobSpec(batch=1, seq=256, precision="fp32", attention="eager")
    extra = activation_bytes(arch, job) - activation_bytes(uncapped, job)
    # One tanh output per score (16 heads x 256 x 256, 42 layers) and per logit (256000).
    assert extra == 42 * 16 * 256 * 256 * 4 + 256 * 256000 * 4


def test_qk_norms_add_their_weights() -> None:
    qwen3 = from_hf_config(config("qwen3-8b"))
    assert qwen3.stacks[0].qk_norm == "head"
    as_llama = from_hf_config(dict(config("qwen3-8b"), model_type="llama"))
    assert qwen3.parameters - as_llama.parameters == 36 * 2 * 128
    olmo = from_hf_config(config("olmo-2-7b"))
    as_llama = from_hf_config(dict(config("olmo-2-7b"), model_type="llama"))
    assert olmo.parameters - as_llama.parameters == 32 * 2 * 4096  # over the whole width


def test_falcon_multi_query_and_bloom_alibi() -> None:
    falcon = from_hf_config(config("falcon-7b"))
    st = falcon.stacks[0]
    assert (st.heads, st.kv_heads, st.head_dim) == (71, 1, 64) and st.single_norm
    grouped = from_hf_config(
        dict(config("falcon-7b"), new_decoder_architecture=True, num_kv_heads=71)
    )
    assert grouped.stacks[0].kv_heads == 71 and not grouped.stacks[0].single_norm
    bloom = from_hf_config(config("bloom-560m"))
    assert bloom.max_positions is None and not bloom.absolute_positions  # ALiBi
    assert bloom.embedding is not None and bloom.embedding.norm
    with pytest.raises(ConfigError, match="alibi"):
        from_hf_config(dict(config("falcon-7b"), alibi=True))


def test_bart_is_post_ln_and_mbart_pre_ln_with_final_norms() -> None:
    bart = from_hf_config(config("bart-large"))
    mbart = from_hf_config(dict(config("bart-large"), model_type="mbart"))
    assert bart.kind == mbart.kind == "encoder-decoder" and bart.head.kind == "seq2seq-lm"
    assert not bart.stacks[0].prenorm and mbart.stacks[0].prenorm and mbart.stacks[1].final_norm
    assert bart.stacks[1].cross_attention and not bart.stacks[0].cross_attention
    # mBART adds one LayerNorm (weight and bias) at the end of each stack.
    assert mbart.parameters - bart.parameters == 2 * 2 * 1024
    # Positions are learned (1024 + an offset of 2 rows, per stack): longer inputs cannot run.
    assert bart.absolute_positions and bart.max_positions == 1024


def test_modernbert_geglu_and_bias_free_norms() -> None:
    base = config("modernbert-base")
    arch = from_hf_config(base)
    st = arch.stacks[0]
    assert (
        st.gated and st.fused_qkv and st.prenorm and st.final_norm and not arch.absolute_positions
    )
    # GeGLU: Wi makes input and gate (2 x 1152), Wo reads 1152; norms gain a bias with norm_bias.
    with_bias = from_hf_config(dict(base, norm_bias=True))
    assert with_bias.parameters - arch.parameters == (1 + 2 * 22 - 1 + 1 + 1) * 768
    assert arch.head.kind == "masked-lm" and arch.head.transform == 768


def test_whisper_encoder_length_is_fixed_by_the_audio_window() -> None:
    arch = from_hf_config(config("whisper-small"))
    assert (arch.source_length, arch.mel_bins) == (1500, 80)
    short, long = JobSpec(batch=1, seq=64, target_seq=64), JobSpec(batch=1, seq=512, target_seq=64)
    # The encoder always sees 1500 frames: `seq` does not change what it keeps.
    assert activation_bytes(arch, short) == activation_bytes(arch, long)
    longer_text = JobSpec(batch=1, seq=64, target_seq=256)
    assert activation_bytes(arch, longer_text) > activation_bytes(arch, short)


def test_convnext_activations_and_flops_scale_with_the_image() -> None:
    arch = from_hf_config(config("convnext-base"))
    assert arch.kind == "cnn" and arch.convnext is not None
    small, large = JobSpec(batch=1, image_size=224), JobSpec(batch=1, image_size=448)
    # Every saved tensor is per pixel (up to the pooled head): 4x the pixels, ~4x the bytes.
    ratio = activation_bytes(arch, large) / activation_bytes(arch, small)
    assert 3.9 < ratio < 4.0
    # ConvNeXt-B: 15.4 GFLOPs (multiply-adds counted twice: 2 x 15.4) per 224px image forward.
    forward = training_flops_per_sample(arch, small) / 3
    assert forward == pytest.approx(2 * 15.4e9, rel=0.03)


def test_clip_has_two_towers_with_their_own_lengths() -> None:
    arch = from_hf_config(config("clip-vit-base-patch32"))
    vision, text = arch.stacks
    assert arch.kind == "dual-encoder" and text.causal and not vision.causal
    assert (vision.hidden, text.hidden, arch.vision_tokens(224)) == (768, 512, 50)
    assert text.activation == "quick_gelu"
    short, full = JobSpec(batch=4, seq=16), JobSpec(batch=4, seq=77)
    # Only the text tower grows with the caption length; FLOPs count both towers.
    assert activation_bytes(arch, full) > activation_bytes(arch, short)
    vision_only = training_flops_per_sample(arch, JobSpec(batch=1, seq=1))
    assert vision_only == pytest.approx(3 * 2 * 87.5e6 * 50, rel=0.1)


def test_siglip_has_no_class_token_and_pools_with_attention() -> None:
    arch = from_hf_config(config("siglip-base-patch16-224"))
    vision, text = arch.stacks
    assert arch.vision_tokens(224) == 196 and not text.causal and vision.final_norm
    no_head = from_hf_config(dict(config("siglip-base-patch16-224"), model_type="clip"))
    assert no_head.vision_tokens(224) == 197  # CLIP's class token


def test_swin_attends_within_windows() -> None:
    arch = from_hf_config(config("swin-base"))
    assert [st.hidden for st in arch.stacks] == [128, 256, 512, 1024]
    assert [st.window for st in arch.stacks] == [49] * 4
    wide = from_hf_config(dict(config("swin-base"), window_size=14))
    job = JobSpec(batch=1, image_size=224, attention="eager")
    # Bigger windows: more scores per token (and a larger bias table per block).
    assert activation_bytes(wide, job) > activation_bytes(arch, job)
    assert wide.parameters - arch.parameters == sum(
        ((2 * min(14, r) - 1) ** 2 - 13**2) * h * d
        for r, h, d in zip((56, 28, 14, 7), (4, 8, 16, 32), (2, 2, 18, 2), strict=True)
    )
    # Swin-B: 15.4 GFLOPs (multiply-adds) per 224 px image forward.
    forward = training_flops_per_sample(arch, JobSpec(batch=1, image_size=224)) / 3
    assert forward == pytest.approx(2 * 15.4e9, rel=0.05)


def test_deepseek_v2_latent_attention_and_shared_experts() -> None:
    path = (
        Path(__file__).resolve().parent.parent / "fixtures" / "hf_configs" / "deepseek-v2-lite.json"
    )
    base = json.loads(path.read_text())
    arch = from_hf_config(base)
    # Model card: 15.7B total parameters, 2.4B activated per token.
    assert abs(arch.parameters / 15.7e9 - 1) < 0.01
    active = training_flops_per_sample(arch, JobSpec(batch=1, seq=1)) / 6
    assert active == pytest.approx(2.4e9, rel=0.05)
    st = arch.stacks[0]
    assert st.mla is not None and st.mla.q_rank == 0 and st.head_dim == 192
    assert st.moe is not None and st.moe.layers == 26 and not st.moe.shared_gate
    # A q LoRA rank (DeepSeek-V2 full: 1536) replaces q_proj by q_a, its norm and q_b.
    q_lora = from_hf_config(dict(base, q_lora_rank=1536))
    per_layer = 2048 * 1536 + 1536 + 1536 * 16 * 192 - 2048 * 16 * 192
    assert q_lora.parameters - arch.parameters == 27 * per_layer


def test_deepseek_v3_activates_37b_of_671b() -> None:
    arch = from_hf_config(config("deepseek-v3"))
    st = arch.stacks[0]
    assert st.mla is not None and st.mla.q_rank == 1536
    assert st.moe is not None and (st.moe.experts, st.moe.top_k, st.moe.layers) == (256, 8, 58)
    active = training_flops_per_sample(arch, JobSpec(batch=1, seq=1)) / 6
    assert active == pytest.approx(37e9, rel=0.03)  # model card: 37B activated per token
