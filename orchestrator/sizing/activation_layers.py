"""Saved-for-backward bytes of one transformer layer, its stack's tail and the task head, per
tensor that autograd keeps in the `transformers` implementation (docs/memory-model.md,
"Activations"); and the precision conventions (`Dtypes`) every memory formula uses."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.sizing.architectures import Architecture, Stack


@dataclass(frozen=True, slots=True)
class Dtypes:
    """Bytes per element of each kind of tensor under one precision mode."""

    param: int  # stored weights
    grad: int
    state: int  # optimizer state elements
    act: int  # matmul outputs and element-wise results computed from them
    stream: int  # residual stream and norm inputs: fp32 under autocast
    softmax: int  # autocast runs softmax in fp32
    amp: bool  # autocast: a matmul casts an fp32 input to a fresh half copy each call
    mask: int = 1  # dropout mask (bool on CUDA)

    def cast(self, consumers: int = 1) -> int:
        """A matmul input taken from the fp32 stream: under autocast every matmul that reads
        it saves its own half-precision copy (the cast cache holds weights only)."""
        return self.act * consumers if self.amp else self.stream


def dtypes(precision: str, mask_bytes: int = 1) -> Dtypes:
    if precision == "fp32":
        return Dtypes(4, 4, 4, 4, 4, 4, False, mask_bytes)
    if precision in ("amp-fp16", "amp-bf16"):
        return Dtypes(4, 4, 4, 2, 4, 4, True, mask_bytes)
    if precision == "bf16":
        return Dtypes(2, 2, 2, 2, 2, 2, False, mask_bytes)
    raise ValueError(f"unknown precision {precision!r}")


def norm_bytes(st: Stack, dt: Dtypes, frozen: bool, shares_input: bool = False) -> float:
    """Bytes per token a norm saves. LayerNorm: its input plus fp32 mean and rstd.
    HF RMSNorm: an fp32 copy of its input, fp32 rsqrt, and (for the weight's gradient) the
    normalised tensor."""
    h = st.hidden
    if st.norm == "layernorm":
        return (0 if shares_input else h * dt.stream) + 8
    upcast = 0 if shares_input else h * (4 if dt.stream < 4 else dt.stream)
    return upcast + 4 + (0 if frozen else h * dt.stream)


def _attention_bytes(
    st: Stack, b: int, sq: int, skv: int, dt: Dtypes, eager: bool, causal_src: bool = True
) -> float:
    """Saved tensors of the attention core (after the projections, before the output one)."""
    tq, tk = b * sq, b * skv
    if not eager:
        # SDPA flash / memory-efficient kernels: q, k, v (GQA at kv width), the output and
        # fp32 log-sum-exp rows; dropout is regenerated from the RNG state, no mask stored.
        return (2 * tq * st.q_width + 2 * tk * st.kv_width) * dt.act + b * st.heads * sq * 4
    # Eager: q, k and v are copied into the batched-matmul layout (HF `repeat_kv` expands GQA
    # keys and values to full width; with one kv head and a batch of one, its reshape stays a
    # stride-0 view that matmul folds without a copy), then the score matrices.
    kv_saved = st.kv_width if st.kv_heads == 1 and b == 1 else st.q_width
    total = (tq * st.q_width + 2 * tk * kv_saved) * dt.act
    per_score = dt.softmax
    if st.attn_dropout > 0:
        per_score += dt.mask + dt.softmax  # mask and the dropped-out probabilities
    if dt.amp or (st.softmax_fp32 and dt.act < 4):
        per_score += dt.act  # half copy of the probabilities for the PV matmul
    if st.attn_softcap:
        per_score += dt.act  # Gemma 2: tanh(scores / cap) keeps its output
    # Swin: scores only within each window of `st.window` tokens (+ the bias-table indices).
    total += b * st.heads * sq * (st.window or skv) * per_score + st.window**2 * 8
    if st.relative == "deberta":
        total += _deberta_bytes(st, b, sq, dt)
    return total


def _deberta_bytes(st: Stack, b: int, s: int, dt: Dtypes) -> float:
    """DeBERTa-v2 disentangled attention: content->position and position->content scores."""
    h, heads, span = st.hidden, st.heads, st.rel_span
    total = b * s * st.q_width * dt.act  # a second key copy for p2c
    total += 2 * s * s * 8  # c2p and p2c gather indices (int64, expanded views of s x s)
    total += 2 * b * heads * s * span * dt.act  # c2p and p2c scores before the gather
    total += 2 * b * h * span * dt.act  # position keys and queries, repeated over the batch
    total += b * s * s  # boolean attention mask for the masked fill
    if st.hidden_dropout > 0:
        total += span * h * (dt.mask + dt.cast(2))  # dropout of the relative embeddings
    return total


def activation_fn_bytes(name: str, dt: Dtypes) -> float:
    """Bytes per element an MLP activation function saves for backward.

    HF's `gelu_new` (NewGELUActivation) is a Python formula: `pow` keeps its input, `tanh` its
    output and the final product both factors (0.5 x and 1 + tanh). CUDA autocast runs `pow`
    in fp32 (aten/src/ATen/autocast_mode.cpp, the fp32 list), so under amp pow's input copy,
    tanh and 1 + tanh are fp32 and only 0.5 x stays half. `quick_gelu` keeps x and sigmoid.
    """
    if name == "gelu_new":
        wide = 4 if dt.amp else dt.act
        return 3 * wide + dt.act
    return (2 if name == "quick_gelu" else 1) * dt.act


def _mlp_bytes(st: Stack, dt: Dtypes, frozen: bool) -> float:
    """Bytes per token saved inside the MLP, after its input projection(s)."""
    inter, a = st.intermediate, dt.act
    keep_linear = not frozen
    if st.gated:
        # act(gate) saves gate; the product saves act(gate) and up; down reads the product.
        per = 3 * a + (a if keep_linear else 0)
    elif st.activation == "relu":
        per = a  # relu saves its output, which is also the down projection's input
        if st.act_dropout > 0:
            per += dt.mask + (a if keep_linear else 0)
        return inter * per
    else:
        per = activation_fn_bytes(st.activation, dt)
        if st.act_dropout > 0:
            per += dt.mask
        per += a if keep_linear else 0
    return inter * per


def _qk_norm_bytes(st: Stack, dt: Dtypes, frozen: bool) -> float:
    """Per token: RMSNorm of the queries and keys (Qwen3, Gemma 3: per head; OLMo-2: over the
    whole width), each keeping an fp32 input, fp32 rsqrt rows and the normalised tensor."""
    if st.qk_norm == "none":
        return 0.0
    rows = st.heads + st.kv_heads if st.qk_norm == "head" else 2
    width = st.q_width + st.kv_width
    upcast = width * (4 if dt.stream < 4 else dt.stream)
    return upcast + 4 * rows + (0 if frozen else width * dt.stream)


def _moe_bytes(st: Stack, dt: Dtypes) -> float:
    """Per token, an MoE MLP as transformers runs it in eager mode: the router's input and fp32
    softmax, the top-k indices; for each of the top-k experts the gathered input row, the
    gate/up output, the activation, the product, the down output (scaled by the routing
    weight) and the gather indices; the shared expert as a dense gated MLP plus its gate."""
    m, h, a = st.moe, st.hidden, dt.act
    if m is None:
        return 0.0
    # Readers of the MLP input: the router, the shared expert's gate/up, its gate linear.
    readers = 1 + (2 if m.shared_intermediate else 0) + (1 if m.shared_gate else 0)
    total = h * dt.cast(readers) + m.experts * 4 + m.top_k * 8
    total += m.top_k * ((2 * h + 4 * m.intermediate) * a + 8 + 8 + 4)
    if m.shared_intermediate:
        total += 4 * m.shared_intermediate * a
    if m.shared_gate:
        total += h * a + 4 + 4  # sigmoid gate and its product
    return total


def _mla_bytes(st: Stack, b: int, s: int, dt: Dtypes, eager: bool, lora: bool) -> float:
    """DeepSeek latent attention, from the projections' input to o_proj's input: the latent
    kv_a output (kept whole by its RMSNorm, which reads a slice of it) with rsqrt and the
    normalised latent, kv_b's input, the assembled queries and keys (heads x (nope + rope)),
    kv_b's output (the values are a view of it), o_proj's input, and the score terms."""
    m, t, heads = st.mla, b * s, st.heads
    if m is None:
        return 0.0
    qk = heads * (m.nope + m.rope)
    total = t * st.hidden * dt.cast(1 if lora else 2)  # q_proj (or q_a) and kv_a read it
    if m.q_rank:  # q_a output through its RMSNorm into q_b
        total += t * (m.q_rank * (4 if dt.stream < 4 else dt.stream) + 4)
        total += t * m.q_rank * (dt.stream + dt.cast(1))
    latent = m.kv_rank + m.rope
    total += t * (latent * (4 if dt.stream < 4 else dt.stream) + 4 + m.kv_rank * dt.stream)
    total += t * m.kv_rank * dt.cast(1)  # kv_b's input
    total += t * (2 * qk + heads * (m.nope + m.v)) * dt.act  # queries, keys, kv_b output
    if not lora:
        total += t * heads * m.v * dt.act  # o_proj's input
    if eager:
        per_score = dt.softmax + (dt.act if dt.amp else 0)
        if st.attn_dropout > 0:
            per_score += dt.mask + dt.softmax
        return total + b * heads * s * s * per_score
    return total + t * heads * m.v * dt.act + b * heads * s * 4  # SDPA output, log-sum-exp


def _mlp_block_bytes(st: Stack, t: int, dt: Dtypes, lora: bool, sparse: bool) -> float:
    """The MLP sub-block's saved bytes after its norm: dense, or MoE for a sparse layer."""
    if sparse and st.moe is not None:
        return t * _moe_bytes(st, dt)
    total = 0.0
    if not lora and not (st.single_norm and not dt.amp):
        total += t * st.hidden * dt.cast(2 if st.gated else 1)  # MLP input projection(s)' input
    return total + t * _mlp_bytes(st, dt, lora)


def layer_bytes(
    st: Stack,
    b: int,
    s: int,
    src: int,
    dt: Dtypes,
    eager: bool,
    lora_rank: int = 0,
    sparse: bool = False,
) -> float:
    """Everything one layer saves for backward (`src`: encoder length for cross-attention;
    `sparse`: an MoE layer of an MoE stack).

    With LoRA (`lora_rank` > 0) the frozen linears keep no inputs (their weight gradients are
    not needed); non-linearities, norms and attention still save theirs for the gradient
    that flows back to the adapters of earlier layers.
    """
    lora = lora_rank > 0
    t = b * s
    h = st.hidden
    mask = dt.mask if st.hidden_dropout > 0 else 0
    qkv_readers = 1 if st.fused_qkv else (2 if lora else 3)  # LoRA: only the q/v adapters
    total = 0.0
    if st.prenorm:
        total += t * norm_bytes(st, dt, lora)
    if st.mla is not None:
        total += _mla_bytes(st, b, s, dt, eager, lora)
    else:
        total += t * h * dt.cast(qkv_readers)  # the q/k/v projections' input
        total += t * _qk_norm_bytes(st, dt, lora)
        total += _attention_bytes(st, b, s, s, dt, eager)
        if not lora:
            total += t * st.q_width * dt.act  # output projection's input
    if st.post_norms:  # Gemma 2/3: norms on the attention and the MLP outputs
        total += 2 * t * norm_bytes(st, dt, lora)
    if st.attn_out_dropout:
        total += t * h * mask
    if not st.prenorm:
        total += t * (h * dt.stream + 8)  # post-LN LayerNorm input and statistics
    if st.cross_attention:
        total += t * norm_bytes(st, dt, lora)
        total += t * h * dt.cast(1)  # q projection input (k, v read the encoder output)
        total += _attention_bytes(st, b, s, src, dt, eager)
        if not lora:
            total += t * st.q_width * dt.act
        total += t * h * mask
    if st.prenorm and not st.single_norm:
        total += t * norm_bytes(st, dt, lora, shares_input=st.parallel_residual)
    total += _mlp_block_bytes(st, t, dt, lora, sparse)
    if st.mlp_out_dropout:
        total += t * h * mask
    if not st.prenorm:
        total += t * (h * dt.stream + 8)
    if lora:
        total += t * len(st.lora_targets) * lora_rank * dt.act  # adapter A outputs
    return total


def stack_tail_bytes(st: Stack, t: int, dt: Dtypes, lora: bool) -> float:
    """After the last layer: final norm (pre-LN stacks) and T5's final dropout."""
    if not st.final_norm:
        return 0.0
    total = t * norm_bytes(st, dt, lora)
    if st.relative == "t5" and st.hidden_dropout > 0:
        total += t * st.hidden * dt.mask
    return total


def _lm_head_bytes(arch: Architecture, b: int, t: int, dt: Dtypes, keep_linear: bool) -> float:
    """lm_head input; log-softmax output in fp32 (HF upcasts logits for the loss); labels."""
    head, h = arch.head, arch.stacks[-1].hidden
    softcap = t * head.vocab * dt.act if head.softcap else 0  # Gemma 2: tanh output
    return t * h * dt.cast(1) * keep_linear + t * head.vocab * 4 + t * 8 + softcap


def _mlm_head_bytes(arch: Architecture, b: int, t: int, dt: Dtypes, keep_linear: bool) -> float:
    """Masked LM (and BERT's pre-training head): transform, norm, decoder, log-softmax."""
    head, h = arch.head, arch.stacks[-1].hidden
    e = head.transform
    act = activation_fn_bytes(head.transform_act, dt)
    total = t * h * dt.cast(1) * keep_linear  # transform input
    total += t * e * (act + dt.stream) + t * 8  # activation, LayerNorm input + stats
    total += t * e * dt.cast(1) * keep_linear  # decoder input
    return total + (t * head.vocab * 4 + t * 8)


def _pretraining_head_bytes(
    arch: Architecture, b: int, t: int, dt: Dtypes, keep_linear: bool
) -> float:
    """BERT (a vocabulary): masked LM + next sentence; ELECTRA's discriminator (none): dense,
    act, one logit per token."""
    h = arch.stacks[-1].hidden
    if arch.head.vocab:  # + the pooler's tanh output and the next-sentence input
        return _mlm_head_bytes(arch, b, t, dt, keep_linear) + b * h * (dt.act * 2)
    return t * h * (dt.cast(1) * keep_linear + dt.act * 2) + t * 8


def _token_head_bytes(arch: Architecture, b: int, t: int, dt: Dtypes, keep_linear: bool) -> float:
    head, h = arch.head, arch.stacks[-1].hidden
    return t * h * (dt.cast(1) * keep_linear + dt.mask) + t * (head.labels * 4 + 8)


def _pooled_head_bytes(arch: Architecture, b: int, t: int, dt: Dtypes, keep_linear: bool) -> float:
    """The classifier reads the CLS position: a view that keeps the whole last hidden state
    alive in full precision (under autocast the cast copies just that row)."""
    head, h = arch.head, arch.stacks[-1].hidden
    pooled = b * h * dt.act if dt.amp else t * h * dt.stream
    extra = b * h * dt.act * 3 if arch.traits.pooler else 0  # pooler, dropout
    return pooled * keep_linear + extra + b * (head.labels * 4 + 8)


# Head kind -> saved bytes of the head (kinds.HEAD_KINDS lists the kinds; others keep none).
_HEAD_BYTES = {
    "causal-lm": _lm_head_bytes,
    "seq2seq-lm": _lm_head_bytes,
    "masked-lm": _mlm_head_bytes,
    "pretraining": _pretraining_head_bytes,
    "token-classification": _token_head_bytes,
    "question-answering": _token_head_bytes,
    "sequence-classification": _pooled_head_bytes,
    "image-classification": _pooled_head_bytes,
}


def head_bytes(arch: Architecture, b: int, t: int, dt: Dtypes, lora: bool) -> float:
    formula = _HEAD_BYTES.get(arch.head.kind)
    return formula(arch, b, t, dt, not lora) if formula is not None else 0.0


def audio_frontend_bytes(arch: Architecture, b: int, frames: int, dt: Dtypes, lora: bool) -> float:
    """Whisper's two GELU 1-D convs: the mel input (read by conv1), conv1's output (GELU input)
    and the GELU output (read by conv2) at 2 x `frames`, conv2's output (GELU input) at
    `frames`; the GELU output plus positions is the first layer's input."""
    d = arch.stacks[0].hidden
    total = 0.0 if lora else b * arch.mel_bins * 2 * frames * dt.cast(1)
    return total + b * d * 2 * frames * (dt.act + dt.cast(1)) + b * d * frames * dt.act
