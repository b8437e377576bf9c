"""Encoder-only families: BERT and its relatives (RoBERTa, XLM-R, ELECTRA, DistilBERT,
ALBERT, DeBERTa-v2) and ModernBERT."""

from __future__ import annotations

from typing import Any

from orchestrator.sizing.architectures.config import (
    Dims,
    FamilyKeys,
    cfg_activation,
    cfg_float,
    cfg_get,
    cfg_int,
    check_sizes,
    head_kind,
    num_labels,
    positive,
    read_dims,
)
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

_BERT = FamilyKeys(dropout_default=0.1, type_vocab=True, positions_default=512, tied_default=True)
BERT_KEYS = {
    "bert": _BERT,
    "roberta": _BERT,
    "xlm-roberta": _BERT,
    "electra": _BERT,
    "albert": _BERT,
    "deberta-v2": _BERT,
    "distilbert": FamilyKeys(
        hidden=("dim", "hidden_size"),
        layers=("n_layers", "num_hidden_layers"),
        heads=("n_heads", "num_attention_heads"),
        intermediate=("hidden_dim", "intermediate_size"),
        positions_default=512,
        activation=("activation",),
        hidden_dropout=("dropout",),
        attn_dropout=("attention_dropout",),
        dropout_default=0.1,
        tied_default=True,
    ),
}


def _deberta_relative(cfg: dict[str, Any], d: Dims) -> tuple[list[WeightGroup], int]:
    """DeBERTa-v2 relative-position weights and the span of relative embeddings (rows)."""
    h, layers = d.hidden, d.layers
    buckets = cfg_int(cfg, "position_buckets", default=-1)
    span = cfg_get(cfg, "max_relative_positions", default=-1)
    span = d.positions if not isinstance(span, int) or span < 1 else span
    rel_span = 2 * (buckets if buckets > 0 else span)
    weights = [WeightGroup("encoder.rel_embeddings", (rel_span, h))]
    if "layer_norm" in str(cfg.get("norm_rel_ebd", "none")):
        weights += norm("encoder.LayerNorm", h)
    pos_types = str(cfg.get("pos_att_type", "")).lower()
    if not cfg.get("share_att_key", False):
        # Separate projections of the relative embeddings for c2p and p2c.
        if "c2p" in pos_types:
            weights += linear("pos_key_proj", h, h, layers)
        if "p2c" in pos_types:
            weights += linear("pos_query_proj", h, h, layers)
    return weights, rel_span


def _bert_embeddings(
    cfg: dict[str, Any], family: str, d: Dims, emb_width: int
) -> tuple[list[WeightGroup], str, int, bool]:
    """Embedding weights (word, position, type, LayerNorm, projection); relative attention
    kind and span; whether positions are learned absolute embeddings."""
    weights = [WeightGroup("embeddings.word", (d.vocab, emb_width))]
    relative, rel_span, absolute = "none", 0, True
    if family == "deberta-v2":
        absolute = bool(cfg.get("position_biased_input", True))
        if absolute:
            weights.append(WeightGroup("embeddings.position", (d.positions, emb_width)))
        if d.types:
            weights.append(WeightGroup("embeddings.token_type", (d.types, emb_width)))
        if cfg.get("relative_attention", False):
            relative = "deberta"
            rel_weights, rel_span = _deberta_relative(cfg, d)
            weights += rel_weights
        if cfg_int(cfg, "conv_kernel_size", default=0):
            raise ConfigError("deberta-v2 with conv_kernel_size is not supported")
    else:
        weights.append(WeightGroup("embeddings.position", (d.positions, emb_width)))
        if d.types:
            weights.append(WeightGroup("embeddings.token_type", (d.types, emb_width)))
    weights += norm("embeddings.LayerNorm", emb_width)
    if emb_width != d.hidden:
        weights += linear("embeddings.project", emb_width, d.hidden)
    return weights, relative, rel_span, absolute


def _post_ln_layers(d: Dims, param_layers: int) -> list[WeightGroup]:
    """Weights of `param_layers` BERT layers (q, k, v, o; LayerNorm; MLP; LayerNorm)."""
    h, inter = d.hidden, d.intermediate
    weights = linear("attention.qkvo", h, h, 4 * param_layers)
    weights += norm("attention.LayerNorm", h, param_layers)
    weights += linear("intermediate", h, inter, param_layers)
    weights += linear("output", inter, h, param_layers)
    weights += norm("output.LayerNorm", h, param_layers)
    return weights


def _bert_head(
    kind: str, family: str, d: Dims, transform: int, labels: int
) -> tuple[list[WeightGroup], Head]:
    """The task head's weights and its Head description."""
    h, vocab, act = d.hidden, d.vocab, d.activation
    weights: list[WeightGroup] = []
    if kind in ("masked-lm", "pretraining") and not (family == "electra" and kind == "pretraining"):
        # dense (h -> transform) + act + LayerNorm, then the (tied) decoder with a bias.
        weights += linear("lm.transform", h, transform)
        weights += norm("lm.LayerNorm", transform)
        weights.append(WeightGroup("lm.decoder.bias", (vocab,)))
        if not d.tied:
            weights.append(WeightGroup("lm.decoder.weight", (vocab, transform), matmul=True))
        if kind == "pretraining":  # BERT next-sentence prediction on the pooled CLS token
            weights += linear("pooler", h, h)
            weights += linear("nsp", h, 2)
        return weights, Head(kind, vocab=vocab, transform=transform, transform_act=act)
    if kind == "pretraining":  # ELECTRA discriminator: dense + act + one logit per token
        weights += linear("discriminator.dense", h, h)
        weights += linear("discriminator.prediction", h, 1)
        return weights, Head("pretraining", transform=h, transform_act=act, labels=1)
    if kind == "sequence-classification":
        weights += linear("pooler", h, h)  # BERT pooler / RoBERTa dense / DistilBERT pre_classifier
        weights += linear("classifier", h, labels)
        return weights, Head(kind, labels=labels, pooled=True)
    if kind in ("token-classification", "question-answering"):
        n = 2 if kind == "question-answering" else labels
        return linear("classifier", h, n), Head(kind, labels=n)
    if kind == "none":
        if family in ("bert", "roberta", "xlm-roberta", "albert"):
            weights += linear("pooler", h, h)
        return weights, Head("none")
    raise ConfigError(f"{family} has no {kind} head")


def build_bert(cfg: dict[str, Any], family: str, name: str) -> Architecture:
    kind, notes = head_kind(cfg, family)
    d = read_dims(cfg, BERT_KEYS[family])
    check_sizes(d)
    positive("vocab_size", d.vocab)
    h = d.hidden
    emb_width = cfg_int(cfg, "embedding_size", default=h) if family in ("albert", "electra") else h
    weights, relative, rel_span, absolute = _bert_embeddings(cfg, family, d, emb_width)
    # ALBERT shares one group of layers across the depth.
    param_layers = d.layers
    if family == "albert":
        param_layers = cfg_int(cfg, "num_hidden_groups", default=1) * cfg_int(
            cfg, "inner_group_num", default=1
        )
    weights += _post_ln_layers(d, param_layers)
    stack = Stack(
        role="encoder",
        layers=d.layers,
        hidden=h,
        heads=d.heads,
        kv_heads=d.heads,
        head_dim=h // d.heads,
        intermediate=d.intermediate,
        activation=d.activation,
        gated=False,
        norm="layernorm",
        prenorm=False,
        causal=False,
        attn_dropout=d.attn_dropout,
        hidden_dropout=d.hidden_dropout,
        attn_out_dropout=family != "distilbert",
        mlp_out_dropout=family != "albert",
        relative=relative,
        rel_span=rel_span,
        lora_targets=((h, h), (h, h)),  # query and value
    )
    # ALBERT's and the ELECTRA generator's MLM heads project down to the embedding width.
    transform = emb_width if family == "albert" or kind == "masked-lm" else h
    head_weights, head = _bert_head(kind, family, d, transform, num_labels(cfg))
    weights += head_weights
    return Architecture(
        name=name,
        family=family,
        kind="encoder",
        weights=tuple(weights),
        stacks=(stack,),
        embedding=Embedding(
            vocab=d.vocab,
            width=emb_width,
            int_inputs=1 + (1 if d.types else 0),
            norm=True,
            dropout=d.hidden_dropout,
            projected=emb_width != h,
        ),
        head=head,
        max_positions=d.positions - 2 if "roberta" in family else d.positions,
        absolute_positions=absolute,
        sdpa=family in SDPA_FAMILIES,
        notes=tuple(notes),
    )


# ------------------------------------------------------------------------ ModernBERT


def build_modernbert(cfg: dict[str, Any], family: str, name: str) -> Architecture:
    """ModernBERT: a pre-LN encoder with rotary positions, a fused Wqkv, a GeGLU MLP (one Wi
    making input and gate), bias-free LayerNorms (norm_bias), no norm before layer 0's
    attention, a final norm, and an MLM head (dense + act + norm, tied decoder with a bias)."""
    kind, notes = head_kind(cfg, "modernbert")
    keys = FamilyKeys(
        activation=("hidden_activation",),
        hidden_dropout=("mlp_dropout",),
        attn_dropout=("attention_dropout",),
        positions_default=8192,
        tied_default=True,
    )
    d = read_dims(cfg, keys)
    check_sizes(d)
    positive("vocab_size", d.vocab)
    h, layers, inter = d.hidden, d.layers, d.intermediate
    norm_bias = bool(cfg.get("norm_bias", False))
    attn_bias = bool(cfg.get("attention_bias", False))
    mlp_bias = bool(cfg.get("mlp_bias", False))
    weights = [WeightGroup("tok_embeddings", (d.vocab, h))]
    weights += norm("embeddings.norm", h, bias=norm_bias)
    weights += linear("Wqkv", h, 3 * h, layers, bias=attn_bias)
    weights += linear("attn.Wo", h, h, layers, bias=attn_bias)
    weights += linear("mlp.Wi", h, 2 * inter, layers, bias=mlp_bias)
    weights += linear("mlp.Wo", inter, h, layers, bias=mlp_bias)
    weights += norm("layer_norms", h, 2 * layers - 1, bias=norm_bias)  # layer 0: no attn_norm
    weights += norm("final_norm", h, bias=norm_bias)
    labels = num_labels(cfg)
    act = cfg_activation(cfg, "classifier_activation", default=d.activation)
    if kind == "none":
        head = Head("none")
    else:
        weights += linear("head.dense", h, h, bias=bool(cfg.get("classifier_bias", False)))
        weights += norm("head.norm", h, bias=norm_bias)
        if kind in ("masked-lm", "pretraining"):
            kind = "masked-lm"
            if cfg.get("decoder_bias", True):
                weights.append(WeightGroup("decoder.bias", (d.vocab,)))
            if not d.tied:
                weights.append(WeightGroup("decoder.weight", (d.vocab, h), matmul=True))
            head = Head(kind, vocab=d.vocab, transform=h, transform_act=act)
        else:
            n = 2 if kind == "question-answering" else labels
            weights += linear("classifier", h, n)
            head = Head(kind, labels=n, pooled=kind == "sequence-classification")
    stack = Stack(
        role="encoder",
        layers=layers,
        hidden=h,
        heads=d.heads,
        kv_heads=d.heads,
        head_dim=h // d.heads,
        intermediate=inter,
        activation=d.activation,
        gated=True,
        norm="layernorm",
        prenorm=True,
        causal=False,
        fused_qkv=True,
        attn_dropout=d.attn_dropout,
        hidden_dropout=d.hidden_dropout,
        final_norm=True,
        lora_targets=((h, 3 * h),),
    )
    emb_dropout = cfg_float(cfg, "embedding_dropout")
    return Architecture(
        name=name,
        family="modernbert",
        kind="encoder",
        weights=tuple(weights),
        stacks=(stack,),
        embedding=Embedding(d.vocab, h, norm=True, dropout=emb_dropout),
        head=head,
        max_positions=d.positions,
        absolute_positions=False,
        sdpa=True,
        notes=tuple(notes),
    )
