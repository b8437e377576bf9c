"""Hugging Face config dict -> Architecture: the shapes that memory and FLOPs are computed from.

An `Architecture` lists every weight tensor group (shape and how many), the transformer stacks
(per-layer widths, attention, MLP and norm kinds, dropouts), the embeddings and the task head;
or, for CNNs, the ResNet stages. Nothing here is a parameter-count heuristic: the counts come
from the same shapes `transformers` builds (checked against published counts in the tests).

Supported `model_type`s: FAMILIES below (BERT family and ModernBERT; GPT-2, NeoX, OPT and the
LLaMA-style decoders incl. Gemma 1-3, Phi-3, Qwen3, OLMo-2, Falcon, BLOOM and the MoE families
Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3; T5, BART/mBART, Whisper; ViT, Swin, CLIP, SigLIP;
ResNet, ConvNeXt).
"""

from __future__ import annotations

import math
from dataclasses import field, replace
from functools import cached_property
from typing import Any

from orchestrator.records import record

ENCODER_FAMILIES = (
    "bert",
    "roberta",
    "xlm-roberta",
    "electra",
    "distilbert",
    "albert",
    "deberta-v2",
)
# Decoder-only LMs: the original six and those added for the families people fine-tune now.
LLM_FAMILIES = (
    "qwen3",
    "olmo2",
    "gemma",
    "gemma2",
    "gemma3_text",
    "phi3",
    "falcon",
    "bloom",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
)
DECODER_FAMILIES = ("gpt2", "gpt_neox", "opt", "llama", "mistral", "qwen2", *LLM_FAMILIES)
FAMILIES = (
    *ENCODER_FAMILIES,
    "modernbert",
    *DECODER_FAMILIES,
    *("t5", "bart", "mbart", "whisper", "vit", "resnet", "convnext", "swin", "clip", "siglip"),
)

# Head kinds (the `architectures` suffix decides which one a config gets).
HEADS = (
    "causal-lm",
    "masked-lm",
    "seq2seq-lm",
    "pretraining",  # BERT: masked LM + next-sentence; ELECTRA: replaced-token discriminator
    "sequence-classification",
    "token-classification",
    "question-answering",
    "image-classification",
    "contrastive",  # CLIP: image-text similarity over the batch
    "none",
)
_HEAD_SUFFIXES = (
    ("LMHeadModel", "causal-lm"),
    ("ForCausalLM", "causal-lm"),
    ("ForMaskedLM", "masked-lm"),
    ("ForConditionalGeneration", "seq2seq-lm"),
    ("ForPreTraining", "pretraining"),
    ("ForSequenceClassification", "sequence-classification"),
    ("ForTokenClassification", "token-classification"),
    ("ForQuestionAnswering", "question-answering"),
    ("ForImageClassification", "image-classification"),
    ("Model", "none"),
)
DEFAULT_HEAD = {
    "bert": "masked-lm",
    "roberta": "masked-lm",
    "xlm-roberta": "masked-lm",
    "modernbert": "masked-lm",
    "distilbert": "masked-lm",
    "albert": "masked-lm",
    "deberta-v2": "masked-lm",
    "electra": "pretraining",
    "gpt2": "causal-lm",
    "gpt_neox": "causal-lm",
    "opt": "causal-lm",
    "llama": "causal-lm",
    "mistral": "causal-lm",
    "qwen2": "causal-lm",
    **{f: "causal-lm" for f in LLM_FAMILIES},
    "t5": "seq2seq-lm",
    "bart": "seq2seq-lm",
    "mbart": "seq2seq-lm",
    "whisper": "seq2seq-lm",
    "vit": "image-classification",
    "resnet": "image-classification",
    "convnext": "image-classification",
    "swin": "image-classification",
    "clip": "contrastive",
    "siglip": "contrastive",
}
# Families whose transformers implementation has an SDPA/flash attention path.
SDPA_FAMILIES = {
    "bert",
    "roberta",
    "xlm-roberta",
    "electra",
    "distilbert",
    "albert",
    "gpt2",
    "gpt_neox",
    "opt",
    "llama",
    "mistral",
    "qwen2",
    *LLM_FAMILIES,
    "vit",
}
# Families whose positions are learned absolute embeddings: a longer sequence cannot run.
ABSOLUTE_POSITION_FAMILIES = {
    *("bert", "roberta", "xlm-roberta", "electra", "distilbert", "albert", "gpt2", "opt"),
    *("bart", "mbart"),
}
# Activation functions as `transformers` implements them, by how many tensors of the MLP
# width they save for backward: "gelu_new" is a Python tanh formula that saves four.
ACTIVATIONS = {
    *("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu", "silu", "swish"),
    "quick_gelu",  # CLIP: x * sigmoid(1.702 x), which saves x and the sigmoid
}


class ConfigError(ValueError):
    """A config dict that does not describe a supported model."""


@record
class WeightGroup:
    """`count` parameter tensors of one `shape` (e.g. 24 query weights of 1024 x 1024)."""

    name: str
    shape: tuple[int, ...]
    count: int = 1
    matmul: bool = False  # a weight applied by a matmul/conv (cast to half under autocast)

    @property
    def numel(self) -> int:
        return math.prod(self.shape) * self.count


@record
class MoE:
    """A sparse MLP: `experts` gated MLPs of width `intermediate`, `top_k` per token, plus an
    optional always-on shared expert (Qwen2-MoE: gated by a sigmoid of a linear)."""

    experts: int
    top_k: int
    intermediate: int
    layers: int  # how many of the stack's layers are MoE layers
    shared_intermediate: int = 0
    shared_gate: bool = False


@record
class MLA:
    """DeepSeek multi-head latent attention: queries straight (or through a q LoRA rank) and
    keys/values expanded from a `kv_rank` latent plus one shared rotary key of `rope` dims."""

    q_rank: int  # 0: a plain q_proj
    kv_rank: int
    nope: int  # per-head query/key dims without rotary positions
    rope: int  # per-head rotary dims (the shared key's width)
    v: int  # per-head value dims


@record
class Stack:
    """A stack of identical transformer layers (an encoder, a decoder, a ViT)."""

    role: str  # "encoder" | "decoder" (decoder of an encoder-decoder reads `target_seq`)
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    activation: str  # a key of ACTIVATIONS
    gated: bool  # SwiGLU/GeGLU MLP: gate, up and down matrices
    norm: str  # "layernorm" | "rmsnorm" (HF RMSNorm: upcasts to fp32, saves x and x*rsqrt)
    prenorm: bool  # pre-LN (GPT, LLaMA, T5, ViT) vs post-LN (BERT family)
    causal: bool
    fused_qkv: bool = False  # one projection makes q, k and v (GPT-2 c_attn, NeoX)
    parallel_residual: bool = False  # GPT-NeoX: attention and MLP read the same input
    cross_attention: bool = False  # decoder layers of an encoder-decoder
    attn_dropout: float = 0.0
    hidden_dropout: float = 0.0  # dropout on each sub-block's output
    attn_out_dropout: bool = True  # whether the attention sub-block's output has dropout
    mlp_out_dropout: bool = True  # whether the MLP sub-block's output has dropout
    act_dropout: float = 0.0  # dropout between the MLP activation and its down projection
    relative: str = "none"  # "none" | "t5" (bias table) | "deberta" (disentangled c2p/p2c)
    rel_span: int = 0  # DeBERTa: 2 * attention span rows of relative embeddings
    softmax_fp32: bool = False  # LLaMA family: softmax in fp32 then cast back
    final_norm: bool = False  # a norm after the last layer (pre-LN stacks)
    lora_targets: tuple[tuple[int, int], ...] = ()  # (in, out) of adapted linears per layer
    qk_norm: str = "none"  # "head": RMSNorm of q and k per head (Qwen3, Gemma 3); "full": OLMo-2
    post_norms: bool = False  # Gemma 2/3: a norm on the attention and on the MLP output too
    single_norm: bool = False  # Falcon-7B: one norm feeds both the attention and the MLP
    attn_softcap: bool = False  # Gemma 2: tanh soft-capping of the attention scores
    moe: MoE | None = None  # sparse MLP in `moe.layers` of the layers (the rest are dense)
    window: int = 0  # Swin: attention within windows of this many tokens
    mla: MLA | None = None  # DeepSeek: latent attention (head_dim is then nope + rope)

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def mlp_weights(self) -> float:
        """Matmul weights of the MLP one token goes through, averaged over the layers (for an
        MoE layer: the router, its top-k experts and the shared expert)."""
        dense = (3 if self.gated else 2) * self.hidden * self.intermediate
        if self.moe is None:
            return dense
        m = self.moe
        sparse = self.hidden * (m.experts + 3 * m.top_k * m.intermediate)
        sparse += 3 * self.hidden * m.shared_intermediate + (self.hidden if m.shared_gate else 0)
        return (m.layers * sparse + (self.layers - m.layers) * dense) / max(self.layers, 1)


@record
class Embedding:
    """Token embeddings and what happens before the first layer."""

    vocab: int
    width: int  # embedding width (ALBERT/ELECTRA: smaller than hidden, then projected)
    int_inputs: int = 1  # int64 index tensors per token that embedding lookups save
    norm: bool = False  # LayerNorm on the embeddings (BERT family)
    dropout: float = 0.0
    projected: bool = False  # a linear from `width` to the hidden size


@record
class Head:
    kind: str  # one of HEADS
    vocab: int = 0  # LM heads
    transform: int = 0  # width of an MLM transform (dense + act + norm) before the decoder
    transform_act: str = "gelu"
    labels: int = 0  # classification heads
    pooled: bool = False  # reads one (CLS) position
    softcap: bool = False  # Gemma 2: tanh soft-capping of the logits


@record
class ResNetStage:
    depth: int
    in_channels: int
    out_channels: int
    stride: int


@record
class ResNet:
    channels: int
    embedding_size: int
    layer_type: str  # "bottleneck" | "basic"
    stages: tuple[ResNetStage, ...]
    labels: int


@record
class ConvNeXt:
    """ConvNeXt: a 4x4 stride-4 patch stem, stages of blocks (7x7 depthwise conv, LayerNorm,
    4x MLP as 1x1 linears, layer scale) with LayerNorm + 2x2 stride-2 convs between them."""

    channels: int
    patch: int
    widths: tuple[int, ...]
    depths: tuple[int, ...]
    labels: int


@record
class Architecture:
    name: str
    family: str  # model_type
    kind: str  # "encoder" | "decoder" | "encoder-decoder" | "vit" | "cnn"
    weights: tuple[WeightGroup, ...]
    stacks: tuple[Stack, ...] = ()
    embedding: Embedding | None = None
    head: Head = field(default_factory=lambda: Head("none"))
    max_positions: int | None = None
    absolute_positions: bool = False
    image_size: int = 0  # default input resolution (ViT, ResNet)
    patch_size: int = 0
    channels: int = 3
    resnet: ResNet | None = None
    convnext: ConvNeXt | None = None
    source_length: int = 0  # a fixed encoder length (Whisper: 1500 frames after the convs)
    mel_bins: int = 0  # Whisper: two 1-D convs over this many mel bins make the encoder input
    synthetic: bool = False  # made up from a parameter count (--params-m)
    sdpa: bool = True  # the transformers implementation has an SDPA path
    notes: tuple[str, ...] = ()

    @cached_property
    def parameters(self) -> int:
        return sum(w.numel for w in self.weights)

    @cached_property
    def matmul_parameters(self) -> int:
        return sum(w.numel for w in self.weights if w.matmul)

    def lora_parameters(self, rank: int) -> int:
        return sum(rank * (i + o) * s.layers for s in self.stacks for i, o in s.lora_targets)

    def vision_tokens(self, image_size: int) -> int:
        """ViT sequence length: patches plus the CLS token (SigLIP has none)."""
        return (image_size // self.patch_size) ** 2 + (0 if self.family == "siglip" else 1)


# --------------------------------------------------------------------------- helpers


def linear(name: str, fan_in: int, fan_out: int, count: int = 1, bias: bool = True):
    groups = [WeightGroup(f"{name}.weight", (fan_out, fan_in), count, matmul=True)]
    if bias:
        groups.append(WeightGroup(f"{name}.bias", (fan_out,), count))
    return groups


def norm(name: str, width: int, count: int = 1, bias: bool = True):
    groups = [WeightGroup(f"{name}.weight", (width,), count)]
    if bias:
        groups.append(WeightGroup(f"{name}.bias", (width,), count))
    return groups


def _get(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if key in cfg and cfg[key] is not None:
            return cfg[key]
    if default is not None:
        return default
    raise ConfigError(f"missing {' / '.join(keys)}")


def _int(cfg: dict[str, Any], *keys: str, default: int | None = None) -> int:
    value = _get(cfg, *keys, default=default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ConfigError(f"{keys[0]} must be an integer, got {value!r}")
    if int(value) < 0:
        raise ConfigError(f"{keys[0]} must not be negative, got {value!r}")
    return int(value)


def _float(cfg: dict[str, Any], *keys: str, default: float = 0.0) -> float:
    for key in keys:
        value = cfg.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{key} must be a number, got {value!r}")
            return float(value)
    return default


def _positive(name: str, value: int) -> int:
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {value}")
    return value


def head_kind(cfg: dict[str, Any], family: str) -> tuple[str, list[str]]:
    """The task head named by `architectures`, or the family's pre-training head."""
    names = cfg.get("architectures") or []
    if isinstance(names, str):
        names = [names]
    for arch in names:
        for suffix, kind in _HEAD_SUFFIXES:
            if isinstance(arch, str) and arch.endswith(suffix):
                return kind, []
    if names:
        kind = DEFAULT_HEAD[family]
        return kind, [f"unknown head {names[0]!r}: sizing the {kind} head instead"]
    return DEFAULT_HEAD[family], []


def num_labels(cfg: dict[str, Any], default: int = 2) -> int:
    if isinstance(cfg.get("id2label"), dict) and cfg["id2label"]:
        return len(cfg["id2label"])
    return _int(cfg, "num_labels", default=default)


def _activation(cfg: dict[str, Any], *keys: str, default: str) -> str:
    value = default
    for key in keys:
        if isinstance(cfg.get(key), str):
            value = cfg[key]
            break
    value = {"swish": "silu", "gelu_fast": "gelu_new"}.get(value, value)
    if value not in ACTIVATIONS:
        raise ConfigError(f"unsupported activation {value!r}")
    return value


# ------------------------------------------------------------------------ BERT family


@record(frozen=False)
class FamilyKeys:
    """Which HF config keys hold a family's dimensions (the first key present wins), and the
    family's defaults where the config leaves a value out."""

    hidden: tuple[str, ...] = ("hidden_size",)
    layers: tuple[str, ...] = ("num_hidden_layers",)
    heads: tuple[str, ...] = ("num_attention_heads",)
    kv_heads: tuple[str, ...] = ()  # empty: as many kv heads as heads
    intermediate: tuple[str, ...] = ("intermediate_size",)
    intermediate_factor: int = 0  # > 0: the MLP width is this x hidden when the key is unset
    positions: tuple[str, ...] = ("max_position_embeddings",)
    positions_default: int = 2048
    activation: tuple[str, ...] = ("hidden_act",)
    activation_default: str = "gelu"
    hidden_dropout: tuple[str, ...] = ("hidden_dropout_prob",)
    attn_dropout: tuple[str, ...] = ("attention_probs_dropout_prob",)
    dropout_default: float = 0.0
    type_vocab: bool = False  # token-type (segment) embeddings
    tied_default: bool = False


@record(frozen=False)
class Dims:
    """A transformer's sizes as read from its config through its FamilyKeys."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    positions: int
    vocab: int
    activation: str
    hidden_dropout: float
    attn_dropout: float
    types: int
    tied: bool


def read_dims(cfg: dict[str, Any], keys: FamilyKeys) -> Dims:
    h = _int(cfg, *keys.hidden)
    layers = _int(cfg, *keys.layers)
    heads = _int(cfg, *keys.heads)
    kv = _int(cfg, *keys.kv_heads, default=heads) if keys.kv_heads else heads
    if keys.intermediate_factor:
        inter = _int(cfg, *keys.intermediate, default=0) or keys.intermediate_factor * h
    else:
        inter = _int(cfg, *keys.intermediate)
    return Dims(
        hidden=h,
        layers=layers,
        heads=heads,
        kv_heads=kv,
        head_dim=_int(cfg, "head_dim", default=h // max(heads, 1)),
        intermediate=inter,
        positions=_int(cfg, *keys.positions, default=keys.positions_default),
        vocab=_int(cfg, "vocab_size"),
        activation=_activation(cfg, *keys.activation, default=keys.activation_default),
        hidden_dropout=_float(cfg, *keys.hidden_dropout, default=keys.dropout_default),
        attn_dropout=_float(cfg, *keys.attn_dropout, default=keys.dropout_default),
        types=_int(cfg, "type_vocab_size", default=2) if keys.type_vocab else 0,
        tied=bool(cfg.get("tie_word_embeddings", keys.tied_default)),
    )


def _check_sizes(d: Dims, divisible: bool = True) -> None:
    for label, value in (("hidden size", d.hidden), ("layers", d.layers), ("heads", d.heads)):
        _positive(label, value)
    if divisible and d.hidden % d.heads:
        raise ConfigError(f"hidden size {d.hidden} is not divisible by {d.heads} heads")


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
    buckets = _int(cfg, "position_buckets", default=-1)
    span = _get(cfg, "max_relative_positions", default=-1)
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
        if _int(cfg, "conv_kernel_size", default=0):
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


def _bert_family(cfg: dict[str, Any], family: str, name: str) -> Architecture:
    kind, notes = head_kind(cfg, family)
    d = read_dims(cfg, BERT_KEYS[family])
    _check_sizes(d)
    _positive("vocab_size", d.vocab)
    h = d.hidden
    emb_width = _int(cfg, "embedding_size", default=h) if family in ("albert", "electra") else h
    weights, relative, rel_span, absolute = _bert_embeddings(cfg, family, d, emb_width)
    # ALBERT shares one group of layers across the depth.
    param_layers = d.layers
    if family == "albert":
        param_layers = _int(cfg, "num_hidden_groups", default=1) * _int(
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
        kv_heads=("num_key_value_heads",),
        activation_default="silu",
        hidden_dropout=(),
        attn_dropout=("attention_dropout",),
    ),
}
for _family in ("mistral", "qwen2"):
    DECODER_KEYS[_family] = DECODER_KEYS["llama"]


@record(frozen=False)
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
    dropout = _float(cfg, "embd_pdrop", default=0.1)
    return DecoderParts(weights, stack, Embedding(d.vocab, h, dropout=dropout), absolute=True)


def _opt_parts(cfg: dict[str, Any], d: Dims) -> DecoderParts:
    h, layers, inter = d.hidden, d.layers, d.intermediate
    bias = cfg.get("enable_bias", True)
    proj = _int(cfg, "word_embed_proj_dim", default=h)
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
        hidden_dropout=_float(cfg, "dropout", default=0.1),
        act_dropout=_float(cfg, "activation_dropout"),
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


@record(frozen=False)
class LlamaTraits:
    """How a LLaMA-style family departs from LLaMA (all read from the HF modeling code)."""

    qkv_bias: bool = False  # q/k/v biases whatever `attention_bias` says (Qwen2)
    qk_norm: str = "none"  # see Stack.qk_norm
    post_norms: bool = False  # Gemma 2/3: four norms per layer
    moe: str = "none"  # "mixtral" (num_local_experts) | "qwen" (num_experts, shared expert)
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
    "qwen3_moe": LlamaTraits(qk_norm="head", moe="qwen"),
    "deepseek_v2": LlamaTraits(moe="deepseek", mla=True),
    "deepseek_v3": LlamaTraits(moe="deepseek", mla=True),  # sigmoid router: same shapes
}
_LLAMA = FamilyKeys(
    kv_heads=("num_key_value_heads",),
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


def _moe_weights(cfg: dict[str, Any], d: Dims, kind: str) -> tuple[list[WeightGroup], MoE]:
    """Expert weights as transformers stores them (one 3-D gate_up and down tensor per layer),
    the router, the shared expert; and the layers that stay dense."""
    h = d.hidden
    if kind == "mixtral":
        experts = _int(cfg, "num_local_experts", default=8)
        width, shared, sparse_layers = d.intermediate, 0, d.layers
    elif kind == "deepseek":  # shared experts are one gated MLP of n_shared x the width
        experts = _int(cfg, "n_routed_experts", "num_experts", default=64)
        width = _int(cfg, "moe_intermediate_size")
        shared = width * _int(cfg, "n_shared_experts", default=0)
        first = _int(cfg, "first_k_dense_replace", default=0)
        freq = _int(cfg, "moe_layer_freq", default=1) or 1
        sparse_layers = sum(1 for i in range(d.layers) if i >= first and i % freq == 0)
    else:
        experts = _int(cfg, "num_experts", default=60)
        width = _int(cfg, "moe_intermediate_size")
        shared = _int(cfg, "shared_expert_intermediate_size", default=0)
        step = _int(cfg, "decoder_sparse_step", default=1) or 1
        dense_only = set(cfg.get("mlp_only_layers") or [])
        sparse_layers = sum(
            1 for i in range(d.layers) if i not in dense_only and experts and (i + 1) % step == 0
        )
    top_k = _positive("num_experts_per_tok", _int(cfg, "num_experts_per_tok", default=2))
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
        else _int(cfg, "q_lora_rank", default=1536),
        kv_rank=_positive("kv_lora_rank", _int(cfg, "kv_lora_rank", default=512)),
        nope=_int(cfg, "qk_nope_head_dim", default=128),
        rope=_positive("qk_rope_head_dim", _int(cfg, "qk_rope_head_dim", default=64)),
        v=_positive("v_head_dim", _int(cfg, "v_head_dim", default=128)),
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
        kv_heads = _int(cfg, "num_kv_heads", default=d.heads)
    else:
        kv_heads = 1 if cfg.get("multi_query", True) else d.heads
    parallel = new_arch or bool(cfg.get("parallel_attn", True))
    norms = _int(cfg, "num_ln_in_parallel_attn", default=2) if new_arch else 1 if parallel else 2
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


def _decoder(cfg: dict[str, Any], family: str, name: str) -> Architecture:
    kind, notes = head_kind(cfg, family)
    if kind not in ("causal-lm", "sequence-classification", "none"):
        notes.append(f"{family}: {kind} head not modelled, sizing the causal-lm head")
        kind = "causal-lm"
    d = read_dims(cfg, DECODER_KEYS[family])
    parts = DECODER_BUILDERS[family](cfg, d, family)
    # LLaMA-style configs may set head_dim apart from hidden / heads.
    _check_sizes(d, divisible=family not in LLAMA_TRAITS)
    _positive("vocab_size", d.vocab)
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


# ------------------------------------------------------------------------------ T5


def _t5(cfg: dict[str, Any], name: str) -> Architecture:
    kind, notes = head_kind(cfg, "t5")
    d = _positive("d_model", _int(cfg, "d_model"))
    d_kv = _positive("d_kv", _int(cfg, "d_kv", default=64))
    heads = _positive("num_heads", _int(cfg, "num_heads"))
    d_ff = _positive("d_ff", _int(cfg, "d_ff"))
    enc_layers = _positive("num_layers", _int(cfg, "num_layers"))
    dec_layers = _int(cfg, "num_decoder_layers", default=enc_layers)
    vocab = _positive("vocab_size", _int(cfg, "vocab_size"))
    buckets = _int(cfg, "relative_attention_num_buckets", default=32)
    ff_proj = str(cfg.get("feed_forward_proj", "relu"))
    gated = ff_proj.startswith("gated-")
    act = _activation({"a": ff_proj.removeprefix("gated-")}, "a", default="relu")
    dropout = _float(cfg, "dropout_rate", default=0.1)
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
        weights += linear("decoder.SelfAttention.qkv", d, inner, 3 * dec_layers, bias=False)
        weights += linear("decoder.SelfAttention.o", inner, d, dec_layers, bias=False)
        weights.append(WeightGroup("decoder.relative_attention_bias", (buckets, heads)))
        weights += linear("decoder.EncDecAttention.qkv", d, inner, 3 * dec_layers, bias=False)
        weights += linear("decoder.EncDecAttention.o", inner, d, dec_layers, bias=False)
        weights += linear("decoder.wi", d, d_ff, mlp_mats * dec_layers, bias=False)
        weights += linear("decoder.wo", d_ff, d, dec_layers, bias=False)
        weights += norm("decoder.layer_norm", d, 3 * dec_layers + 1, bias=False)
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
        max_positions=_int(cfg, "n_positions", default=512),
        absolute_positions=False,
        sdpa=False,
        notes=tuple(notes),
    )


# ------------------------------------------------------------------------ ModernBERT


def _modernbert(cfg: dict[str, Any], name: str) -> Architecture:
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
    _check_sizes(d)
    _positive("vocab_size", d.vocab)
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
    act = _activation(cfg, "classifier_activation", default=d.activation)
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
    emb_dropout = _float(cfg, "embedding_dropout")
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
        activation=_activation(cfg, "activation_function", default="gelu"),
        norm="layernorm",
        prenorm=prenorm,
        final_norm=prenorm,
        attn_dropout=_float(cfg, "attention_dropout"),
        hidden_dropout=dropout,
        act_dropout=_float(cfg, "activation_dropout"),
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


def _bart(cfg: dict[str, Any], family: str, name: str) -> Architecture:
    """BART (post-LN) and mBART (pre-LN, a final LayerNorm per stack): learned positions with
    an offset of 2, a LayerNorm on the embeddings, a tied LM head."""
    kind, notes = head_kind(cfg, family)
    if kind not in ("seq2seq-lm", "none"):
        notes.append(f"{family}: {kind} head not modelled, sizing the seq2seq-lm head")
        kind = "seq2seq-lm"
    d = _positive("d_model", _int(cfg, "d_model"))
    vocab = _positive("vocab_size", _int(cfg, "vocab_size"))
    positions = _int(cfg, "max_position_embeddings", default=1024)
    enc_layers = _positive("encoder_layers", _int(cfg, "encoder_layers", default=12))
    dec_layers = _positive("decoder_layers", _int(cfg, "decoder_layers", default=12))
    enc_heads = _positive("heads", _int(cfg, "encoder_attention_heads", default=16))
    dec_heads = _positive("heads", _int(cfg, "decoder_attention_heads", default=16))
    enc_ffn = _positive("encoder_ffn_dim", _int(cfg, "encoder_ffn_dim", default=4 * d))
    dec_ffn = _positive("decoder_ffn_dim", _int(cfg, "decoder_ffn_dim", default=4 * d))
    for heads in (enc_heads, dec_heads):
        if d % heads:
            raise ConfigError(f"d_model {d} is not divisible by {heads} heads")
    prenorm = family == "mbart"
    dropout = _float(cfg, "dropout", default=0.1)
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


def _whisper(cfg: dict[str, Any], name: str) -> Architecture:
    """Whisper: two GELU 1-D convs over the log-mel input (the second with stride 2) make a
    fixed 1500-frame encoder input with sinusoid-initialised positions; pre-LN encoder and
    decoder (k_proj without a bias), a final LayerNorm each, the LM head tied."""
    kind, notes = head_kind(cfg, "whisper")
    d = _positive("d_model", _int(cfg, "d_model"))
    vocab = _positive("vocab_size", _int(cfg, "vocab_size"))
    mel = _positive("num_mel_bins", _int(cfg, "num_mel_bins", default=80))
    src = _positive("max_source_positions", _int(cfg, "max_source_positions", default=1500))
    tgt = _positive("max_target_positions", _int(cfg, "max_target_positions", default=448))
    enc_layers = _positive("encoder_layers", _int(cfg, "encoder_layers"))
    dec_layers = _positive("decoder_layers", _int(cfg, "decoder_layers"))
    heads = _positive("heads", _int(cfg, "encoder_attention_heads"))
    dec_heads = _positive("heads", _int(cfg, "decoder_attention_heads", default=heads))
    enc_ffn = _positive("encoder_ffn_dim", _int(cfg, "encoder_ffn_dim", default=4 * d))
    dec_ffn = _positive("decoder_ffn_dim", _int(cfg, "decoder_ffn_dim", default=4 * d))
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
    dropout = _float(cfg, "dropout")
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


# ----------------------------------------------------------------------------- ViT


def _vision_encoder_stack(
    cfg: dict[str, Any], layers: int, hidden: int, heads: int, inter: int, **extra: Any
) -> Stack:
    """A ViT-style encoder stack (ViT, and each Swin stage): pre-LN, GELU MLP, full heads,
    LoRA on q and v; `extra` holds what differs (final norm, fp32 softmax, windows)."""
    return Stack(
        role="encoder",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        head_dim=hidden // heads,
        intermediate=inter,
        activation=_activation(cfg, "hidden_act", default="gelu"),
        gated=False,
        norm="layernorm",
        prenorm=True,
        causal=False,
        attn_dropout=_float(cfg, "attention_probs_dropout_prob"),
        hidden_dropout=_float(cfg, "hidden_dropout_prob"),
        lora_targets=((hidden, hidden), (hidden, hidden)),
        **extra,
    )


def _vit(cfg: dict[str, Any], name: str) -> Architecture:
    kind, notes = head_kind(cfg, "vit")
    h = _positive("hidden_size", _int(cfg, "hidden_size"))
    layers = _positive("num_hidden_layers", _int(cfg, "num_hidden_layers"))
    heads = _positive("num_attention_heads", _int(cfg, "num_attention_heads"))
    inter = _positive("intermediate_size", _int(cfg, "intermediate_size"))
    image = _positive("image_size", _int(cfg, "image_size", default=224))
    patch = _positive("patch_size", _int(cfg, "patch_size", default=16))
    channels = _positive("num_channels", _int(cfg, "num_channels", default=3))
    if h % heads:
        raise ConfigError(f"hidden size {h} is not divisible by {heads} heads")
    bias = bool(cfg.get("qkv_bias", True))
    tokens = (image // patch) ** 2 + 1
    weights: list[WeightGroup] = []
    weights += linear("patch_embeddings", channels * patch * patch, h)
    weights.append(WeightGroup("cls_token", (h,)))
    weights.append(WeightGroup("position_embeddings", (tokens, h)))
    weights += norm("layernorm_before_after", h, 2 * layers)
    weights += linear("qkv", h, h, 3 * layers, bias=bias)
    weights += linear("attention.output", h, h, layers)
    weights += linear("intermediate", h, inter, layers)
    weights += linear("output", inter, h, layers)
    weights += norm("layernorm", h)
    labels = num_labels(cfg)
    if kind == "image-classification":
        weights += linear("classifier", h, labels)
        head = Head(kind, labels=labels, pooled=True)
    else:
        weights += linear("pooler", h, h)
        head = Head("none")
    stack = _vision_encoder_stack(cfg, layers, h, heads, inter, final_norm=True)
    return Architecture(
        name=name,
        family="vit",
        kind="vit",
        weights=tuple(weights),
        stacks=(stack,),
        embedding=None,
        head=head,
        image_size=image,
        patch_size=patch,
        channels=channels,
        sdpa=True,
        notes=tuple(notes),
    )


# -------------------------------------------------------------------------- ResNet


def _resnet(cfg: dict[str, Any], name: str) -> Architecture:
    _, notes = head_kind(cfg, "resnet")
    channels = _positive("num_channels", _int(cfg, "num_channels", default=3))
    stem = _positive("embedding_size", _int(cfg, "embedding_size", default=64))
    sizes = cfg.get("hidden_sizes") or [256, 512, 1024, 2048]
    depths = cfg.get("depths") or [3, 4, 6, 3]
    if not all(isinstance(x, int) and x > 0 for x in [*sizes, *depths]):
        raise ConfigError("hidden_sizes and depths must be lists of positive integers")
    if len(sizes) != len(depths):
        raise ConfigError("hidden_sizes and depths differ in length")
    layer_type = str(cfg.get("layer_type", "bottleneck"))
    if layer_type not in ("bottleneck", "basic"):
        raise ConfigError(f"unsupported layer_type {layer_type!r}")
    first_stride = 2 if cfg.get("downsample_in_first_stage", False) else 1
    stages = []
    in_ch = stem
    for i, (out_ch, depth) in enumerate(zip(sizes, depths, strict=True)):
        stages.append(ResNetStage(depth, in_ch, out_ch, first_stride if i == 0 else 2))
        in_ch = out_ch
    labels = num_labels(cfg)

    def conv(cin: int, cout: int, k: int) -> list[WeightGroup]:
        return [
            WeightGroup(f"conv{k}x{k}", (cout, cin, k, k), matmul=True),
            WeightGroup("bn", (cout,), 2),
        ]

    weights: list[WeightGroup] = conv(channels, stem, 7)
    for stage in stages:
        for j in range(stage.depth):
            cin = stage.in_channels if j == 0 else stage.out_channels
            stride = stage.stride if j == 0 else 1
            cout = stage.out_channels
            if cin != cout or stride != 1:
                weights += conv(cin, cout, 1)  # shortcut
            if layer_type == "bottleneck":
                r = cout // 4
                weights += conv(cin, r, 1) + conv(r, r, 3) + conv(r, cout, 1)
            else:
                weights += conv(cin, cout, 3) + conv(cout, cout, 3)
    weights += linear("classifier", sizes[-1], labels)
    return Architecture(
        name=name,
        family="resnet",
        kind="cnn",
        weights=tuple(weights),
        head=Head("image-classification", labels=labels, pooled=True),
        image_size=224,
        channels=channels,
        resnet=ResNet(channels, stem, layer_type, tuple(stages), labels),
        sdpa=False,
        notes=tuple(notes),
    )


# ------------------------------------------------------------------------ ConvNeXt


def _convnext(cfg: dict[str, Any], name: str) -> Architecture:
    _, notes = head_kind(cfg, "convnext")
    channels = _positive("num_channels", _int(cfg, "num_channels", default=3))
    patch = _positive("patch_size", _int(cfg, "patch_size", default=4))
    widths = tuple(cfg.get("hidden_sizes") or [96, 192, 384, 768])
    depths = tuple(cfg.get("depths") or [3, 3, 9, 3])
    if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in widths + depths):
        raise ConfigError("hidden_sizes and depths must be lists of positive integers")
    if len(widths) != len(depths):
        raise ConfigError("hidden_sizes and depths differ in length")
    labels = num_labels(cfg)
    scale = _float(cfg, "layer_scale_init_value", default=1e-6) > 0
    weights = [WeightGroup("patch_embeddings", (widths[0], channels, patch, patch), matmul=True)]
    weights.append(WeightGroup("patch_embeddings.bias", (widths[0],)))
    weights += norm("embeddings.layernorm", widths[0])
    for i, (width, depth) in enumerate(zip(widths, depths, strict=True)):
        if i:  # downsampling: LayerNorm, then a 2x2 stride-2 conv
            weights += norm(f"stage{i}.downsample.norm", widths[i - 1])
            weights.append(
                WeightGroup(f"stage{i}.downsample", (width, widths[i - 1], 2, 2), 1, True)
            )
            weights.append(WeightGroup(f"stage{i}.downsample.bias", (width,)))
        weights.append(WeightGroup(f"stage{i}.dwconv", (width, 1, 7, 7), depth, matmul=True))
        weights.append(WeightGroup(f"stage{i}.dwconv.bias", (width,), depth))
        weights += norm(f"stage{i}.layernorm", width, depth)
        weights += linear(f"stage{i}.pwconv1", width, 4 * width, depth)
        weights += linear(f"stage{i}.pwconv2", 4 * width, width, depth)
        if scale:
            weights.append(WeightGroup(f"stage{i}.layer_scale", (width,), depth))
    weights += norm("layernorm", widths[-1])
    weights += linear("classifier", widths[-1], labels)
    return Architecture(
        name=name,
        family="convnext",
        kind="cnn",
        weights=tuple(weights),
        head=Head("image-classification", labels=labels, pooled=True),
        image_size=_int(cfg, "image_size", default=224),
        channels=channels,
        convnext=ConvNeXt(channels, patch, widths, depths, labels),
        sdpa=False,
        notes=tuple(notes),
    )


# ---------------------------------------------------------------------------- Swin


def _swin(cfg: dict[str, Any], name: str) -> Architecture:
    """Swin: a 4x4 patch stem + LayerNorm, stages of pre-LN blocks with (shifted) window
    attention and a relative-position bias table per block, patch merging (LayerNorm over 4C,
    a linear to 2C) between stages, a final LayerNorm, average pooling and a classifier. One
    Stack per stage, whose `window` is the tokens per attention window."""
    _, notes = head_kind(cfg, "swin")
    embed = _positive("embed_dim", _int(cfg, "embed_dim", default=96))
    depths = tuple(cfg.get("depths") or [2, 2, 6, 2])
    heads = tuple(cfg.get("num_heads") or [3, 6, 12, 24])
    if len(depths) != len(heads) or not all(
        isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in depths + heads
    ):
        raise ConfigError("depths and num_heads must be equal-length lists of positive integers")
    window = _positive("window_size", _int(cfg, "window_size", default=7))
    patch = _positive("patch_size", _int(cfg, "patch_size", default=4))
    image = _positive("image_size", _int(cfg, "image_size", default=224))
    channels = _positive("num_channels", _int(cfg, "num_channels", default=3))
    ratio = _float(cfg, "mlp_ratio", default=4.0)
    bias = bool(cfg.get("qkv_bias", True))
    labels = num_labels(cfg)
    weights = [WeightGroup("patch_embeddings", (embed, channels, patch, patch), matmul=True)]
    weights.append(WeightGroup("patch_embeddings.bias", (embed,)))
    weights += norm("embeddings.norm", embed)
    stacks = []
    res = image // patch
    for i, (depth, n) in enumerate(zip(depths, heads, strict=True)):
        c = embed * 2**i
        if c % n:
            raise ConfigError(f"stage {i} width {c} is not divisible by {n} heads")
        inter = int(ratio * c)
        win = min(window, res)
        weights += norm(f"stage{i}.layernorms", c, 2 * depth)
        weights += linear(f"stage{i}.qkv", c, c, 3 * depth, bias=bias)
        weights += linear(f"stage{i}.o_proj", c, c, depth)
        weights.append(
            WeightGroup(f"stage{i}.relative_position_bias", ((2 * win - 1) ** 2, n), depth)
        )
        weights += linear(f"stage{i}.fc1", c, inter, depth) + linear(
            f"stage{i}.fc2", inter, c, depth
        )
        if i < len(depths) - 1:  # patch merging
            weights += norm(f"stage{i}.downsample.norm", 4 * c)
            weights += linear(f"stage{i}.downsample.reduction", 4 * c, 2 * c, bias=False)
        stacks.append(
            _vision_encoder_stack(
                cfg, depth, c, n, inter, softmax_fp32=True, window=win * win
            )
        )
        res = -(-res // 2)
    last = embed * 2 ** (len(depths) - 1)
    weights += norm("layernorm", last)
    weights += linear("classifier", last, labels)
    return Architecture(
        name=name,
        family="swin",
        kind="swin",
        weights=tuple(weights),
        stacks=tuple(stacks),
        head=Head("image-classification", labels=labels, pooled=True),
        image_size=image,
        patch_size=patch,
        channels=channels,
        sdpa=True,
        notes=tuple(notes),
    )


# ---------------------------------------------------------------------------- CLIP


def _clip_tower(cfg: dict[str, Any], role: str, family: str) -> tuple[dict[str, Any], Stack]:
    """One CLIP/SigLIP tower's sizes (text_config / vision_config) and its pre-LN Stack."""
    sub = cfg.get(f"{role}_config")
    if not isinstance(sub, dict):
        raise ConfigError(f"{family}: missing {role}_config")
    default = {"text": (512, 2048, 8), "vision": (768, 3072, 12)}[role]
    h = _positive("hidden_size", _int(sub, "hidden_size", default=default[0]))
    heads = _positive("num_attention_heads", _int(sub, "num_attention_heads", default=default[2]))
    if h % heads:
        raise ConfigError(f"hidden size {h} is not divisible by {heads} heads")
    act = "quick_gelu" if family == "clip" else "gelu_pytorch_tanh"
    stack = Stack(
        role="encoder",
        layers=_positive("num_hidden_layers", _int(sub, "num_hidden_layers", default=12)),
        hidden=h,
        heads=heads,
        kv_heads=heads,
        head_dim=h // heads,
        intermediate=_positive(
            "intermediate_size", _int(sub, "intermediate_size", default=default[1])
        ),
        activation=_activation(sub, "hidden_act", default=act),
        gated=False,
        norm="layernorm",
        prenorm=True,
        causal=role == "text" and family == "clip",
        attn_dropout=_float(sub, "attention_dropout"),
        softmax_fp32=True,
        # CLIP: a final LayerNorm over the text tokens; SigLIP: over both towers' tokens.
        final_norm=role == "text" or family == "siglip",
        lora_targets=((h, h), (h, h)),
    )
    return sub, stack


def _tower_weights(prefix: str, st: Stack) -> list[WeightGroup]:
    h = st.hidden
    weights = linear(f"{prefix}.qkvo", h, h, 4 * st.layers)
    weights += norm(f"{prefix}.layer_norms", h, 2 * st.layers + 1)  # + final / post LN
    weights += linear(f"{prefix}.fc1", h, st.intermediate, st.layers)
    return weights + linear(f"{prefix}.fc2", st.intermediate, h, st.layers)


def _clip(cfg: dict[str, Any], family: str, name: str) -> Architecture:
    """CLIP: a causal text transformer (final LayerNorm, EOS pooling) and a ViT (class token,
    a LayerNorm before the layers and one on the pooled CLS row), each projected to
    `projection_dim`, trained with the contrastive loss on the batch's similarity matrix.
    SigLIP: a bidirectional text tower pooled at the last token with a linear head, a ViT
    without class token, a LayerNorm over all patches and an attention-pooling head (a probe
    query, multi-head attention, LayerNorm, MLP), trained with the pairwise sigmoid loss."""
    _, notes = head_kind(cfg, family)
    text_cfg, text = _clip_tower(cfg, "text", family)
    vision_cfg, vision = _clip_tower(cfg, "vision", family)
    vocab = _positive("vocab_size", _int(text_cfg, "vocab_size", default=49408))
    positions = _int(text_cfg, "max_position_embeddings", default=77)
    image = _positive("image_size", _int(vision_cfg, "image_size", default=224))
    patch = _positive("patch_size", _int(vision_cfg, "patch_size", default=32))
    channels = _positive("num_channels", _int(vision_cfg, "num_channels", default=3))
    ht, hv = text.hidden, vision.hidden
    patches = (image // patch) ** 2
    weights = _tower_weights("text", text) + _tower_weights("vision", vision)
    weights += [WeightGroup("text.token_embedding", (vocab, ht))]
    weights += [WeightGroup("text.position_embedding", (positions, ht))]
    weights += [WeightGroup("vision.patch_embedding", (hv, channels, patch, patch), matmul=True)]
    if family == "clip":
        proj = _positive("projection_dim", _int(cfg, "projection_dim", default=512))
        weights += [WeightGroup("vision.class_embedding", (hv,))]
        weights += [WeightGroup("vision.position_embedding", (patches + 1, hv))]
        weights += norm("vision.pre_layrnorm", hv)
        weights += [WeightGroup("text_projection", (proj, ht), matmul=True)]
        weights += [WeightGroup("visual_projection", (proj, hv), matmul=True)]
        weights += [WeightGroup("logit_scale", (1,))]
    else:
        proj = _int(text_cfg, "projection_size", default=ht)
        weights += [WeightGroup("vision.patch_embedding.bias", (hv,))]
        weights += [WeightGroup("vision.position_embedding", (patches, hv))]
        weights += linear("text.head", ht, proj)
        weights += [WeightGroup("vision.head.probe", (hv,))]
        weights += linear("vision.head.attention.in_proj", hv, 3 * hv)
        weights += linear("vision.head.attention.out_proj", hv, hv)
        weights += norm("vision.head.layernorm", hv)
        weights += linear("vision.head.fc1", hv, vision.intermediate)
        weights += linear("vision.head.fc2", vision.intermediate, hv)
        weights += [WeightGroup("logit_scale_and_bias", (1,), 2)]
    return Architecture(
        name=name,
        family=family,
        kind="dual-encoder",
        weights=tuple(weights),
        stacks=(vision, text),
        embedding=Embedding(vocab, ht, int_inputs=1),
        head=Head("contrastive", labels=proj, pooled=True),
        max_positions=positions,
        absolute_positions=True,
        image_size=image,
        patch_size=patch,
        channels=channels,
        sdpa=True,
        notes=tuple(notes),
    )


# ---------------------------------------------------------------------------- entry


def from_hf_config(config: dict[str, Any], name: str = "") -> Architecture:
    """Build an Architecture from a Hugging Face config dict; ConfigError when unsupported."""
    if not isinstance(config, dict):
        raise ConfigError("config is not a JSON object")
    family = config.get("model_type")
    if not isinstance(family, str) or not family:
        raise ConfigError("config has no model_type")
    family = {"deberta_v2": "deberta-v2", "gpt-neox": "gpt_neox"}.get(family, family)
    name = name or str(config.get("_name_or_path") or family)
    if family in ENCODER_FAMILIES:
        return _bert_family(config, family, name)
    if family in ("bart", "mbart"):
        return _bart(config, family, name)
    if family == "modernbert":
        return _modernbert(config, name)
    if family == "whisper":
        return _whisper(config, name)
    if family in DECODER_FAMILIES:
        return _decoder(config, family, name)
    if family == "t5":
        return _t5(config, name)
    if family == "vit":
        return _vit(config, name)
    if family == "resnet":
        return _resnet(config, name)
    if family == "convnext":
        return _convnext(config, name)
    if family == "swin":
        return _swin(config, name)
    if family in ("clip", "siglip"):
        return _clip(config, family, name)
    raise ConfigError(f"unsupported model_type {family!r} (supported: {', '.join(FAMILIES)})")


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


def gpt_from_parameters(parameters: float, name: str = "") -> Architecture:
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
    arch = _decoder(config, "gpt2", name or f"gpt-{parameters / 1e6:g}M")
    return replace(arch, synthetic=True, absolute_positions=False, notes=())
