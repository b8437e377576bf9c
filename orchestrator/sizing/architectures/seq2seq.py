"""Encoder-decoder families: T5, BART/mBART and Whisper."""

from __future__ import annotations

from typing import Any

from orchestrator.sizing.architectures.config import (
    cfg_activation,
    cfg_float,
    cfg_int,
    head_kind,
    positive,
)
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

# ------------------------------------------------------------------------------ T5


def _t5_decoder_weights(
    d: int, inner: int, heads: int, d_ff: int, layers: int, buckets: int, mlp_mats: int
) -> list[WeightGroup]:
    """The T5 decoder's layers: self-attention (+ its relative bias), cross-attention, MLP."""
    weights = linear("decoder.SelfAttention.qkv", d, inner, 3 * layers, bias=False)
    weights += linear("decoder.SelfAttention.o", inner, d, layers, bias=False)
    weights.append(WeightGroup("decoder.relative_attention_bias", (buckets, heads)))
    weights += linear("decoder.EncDecAttention.qkv", d, inner, 3 * layers, bias=False)
    weights += linear("decoder.EncDecAttention.o", inner, d, layers, bias=False)
    weights += linear("decoder.wi", d, d_ff, mlp_mats * layers, bias=False)
    weights += linear("decoder.wo", d_ff, d, layers, bias=False)
    weights += norm("decoder.layer_norm", d, 3 * layers + 1, bias=False)
    return weights


def build_t5(cfg: dict[str, Any], family: str, name: str) -> Architecture:
    kind, notes = head_kind(cfg, "t5")
    d = positive("d_model", cfg_int(cfg, "d_model"))
    d_kv = positive("d_kv", cfg_int(cfg, "d_kv", default=64))
    heads = positive("num_heads", cfg_int(cfg, "num_heads"))
    d_ff = positive("d_ff", cfg_int(cfg, "d_ff"))
    enc_layers = positive("num_layers", cfg_int(cfg, "num_layers"))
    dec_layers = cfg_int(cfg, "num_decoder_layers", default=enc_layers)
    vocab = positive("vocab_size", cfg_int(cfg, "vocab_size"))
    buckets = cfg_int(cfg, "relative_attention_num_buckets", default=32)
    ff_proj = str(cfg.get("feed_forward_proj", "relu"))
    gated = ff_proj.startswith("gated-")
    act = cfg_activation({"a": ff_proj.removeprefix("gated-")}, "a", default="relu")
    dropout = cfg_float(cfg, "dropout_rate", default=0.1)
    tied = bool(cfg.get("tie_word_embeddings", True))
    inner = heads * d_kv
    mlp_mats = 2 if gated else 1

    weights: list[WeightGroup] = [WeightGroup("shared", (vocab, d))]
    weights += linear("encoder.SelfAttention.qkv", d, inner, 3 * enc_layers, bias=False)
    weights += linear("encoder.SelfAttention.o", inner, d, enc_layers, bias=False)
    weights.append(WeightGroup("encoder.relative_attention_bias", (buckets, heads)))
    weights += linear("encoder.wi", d, d_ff, mlp_mats * enc_layers, bias=False)
    weights += linear("encoder.wo", d_ff, d, enc_layers, bias=False)
    weights += norm("encoder.layer_norm", d, 2 * enc_layers + 1, bias=False)
    if kind == "seq2seq-lm" or kind == "none":
        weights += _t5_decoder_weights(d, inner, heads, d_ff, dec_layers, buckets, mlp_mats)
    else:
        raise ConfigError(f"t5: {kind} head is not supported (use T5ForConditionalGeneration)")
    if kind == "seq2seq-lm" and not tied:
        weights.append(WeightGroup("lm_head", (vocab, d), matmul=True))
    common: dict[str, Any] = dict(
        hidden=d,
        heads=heads,
        kv_heads=heads,
        head_dim=d_kv,
        intermediate=d_ff,
        activation=act,
        gated=gated,
        norm="rmsnorm",
        prenorm=True,
        attn_dropout=dropout,
        hidden_dropout=dropout,
        act_dropout=dropout,
        relative="t5",
        final_norm=True,
    )
    encoder = Stack(
        role="encoder",
        layers=enc_layers,
        causal=False,
        lora_targets=((d, inner), (d, inner)),
        **common,
    )
    decoder = Stack(
        role="decoder",
        layers=dec_layers,
        causal=True,
        cross_attention=True,
        lora_targets=((d, inner),) * 4,  # q and v of self- and cross-attention
        **common,
    )
    return Architecture(
        name=name,
        family="t5",
        kind="encoder-decoder",
        weights=tuple(weights),
        stacks=(encoder, decoder),
        embedding=Embedding(vocab, d, int_inputs=1, dropout=dropout),
        head=Head("seq2seq-lm" if kind == "seq2seq-lm" else "none", vocab=vocab),
        max_positions=cfg_int(cfg, "n_positions", default=512),
        absolute_positions=False,
        sdpa=False,
        notes=tuple(notes),
    )


# ---------------------------------------------------------------------- BART / mBART


def _bart_stack_weights(prefix: str, d: int, ffn: int, layers: int, cross: bool):
    """One BART/mBART stack's layers: self-attention (q, k, v, out, all with biases), its
    LayerNorm, (decoder: cross-attention and its LayerNorm), fc1, fc2 and the final LayerNorm."""
    weights = linear(f"{prefix}.self_attn", d, d, 4 * layers)
    weights += norm(f"{prefix}.layer_norms", d, (3 if cross else 2) * layers)
    if cross:
        weights += linear(f"{prefix}.encoder_attn", d, d, 4 * layers)
    weights += linear(f"{prefix}.fc1", d, ffn, layers)
    weights += linear(f"{prefix}.fc2", ffn, d, layers)
    return weights


def _seq2seq_stacks(
    cfg: dict[str, Any],
    d: int,
    prenorm: bool,
    dropout: float,
    encoder: tuple[int, int, int],
    decoder: tuple[int, int, int],
) -> tuple[Stack, Stack]:
    """The encoder and decoder stacks of a BART-style model (BART, mBART, Whisper): GELU MLPs,
    LayerNorm, full multi-head attention; `encoder`/`decoder` are (layers, heads, ffn)."""
    common: dict[str, Any] = dict(
        hidden=d,
        gated=False,
        activation=cfg_activation(cfg, "activation_function", default="gelu"),
        norm="layernorm",
        prenorm=prenorm,
        final_norm=prenorm,
        attn_dropout=cfg_float(cfg, "attention_dropout"),
        hidden_dropout=dropout,
        act_dropout=cfg_float(cfg, "activation_dropout"),
    )
    stacks = []
    for role, (layers, heads, ffn) in (("encoder", encoder), ("decoder", decoder)):
        causal = role == "decoder"
        stacks.append(
            Stack(
                role=role,
                layers=layers,
                heads=heads,
                kv_heads=heads,
                head_dim=d // heads,
                intermediate=ffn,
                causal=causal,
                cross_attention=causal,
                # LoRA on q and v of self-attention, and of cross-attention in the decoder.
                lora_targets=((d, d),) * (4 if causal else 2),
                **common,
            )
        )
    return stacks[0], stacks[1]


def build_bart(cfg: dict[str, Any], family: str, name: str) -> Architecture:
    """BART (post-LN) and mBART (pre-LN, a final LayerNorm per stack): learned positions with
    an offset of 2, a LayerNorm on the embeddings, a tied LM head."""
    kind, notes = head_kind(cfg, family)
    if kind not in ("seq2seq-lm", "none"):
        notes.append(f"{family}: {kind} head not modelled, sizing the seq2seq-lm head")
        kind = "seq2seq-lm"
    d = positive("d_model", cfg_int(cfg, "d_model"))
    vocab = positive("vocab_size", cfg_int(cfg, "vocab_size"))
    positions = cfg_int(cfg, "max_position_embeddings", default=1024)
    enc_layers = positive("encoder_layers", cfg_int(cfg, "encoder_layers", default=12))
    dec_layers = positive("decoder_layers", cfg_int(cfg, "decoder_layers", default=12))
    enc_heads = positive("heads", cfg_int(cfg, "encoder_attention_heads", default=16))
    dec_heads = positive("heads", cfg_int(cfg, "decoder_attention_heads", default=16))
    enc_ffn = positive("encoder_ffn_dim", cfg_int(cfg, "encoder_ffn_dim", default=4 * d))
    dec_ffn = positive("decoder_ffn_dim", cfg_int(cfg, "decoder_ffn_dim", default=4 * d))
    for heads in (enc_heads, dec_heads):
        if d % heads:
            raise ConfigError(f"d_model {d} is not divisible by {heads} heads")
    prenorm = family == "mbart"
    dropout = cfg_float(cfg, "dropout", default=0.1)
    weights: list[WeightGroup] = [WeightGroup("shared", (vocab, d))]
    for prefix, layers, ffn, cross in (
        ("encoder", enc_layers, enc_ffn, False),
        ("decoder", dec_layers, dec_ffn, True),
    ):
        weights.append(WeightGroup(f"{prefix}.embed_positions", (positions + 2, d)))
        weights += norm(f"{prefix}.layernorm_embedding", d)
        weights += _bart_stack_weights(prefix, d, ffn, layers, cross)
        if prenorm:
            weights += norm(f"{prefix}.layer_norm", d)
    if kind == "seq2seq-lm" and not cfg.get("tie_word_embeddings", True):
        weights.append(WeightGroup("lm_head", (vocab, d), matmul=True))
    encoder, decoder = _seq2seq_stacks(
        cfg, d, prenorm, dropout, (enc_layers, enc_heads, enc_ffn), (dec_layers, dec_heads, dec_ffn)
    )
    return Architecture(
        name=name,
        family=family,
        kind="encoder-decoder",
        weights=tuple(weights),
        stacks=(encoder, decoder),
        # Token ids and the (offset) position ids; LayerNorm and dropout on the sum.
        embedding=Embedding(vocab, d, int_inputs=2, norm=True, dropout=dropout),
        head=Head("seq2seq-lm" if kind == "seq2seq-lm" else "none", vocab=vocab),
        max_positions=positions,
        absolute_positions=True,
        sdpa=True,
        notes=tuple(notes),
    )


# --------------------------------------------------------------------------- Whisper


def build_whisper(cfg: dict[str, Any], family: str, name: str) -> Architecture:
    """Whisper: two GELU 1-D convs over the log-mel input (the second with stride 2) make a
    fixed 1500-frame encoder input with sinusoid-initialised positions; pre-LN encoder and
    decoder (k_proj without a bias), a final LayerNorm each, the LM head tied."""
    kind, notes = head_kind(cfg, "whisper")
    d = positive("d_model", cfg_int(cfg, "d_model"))
    vocab = positive("vocab_size", cfg_int(cfg, "vocab_size"))
    mel = positive("num_mel_bins", cfg_int(cfg, "num_mel_bins", default=80))
    src = positive("max_source_positions", cfg_int(cfg, "max_source_positions", default=1500))
    tgt = positive("max_target_positions", cfg_int(cfg, "max_target_positions", default=448))
    enc_layers = positive("encoder_layers", cfg_int(cfg, "encoder_layers"))
    dec_layers = positive("decoder_layers", cfg_int(cfg, "decoder_layers"))
    heads = positive("heads", cfg_int(cfg, "encoder_attention_heads"))
    dec_heads = positive("heads", cfg_int(cfg, "decoder_attention_heads", default=heads))
    enc_ffn = positive("encoder_ffn_dim", cfg_int(cfg, "encoder_ffn_dim", default=4 * d))
    dec_ffn = positive("decoder_ffn_dim", cfg_int(cfg, "decoder_ffn_dim", default=4 * d))
    for n in (heads, dec_heads):
        if d % n:
            raise ConfigError(f"d_model {d} is not divisible by {n} heads")

    def attention(prefix: str, layers: int) -> list[WeightGroup]:
        return linear(f"{prefix}.qvo", d, d, 3 * layers) + linear(
            f"{prefix}.k", d, d, layers, False
        )

    weights = [
        WeightGroup("conv1.weight", (d, mel, 3), matmul=True),
        WeightGroup("conv1.bias", (d,)),
    ]
    weights += [
        WeightGroup("conv2.weight", (d, d, 3), matmul=True),
        WeightGroup("conv2.bias", (d,)),
    ]
    weights.append(WeightGroup("encoder.embed_positions", (src, d)))
    weights += attention("encoder.self_attn", enc_layers)
    weights += norm("encoder.layer_norms", d, 2 * enc_layers + 1)
    weights += linear("encoder.fc1", d, enc_ffn, enc_layers) + linear(
        "encoder.fc2", enc_ffn, d, enc_layers
    )
    weights.append(WeightGroup("decoder.embed_tokens", (vocab, d)))
    weights.append(WeightGroup("decoder.embed_positions", (tgt, d)))
    weights += attention("decoder.self_attn", dec_layers) + attention(
        "decoder.encoder_attn", dec_layers
    )
    weights += norm("decoder.layer_norms", d, 3 * dec_layers + 1)
    weights += linear("decoder.fc1", d, dec_ffn, dec_layers) + linear(
        "decoder.fc2", dec_ffn, d, dec_layers
    )
    if not cfg.get("tie_word_embeddings", True):
        weights.append(WeightGroup("proj_out", (vocab, d), matmul=True))
    dropout = cfg_float(cfg, "dropout")
    encoder, decoder = _seq2seq_stacks(
        cfg, d, True, dropout, (enc_layers, heads, enc_ffn), (dec_layers, dec_heads, dec_ffn)
    )
    if kind not in ("seq2seq-lm", "none"):
        notes.append(f"whisper: {kind} head not modelled, sizing the seq2seq-lm head")
        kind = "seq2seq-lm"
    return Architecture(
        name=name,
        family="whisper",
        kind="encoder-decoder",
        weights=tuple(weights),
        stacks=(encoder, decoder),
        embedding=Embedding(vocab, d, int_inputs=1, dropout=dropout),
        head=Head("seq2seq-lm" if kind == "seq2seq-lm" else "none", vocab=vocab),
        max_positions=tgt,
        absolute_positions=True,
        source_length=src,
        mel_bins=mel,
        sdpa=True,
        notes=tuple(notes),
    )
