"""The shapes memory and FLOPs are computed from: weight groups, transformer stacks,
embeddings, heads, and the `Architecture` that holds them. The parts only some families have
are beside it and load with their builders: CNN stages (`cnn`), and the MoE layers and latent
attention of some decoders (`decoder_parts`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, ClassVar

from orchestrator.sizing.architectures.kinds import HEAD_KINDS, KINDS, HeadKind, Kind

if TYPE_CHECKING:
    from orchestrator.sizing.architectures.cnn import ConvNeXt, ResNet
    from orchestrator.sizing.architectures.decoder_parts import MLA, MoE
    from orchestrator.sizing.job import JobSpec


class ConfigError(ValueError):
    """A config dict that does not describe a supported model."""


@dataclass(frozen=True, slots=True)
class WeightGroup:
    """`count` parameter tensors of one `shape` (e.g. 24 query weights of 1024 x 1024)."""

    name: str
    shape: tuple[int, ...]
    count: int = 1
    matmul: bool = False  # a weight applied by a matmul/conv (cast to half under autocast)

    @property
    def numel(self) -> int:
        return math.prod(self.shape) * self.count


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class Embedding:
    """Token embeddings and what happens before the first layer."""

    vocab: int
    width: int  # embedding width (ALBERT/ELECTRA: smaller than hidden, then projected)
    int_inputs: int = 1  # int64 index tensors per token that embedding lookups save
    norm: bool = False  # LayerNorm on the embeddings (BERT family)
    dropout: float = 0.0
    projected: bool = False  # a linear from `width` to the hidden size


@dataclass(frozen=True, slots=True)
class Head:
    """The task head on top of the last stack (LM, MLM, classifier, ...)."""

    kind: str  # one of HEADS
    vocab: int = 0  # LM heads
    transform: int = 0  # width of an MLM transform (dense + act + norm) before the decoder
    transform_act: str = "gelu"
    labels: int = 0  # classification heads
    pooled: bool = False  # reads one (CLS) position
    softcap: bool = False  # Gemma 2: tanh soft-capping of the logits

    @property
    def traits(self) -> HeadKind:
        """What this kind of head means to the formulas (kinds.HEAD_KINDS)."""
        return HEAD_KINDS.get(self.kind) or HeadKind(self.kind)


@dataclass(frozen=True)  # no slots: `parameters` is a cached_property
class Architecture:
    """A model's shapes: its weight groups, stacks, embeddings and head (or CNN stages)."""

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
    traced: ClassVar[bool] = False  # activations come from a trace (sizing/trace)

    @property
    def traits(self) -> Kind:
        """What this kind of model means to the formulas (kinds.KINDS)."""
        return KINDS.get(self.kind) or Kind(self.kind)

    def traced_activation_bytes(self, job: JobSpec) -> int | None:
        """Saved-activation bytes from a trace; None: use the analytic formulas."""
        return None

    def traced_flops_per_sample(self, job: JobSpec) -> float | None:
        """Training FLOPs per sample from a trace; None: use the analytic count."""
        return None

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
