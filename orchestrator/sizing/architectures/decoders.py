"""Decoder-only LMs: GPT-2, OPT, GPT-NeoX, the LLaMA-style families (incl. Gemma, Phi-3, Qwen,
OLMo-2, and the MoE and MLA variants), Falcon, BLOOM; and a GPT sized from a parameter count."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.sizing.architectures.config import (
    Dims,
    FamilyKeys,
    cfg_float,
    cfg_int,
    check_sizes,
    head_kind,
    num_labels,
    positive,
    read_dims,
)
from orchestrator.sizing.architectures.decoder_parts import MLA, MoE
from orchestrator.sizing.architectures.families import SDPA_FAMILIES
from orchestrator.sizing.architectures.shapes import (
    Architecture,
    ConfigError,
    Embedding,
    Head,
    Stack,
    WeightGroup,
    linear,
    norm,
)

# ------------------------------------------------------------------------ decoders

DECODER_KEYS = {
    "gpt2": FamilyKeys(
        hidden=("n_embd", "hidden_size"),
        layers=("n_layer", "num_hidden_layers"),
        heads=("n_head", "num_attention_heads"),
        intermediate=("n_inner",),
        intermediate_factor=4,
        positions=("n_positions", "max_position_embeddings"),
        positions_default=1024,
        activation=("activation_function",),
        activation_default="gelu_new",
        hidden_dropout=("resid_pdrop",),
        attn_dropout=("attn_pdrop",),
        dropout_default=0.1,
        tied_default=True,
    ),
    "opt": FamilyKeys(
        intermediate=("ffn_dim",),
        activation=("activation_function",),
        activation_default="relu",
        hidden_dropout=("dropout",),
        attn_dropout=("attention_dropout",),
        tied_default=True,
    ),
    "gpt_neox": FamilyKeys(hidden_dropout=("hidden_dropout",), attn_dropout=("attention_dropout",)),
    "llama": FamilyKeys(
        kv_heads=("num_key_value_heads", "num_kv_heads"),
        activation_default="silu",
        hidden_dropout=(),
        attn_dropout=("attention_dropout",),
    ),
}
for _family in ("mistral", "qwen2"):
    DECODER_KEYS[_family] = DECODER_KEYS["llama"]


@dataclass(slots=True)
class DecoderParts:
    """What a decoder family builder returns: weights, the per-family Stack fields, the
    token embedding, and whether positions are learned absolute embeddings."""

    weights: list[WeightGroup]
    stack: dict[str, Any]
    embedding: Embedding
    absolute: bool = False


def _gpt2_parts(cfg: dict[str, Any], d: Dims) -> DecoderParts:
    h, layers, inter = d.hidden, d.layers, d.intermediate
    weights = [WeightGroup("wte", (d.vocab, h)), WeightGroup("wpe", (d.positions, h))]
    weights += norm("ln_1", h, layers)
    weights += linear("c_attn", h, 3 * h, layers)
    weights += linear("attn.c_proj", h, h, layers)
    weights += norm("ln_2", h, layers)
    weights += linear("c_fc", h, inter, layers)
    weights += linear("mlp.c_proj", inter, h, layers)
    weights += norm("ln_f", h)
    stack = dict(
        norm="layernorm",
        gated=False,
        fused_qkv=True,
        attn_dropout=d.attn_dropout,
        hidden_dropout=d.hidden_dropout,
        lora_targets=((h, 3 * h),),  # PEFT's default for GPT-2: the fused c_attn
    )
    dropout = cfg_float(cfg, "embd_pdrop", default=0.1)
    return DecoderParts(weights, stack, Embedding(d.vocab, h, dropout=dropout), absolute=True)


def _opt_parts(cfg: dict[str, Any], d: Dims) -> DecoderParts:
    h, layers, inter = d.hidden, d.layers, d.intermediate
    bias = cfg.get("enable_bias", True)
    proj = cfg_int(cfg, "word_embed_proj_dim", default=h)
    weights = [WeightGroup("embed_tokens", (d.vocab, proj))]
    weights.append(WeightGroup("embed_positions", (d.positions + 2, h)))  # offset of 2
    if proj != h:
        weights += linear("project_in", proj, h, bias=False)
        weights += linear("project_out", h, proj, bias=False)
    weights += norm("self_attn_layer_norm", h, layers)
    weights += linear("qkvo", h, h, 4 * layers, bias=bias)
    weights += norm("final_layer_norm", h, layers)
    weights += linear("fc1", h, inter, layers, bias=bias)
    weights += linear("fc2", inter, h, layers, bias=bias)
    if cfg.get("do_layer_norm_before", True) and not cfg.get("_remove_final_layer_norm"):
        weights += norm("decoder.final_layer_norm", h)
    if not cfg.get("do_layer_norm_before", True):
        raise ConfigError("opt with do_layer_norm_before=false (opt-350m) is not supported")
    stack = dict(
        norm="layernorm",
        gated=False,
        attn_dropout=d.attn_dropout,
        hidden_dropout=cfg_float(cfg, "dropout", default=0.1),
        act_dropout=cfg_float(cfg, "activation_dropout"),
        lora_targets=((h, h), (h, h)),
    )
    emb = Embedding(d.vocab, proj, int_inputs=2, projected=proj != h)
    return DecoderParts(weights, stack, emb, absolute=True)


def _neox_parts(cfg: dict[str, Any], d: Dims) -> DecoderParts:
    h, layers, inter = d.hidden, d.layers, d.intermediate
    bias = cfg.get("attention_bias", True)
    weights = [WeightGroup("embed_in", (d.vocab, h))]
    weights += norm("input_layernorm", h, layers)
    weights += norm("post_attention_layernorm", h, layers)
    weights += linear("query_key_value", h, 3 * h, layers, bias=bias)
    weights += linear("attention.dense", h, h, layers, bias=bias)
    weights += linear("dense_h_to_4h", h, inter, layers)
    weights += linear("dense_4h_to_h", inter, h, layers)
    weights += norm("final_layer_norm", h)
    stack = dict(
        norm="layernorm",
        gated=False,
        fused_qkv=True,
        parallel_residual=bool(cfg.get("use_parallel_residual", True)),
        attn_dropout=d.attn_dropout,
        hidden_dropout=d.hidden_dropout,
        lora_targets=((h, 3 * h),),  # PEFT's default: the fused query_key_value
    )
    return DecoderParts(weights, stack, Embedding(d.vocab, h))


@dataclass(slots=True)
class LlamaTraits:
    """How a LLaMA-style family departs from LLaMA (all read from the HF modeling code)."""

    qkv_bias: bool = False  # q/k/v biases whatever `attention_bias` says (Qwen2)
    qk_norm: str = "none"  # see Stack.qk_norm
    post_norms: bool = False  # Gemma 2/3: four norms per layer
    # "mixtral" (num_local_experts) | "qwen" (Qwen2-MoE: shared expert) | "qwen3" (none) |
    # "deepseek" (routed + shared experts, first dense layers)
    moe: str = "none"
    fused: bool = False  # Phi-3: one qkv_proj and one gate_up_proj (same weights, fused)
    mla: bool = False  # DeepSeek-V2: multi-head latent attention


LLAMA_TRAITS = {
    "llama": LlamaTraits(),
    "mistral": LlamaTraits(),
    "qwen2": LlamaTraits(qkv_bias=True),
    "qwen3": LlamaTraits(qk_norm="head"),
    "olmo2": LlamaTraits(qk_norm="full"),
    "gemma": LlamaTraits(),
    "gemma2": LlamaTraits(post_norms=True),
    "gemma3_text": LlamaTraits(qk_norm="head", post_norms=True),
    "phi3": LlamaTraits(fused=True),
    "mixtral": LlamaTraits(moe="mixtral"),
    "qwen2_moe": LlamaTraits(qkv_bias=True, moe="qwen"),
    "qwen3_moe": LlamaTraits(qk_norm="head", moe="qwen3"),
    "deepseek_v2": LlamaTraits(moe="deepseek", mla=True),
    "deepseek_v3": LlamaTraits(moe="deepseek", mla=True),  # sigmoid router: same shapes
}
_LLAMA = FamilyKeys(
    kv_heads=("num_key_value_heads", "num_kv_heads"),
    activation_default="silu",
    hidden_dropout=(),
    attn_dropout=("attention_dropout",),
)
_GEMMA = replace(
    _LLAMA,
    activation=("hidden_activation", "hidden_act"),
    activation_default="gelu_pytorch_tanh",
    positions_default=8192,
    tied_default=True,
)
for _family in LLAMA_TRAITS:
    DECODER_KEYS[_family] = _GEMMA if _family.startswith("gemma") else _LLAMA


# Experts per token under every spelling transformers' configs use (attribute_maps:
# HunYuan-MoE and LongCat store `moe_topk`, Kimi maps `num_experts_per_token`). Never `top_k`:
# configs written by transformers 4.x carry the sampling parameter `top_k` (50 by default).
# No default: transformers' own differ by family (Mixtral 2, Qwen2-MoE 4, Qwen3-MoE 8) and
# DeepseekV2Config's is None.
TOP_K_KEYS = ("num_experts_per_tok", "num_experts_per_token", "moe_topk")


def _moe_weights(cfg: dict[str, Any], d: Dims, kind: str) -> tuple[list[WeightGroup], MoE]:
    """Expert weights as transformers stores them (one 3-D gate_up and down tensor per layer),
    the router, the shared expert; and the layers that stay dense."""
    h = d.hidden
    if kind == "mixtral":
        # transformers 4.x/5.x spell the expert count either way (attribute_map); a config
        # without it is refused (ConfigError names the keys), never given a default.
        experts = cfg_int(cfg, "num_local_experts", "num_experts")
        width, shared, sparse_layers = d.intermediate, 0, d.layers
    elif kind == "deepseek":  # shared experts are one gated MLP of n_shared x the width
        experts = cfg_int(cfg, "n_routed_experts", "num_experts", "num_local_experts")
        width = cfg_int(cfg, "moe_intermediate_size")
        # No default for either: DeepSeek-V2 and V3 differ (transformers 5's default configs,
        # tests/fixtures/hf_configs_v5: 2 / 1 shared experts, 0 / 1 leading dense layers).
        shared = width * cfg_int(cfg, "n_shared_experts", "num_shared_experts")
        first = cfg_int(cfg, "first_k_dense_replace")
        freq = cfg_int(cfg, "moe_layer_freq", default=1) or 1
        sparse_layers = sum(1 for i in range(d.layers) if i >= first and i % freq == 0)
    else:
        experts = cfg_int(cfg, "num_experts", "num_local_experts")
        width = cfg_int(cfg, "moe_intermediate_size")
        # Qwen2-MoE always builds its shared expert (transformers' default width 5632): a
        # config without the width is refused, not sized without it. Qwen3-MoE has none.
        shared = cfg_int(cfg, "shared_expert_intermediate_size") if kind == "qwen" else 0
        step = cfg_int(cfg, "decoder_sparse_step", default=1) or 1
        dense_only = set(cfg.get("mlp_only_layers") or [])
        sparse_layers = sum(
            1 for i in range(d.layers) if i not in dense_only and experts and (i + 1) % step == 0
        )
    top_k = positive("num_experts_per_tok", cfg_int(cfg, *TOP_K_KEYS))
    if experts < top_k:
        raise ConfigError(f"{top_k} experts per token but only {experts} experts")
    n = sparse_layers
    weights = [WeightGroup("experts.gate_up_proj", (experts, 2 * width, h), n, matmul=True)]
    weights.append(WeightGroup("experts.down_proj", (experts, h, width), n, matmul=True))
    weights.append(WeightGroup("router", (experts, h), n, matmul=True))
    gate = kind == "qwen"  # Qwen2-MoE gates its shared expert with sigmoid(linear)
    if shared:
        weights += linear("shared_expert.gate_up_proj", h, shared, 2 * n, bias=False)
        weights += linear("shared_expert.down_proj", shared, h, n, bias=False)
        if gate:
            weights += linear("shared_expert_gate", h, 1, n, bias=False)
    dense = d.layers - n
    if dense:
        weights += linear("mlp.gate_up_proj", h, d.intermediate, 2 * dense, bias=False)
        weights += linear("mlp.down_proj", d.intermediate, h, dense, bias=False)
    return weights, MoE(experts, top_k, width, n, shared, shared_gate=bool(shared) and gate)


def _mla_weights(cfg: dict[str, Any], d: Dims) -> tuple[list[WeightGroup], MLA]:
    """DeepSeek-V2 attention weights: q (plain or via q_a/q_b with a norm), the latent
    kv_a projection (+ the shared rotary key), its norm, kv_b to per-head keys and values, o."""
    h, layers, heads = d.hidden, d.layers, d.heads
    mla = MLA(
        # Absent means transformers' default (1536); null (DeepSeek-V2-Lite) means none.
        q_rank=0
        if cfg.get("q_lora_rank", 1536) is None
        else cfg_int(cfg, "q_lora_rank", default=1536),
        kv_rank=positive("kv_lora_rank", cfg_int(cfg, "kv_lora_rank", default=512)),
        nope=cfg_int(cfg, "qk_nope_head_dim", default=128),
        rope=positive("qk_rope_head_dim", cfg_int(cfg, "qk_rope_head_dim", default=64)),
        v=positive("v_head_dim", cfg_int(cfg, "v_head_dim", default=128)),
    )
    bias = bool(cfg.get("attention_bias", False))
    qk = mla.nope + mla.rope
    if mla.q_rank:
        weights = linear("q_a_proj", h, mla.q_rank, layers, bias=bias)
        weights += norm("q_a_layernorm", mla.q_rank, layers, bias=False)
        weights += linear("q_b_proj", mla.q_rank, heads * qk, layers, bias=False)
    else:
        weights = linear("q_proj", h, heads * qk, layers, bias=False)
    weights += linear("kv_a_proj_with_mqa", h, mla.kv_rank + mla.rope, layers, bias=bias)
    weights += norm("kv_a_layernorm", mla.kv_rank, layers, bias=False)
    weights += linear("kv_b_proj", mla.kv_rank, heads * (mla.nope + mla.v), layers, bias=False)
    weights += linear("o_proj", heads * mla.v, h, layers, bias=bias)
    return weights, mla


def _llama_parts(cfg: dict[str, Any], d: Dims, family: str) -> DecoderParts:
    """LLaMA and its relatives: RMSNorm, rotary positions, GQA, a SwiGLU/GeGLU MLP; with the
    departures of LLAMA_TRAITS (q/k norms, sandwich norms, mixture-of-experts MLPs)."""
    traits = LLAMA_TRAITS[family]
    h, layers, inter = d.hidden, d.layers, d.intermediate
    q, kv = d.heads * d.head_dim, d.kv_heads * d.head_dim
    if d.kv_heads <= 0 or d.heads % d.kv_heads:
        raise ConfigError(f"{d.heads} attention heads are not a multiple of {d.kv_heads} kv heads")
    qkv_bias = traits.qkv_bias or bool(cfg.get("attention_bias", False))
    mlp_bias = bool(cfg.get("mlp_bias", False))
    weights = [WeightGroup("embed_tokens", (d.vocab, h))]
    mla = None
    if traits.mla:
        mla_weights, mla = _mla_weights(cfg, d)
        weights += mla_weights
        q = kv = d.heads * (mla.nope + mla.rope)
    else:
        weights += linear("q_proj", h, q, layers, bias=qkv_bias)
        weights += linear("k_proj", h, kv, layers, bias=qkv_bias)
        weights += linear("v_proj", h, kv, layers, bias=qkv_bias)
        weights += linear("o_proj", q, h, layers, bias=bool(cfg.get("attention_bias")))
    moe = None
    if traits.moe != "none":
        moe_weights, moe = _moe_weights(cfg, d, traits.moe)
        weights += moe_weights
    else:
        weights += linear("gate_up_proj", h, inter, 2 * layers, bias=mlp_bias)
        weights += linear("down_proj", inter, h, layers, bias=mlp_bias)
    weights += norm("layernorms", h, (4 if traits.post_norms else 2) * layers, bias=False)
    if traits.qk_norm == "head":
        weights += norm("q_norm", d.head_dim, layers, bias=False)
        weights += norm("k_norm", d.head_dim, layers, bias=False)
    elif traits.qk_norm == "full":
        weights += norm("q_norm", q, layers, bias=False)
        weights += norm("k_norm", kv, layers, bias=False)
    weights += norm("norm", h, bias=False)
    stack = dict(
        norm="rmsnorm",
        gated=True,
        fused_qkv=traits.fused,
        attn_dropout=d.attn_dropout,
        softmax_fp32=True,
        lora_targets=((h, q), (h, kv)) if not traits.fused else ((h, q + 2 * kv),),
        qk_norm=traits.qk_norm,
        post_norms=traits.post_norms,
        attn_softcap=bool(cfg.get("attn_logit_softcapping")) and family == "gemma2",
        moe=moe,
        mla=mla,
    )
    if mla is not None:  # every head has its own key: the kv heads are the heads
        stack.update(head_dim=mla.nope + mla.rope, kv_heads=d.heads, lora_targets=((h, q),))
    return DecoderParts(weights, stack, Embedding(d.vocab, h))


_FALCON = FamilyKeys(
    layers=("num_hidden_layers", "n_layer"),
    heads=("num_attention_heads", "n_head"),
    intermediate=("ffn_hidden_size",),
    intermediate_factor=4,
    activation=("activation",),
    hidden_dropout=("hidden_dropout",),
    attn_dropout=("attention_dropout",),
    tied_default=True,
)
_BLOOM = FamilyKeys(
    hidden=("hidden_size", "n_embed"),
    layers=("n_layer", "num_hidden_layers"),
    heads=("n_head", "num_attention_heads"),
    intermediate=(),
    intermediate_factor=4,
    hidden_dropout=("hidden_dropout",),
    attn_dropout=("attention_dropout",),
    tied_default=True,
)
DECODER_KEYS.update(falcon=_FALCON, bloom=_BLOOM)


def _falcon_parts(cfg: dict[str, Any], d: Dims) -> DecoderParts:
    """Falcon: fused qkv with multi-query (7B) or grouped (new_decoder_architecture, 40B/180B)
    keys and values, parallel attention and MLP, GELU MLP, tied embeddings."""
    h, layers, inter = d.hidden, d.layers, d.intermediate
    new_arch = bool(cfg.get("new_decoder_architecture", False))
    if new_arch:
        kv_heads = cfg_int(cfg, "num_kv_heads", default=d.heads)
    else:
        kv_heads = 1 if cfg.get("multi_query", True) else d.heads
    parallel = new_arch or bool(cfg.get("parallel_attn", True))
    norms = cfg_int(cfg, "num_ln_in_parallel_attn", default=2) if new_arch else 1 if parallel else 2
    bias = bool(cfg.get("bias", False))
    head_dim = h // d.heads
    weights = [WeightGroup("word_embeddings", (d.vocab, h))]
    weights += linear("query_key_value", h, (d.heads + 2 * kv_heads) * head_dim, layers, bias)
    weights += linear("dense", h, h, layers, bias=bias)
    weights += linear("dense_h_to_4h", h, inter, layers, bias=bias)
    weights += linear("dense_4h_to_h", inter, h, layers, bias=bias)
    weights += norm("layernorms", h, norms * layers)
    weights += norm("ln_f", h)
    stack = dict(
        norm="layernorm",
        gated=False,
        fused_qkv=True,
        kv_heads=kv_heads,
        parallel_residual=parallel,
        single_norm=norms == 1 and parallel,
        attn_dropout=d.attn_dropout,
        hidden_dropout=d.hidden_dropout,
        softmax_fp32=True,
        lora_targets=((h, (d.heads + 2 * kv_heads) * head_dim),),
    )
    if cfg.get("alibi"):
        raise ConfigError("falcon with alibi=true is not supported")
    return DecoderParts(weights, stack, Embedding(d.vocab, h))


def _bloom_parts(cfg: dict[str, Any], d: Dims) -> DecoderParts:
    """BLOOM: ALiBi (no position embeddings), a LayerNorm on the embeddings, fused qkv."""
    h, layers, inter = d.hidden, d.layers, d.intermediate
    weights = [WeightGroup("word_embeddings", (d.vocab, h))]
    weights += norm("word_embeddings_layernorm", h)
    weights += linear("query_key_value", h, 3 * h, layers)
    weights += linear("dense", h, h, layers)
    weights += linear("dense_h_to_4h", h, inter, layers)
    weights += linear("dense_4h_to_h", inter, h, layers)
    weights += norm("layernorms", h, 2 * layers)
    weights += norm("ln_f", h)
    stack = dict(
        norm="layernorm",
        gated=False,
        fused_qkv=True,
        attn_dropout=d.attn_dropout,
        hidden_dropout=d.hidden_dropout,
        softmax_fp32=True,
        lora_targets=((h, 3 * h),),
    )
    return DecoderParts(weights, stack, Embedding(d.vocab, h, norm=True))


DECODER_BUILDERS = {
    "gpt2": lambda cfg, d, family: _gpt2_parts(cfg, d),
    "opt": lambda cfg, d, family: _opt_parts(cfg, d),
    "gpt_neox": lambda cfg, d, family: _neox_parts(cfg, d),
    "falcon": lambda cfg, d, family: _falcon_parts(cfg, d),
    "bloom": lambda cfg, d, family: _bloom_parts(cfg, d),
    **{family: _llama_parts for family in LLAMA_TRAITS},
}


def _decoder_head(
    cfg: dict[str, Any], kind: str, d: Dims, emb: Embedding
) -> tuple[list[WeightGroup], Head]:
    if kind == "causal-lm":
        weights = [] if d.tied else [WeightGroup("lm_head", (d.vocab, emb.width), matmul=True)]
        return weights, Head("causal-lm", vocab=d.vocab)
    if kind == "sequence-classification":
        labels = num_labels(cfg)
        return [WeightGroup("score", (labels, d.hidden), matmul=True)], Head(
            kind, labels=labels, pooled=True
        )
    return [], Head("none")


def build_decoder(cfg: dict[str, Any], family: str, name: str) -> Architecture:
    kind, notes = head_kind(cfg, family)
    if kind not in ("causal-lm", "sequence-classification", "none"):
        notes.append(f"{family}: {kind} head not modelled, sizing the causal-lm head")
        kind = "causal-lm"
    d = read_dims(cfg, DECODER_KEYS[family])
    parts = DECODER_BUILDERS[family](cfg, d, family)
    # LLaMA-style configs may set head_dim apart from hidden / heads.
    check_sizes(d, divisible=family not in LLAMA_TRAITS)
    positive("vocab_size", d.vocab)
    head_weights, head = _decoder_head(cfg, kind, d, parts.embedding)
    if kind == "causal-lm" and family == "gemma2" and cfg.get("final_logit_softcapping"):
        head = replace(head, softcap=True)
    fields = {"kv_heads": d.kv_heads, "head_dim": d.head_dim, **parts.stack}
    stack = Stack(
        role="decoder",
        layers=d.layers,
        hidden=d.hidden,
        heads=d.heads,
        intermediate=d.intermediate,
        activation=d.activation,
        prenorm=True,
        causal=True,
        final_norm=True,
        **fields,
    )
    return Architecture(
        name=name,
        family=family,
        kind="decoder",
        weights=tuple(parts.weights + head_weights),
        stacks=(stack,),
        embedding=parts.embedding,
        head=head,
        max_positions=None if family == "bloom" else d.positions,  # ALiBi: no position table
        absolute_positions=parts.absolute,
        # Gemma 2's soft-capped scores run through the eager path only.
        sdpa=family in SDPA_FAMILIES and not stack.attn_softcap,
        notes=tuple(notes),
    )


# ---------------------------------------------------------- plain GPT from a count

FALLBACK_VOCAB = 50257
FALLBACK_POSITIONS = 2048
# (parameters, layers) of the GPT-3 family (Brown et al. 2020, table 2.1): depth by size.
_GPT3_DEPTHS = (
    (125e6, 12),
    (350e6, 24),
    (760e6, 24),
    (1.3e9, 24),
    (2.7e9, 32),
    (6.7e9, 32),
    (13e9, 40),
    (175e9, 96),
)


def _depth_for(parameters: float) -> int:
    if parameters <= _GPT3_DEPTHS[0][0]:
        return max(2, round(12 * (parameters / 125e6) ** 0.35))
    for (n0, l0), (n1, l1) in zip(_GPT3_DEPTHS, _GPT3_DEPTHS[1:], strict=False):
        if parameters <= n1:
            frac = math.log(parameters / n0) / math.log(n1 / n0)
            return round(l0 + frac * (l1 - l0))
    return 96 + round(16 * math.log2(parameters / 175e9))


def gpt_of_size(parameters: float, name: str = "") -> Architecture:
    """A GPT-2-style decoder (tied embeddings, GELU MLP of 4x) with about `parameters`."""
    layers = max(1, _depth_for(parameters))
    # 12 L h^2 + 13 L h + (V + P + 2) h = N  ->  h from the quadratic, rounded to 64.
    a, b = 12 * layers, 13 * layers + FALLBACK_VOCAB + FALLBACK_POSITIONS + 2
    hidden = (-b + math.sqrt(b * b + 4 * a * parameters)) / (2 * a)
    head_dim = 64 if hidden <= 2048 else 128  # heads of 64 for small models, 128 for large
    hidden = max(head_dim, int(round(hidden / head_dim)) * head_dim)
    heads = hidden // head_dim
    config = {
        "model_type": "gpt2",
        "n_embd": hidden,
        "n_layer": layers,
        "n_head": heads,
        "n_positions": FALLBACK_POSITIONS,
        "vocab_size": FALLBACK_VOCAB,
        "activation_function": "gelu",
        "attn_pdrop": 0.0,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
    }
    arch = build_decoder(config, "gpt2", name or f"gpt-{parameters / 1e6:g}M")
    return replace(arch, synthetic=True, absolute_positions=False, notes=())
