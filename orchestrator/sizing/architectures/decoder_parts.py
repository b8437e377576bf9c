"""Parts only some decoders have: sparse MoE layers (Mixtral, Qwen2/3-MoE, DeepSeek) and
DeepSeek's multi-head latent attention; a `Stack` holds them (shapes.Stack.moe, .mla)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MoE:
    """A sparse MLP: `experts` gated MLPs of width `intermediate`, `top_k` per token, plus an
    optional always-on shared expert (Qwen2-MoE: gated by a sigmoid of a linear)."""

    experts: int
    top_k: int
    intermediate: int
    layers: int  # how many of the stack's layers are MoE layers
    shared_intermediate: int = 0
    shared_gate: bool = False


@dataclass(frozen=True, slots=True)
class MLA:
    """DeepSeek multi-head latent attention: queries straight (or through a q LoRA rank) and
    keys/values expanded from a `kv_rank` latent plus one shared rotary key of `rope` dims."""

    q_rank: int  # 0: a plain q_proj
    kv_rank: int
    nope: int  # per-head query/key dims without rotary positions
    rope: int  # per-head rotary dims (the shared key's width)
    v: int  # per-head value dims
