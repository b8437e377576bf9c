"""Per-GPU training memory: parameters, gradients, optimizer states, activations, overhead.

The estimate is for ONE GPU of a `job.gpus`-wide data-parallel group with ZeRO stage
`job.zero` (FSDP full-shard = 3). Activations are the tensors autograd saves for backward,
counted per layer from the architecture the way the `transformers` PyTorch implementations
save them (benchmarks/memory_accuracy.py checks this against torch); they are never derived
from the parameter count. Formulas and conventions: docs/memory-model.md.
"""

from __future__ import annotations

import math
from typing import Any

from orchestrator.records import record
from orchestrator.sizing import overhead as ovh
from orchestrator.sizing.architectures import Architecture, ConvNeXt, ResNet, Stack
from orchestrator.sizing.job import JobSpec

MIB = 1024**2
GIB = 1024**3

# The CUDA context and the allocator's reserve: orchestrator/sizing/overhead.py.
CUDNN_WORKSPACE_BYTES = 256 * MIB  # convolution algorithms' scratch space (CNNs)
NCCL_BYTES = 256 * MIB  # NCCL communicator buffers when gpus > 1
COMM_BUCKET_BYTES = 200 * MIB  # ZeRO reduce/all-gather buckets
ADAM8BIT_MIN_SIZE = 4096  # bitsandbytes keeps 32-bit states for tensors smaller than this
ADAM8BIT_BLOCK = 2048  # one fp32 absmax per block of 2048 values, per state


@record
class MemoryBreakdown:
    parameters_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    overhead_bytes: int
    total_bytes: int
    parameters: int  # total parameter count of the model (not per GPU)
    trainable_parameters: int
    assumptions: dict[str, Any] | None = None  # overhead.assumptions(job)

    def to_dict(self) -> dict[str, Any]:
        return {
            "parameters": self.parameters,
            "trainable_parameters": self.trainable_parameters,
            "assumptions": dict(self.assumptions or {}),
            "memory": {
                "parameters_bytes": self.parameters_bytes,
                "gradients_bytes": self.gradients_bytes,
                "optimizer_bytes": self.optimizer_bytes,
                "activations_bytes": self.activations_bytes,
                "overhead_bytes": self.overhead_bytes,
                "total_bytes": self.total_bytes,
            },
        }


@record
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


# --------------------------------------------------------------------------- activations


def _norm_bytes(st: Stack, dt: Dtypes, frozen: bool, shares_input: bool = False) -> float:
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
        per = {"gelu_new": 4, "quick_gelu": 2}.get(st.activation, 1) * a
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
        total += t * _norm_bytes(st, dt, lora)
    if st.mla is not None:
        total += _mla_bytes(st, b, s, dt, eager, lora)
    else:
        total += t * h * dt.cast(qkv_readers)  # the q/k/v projections' input
        total += t * _qk_norm_bytes(st, dt, lora)
        total += _attention_bytes(st, b, s, s, dt, eager)
        if not lora:
            total += t * st.q_width * dt.act  # output projection's input
    if st.post_norms:  # Gemma 2/3: norms on the attention and the MLP outputs
        total += 2 * t * _norm_bytes(st, dt, lora)
    if st.attn_out_dropout:
        total += t * h * mask
    if not st.prenorm:
        total += t * (h * dt.stream + 8)  # post-LN LayerNorm input and statistics
    if st.cross_attention:
        total += t * _norm_bytes(st, dt, lora)
        total += t * h * dt.cast(1)  # q projection input (k, v read the encoder output)
        total += _attention_bytes(st, b, s, src, dt, eager)
        if not lora:
            total += t * st.q_width * dt.act
        total += t * h * mask
    if st.prenorm and not st.single_norm:
        total += t * _norm_bytes(st, dt, lora, shares_input=st.parallel_residual)
    total += _mlp_block_bytes(st, t, dt, lora, sparse)
    if st.mlp_out_dropout:
        total += t * h * mask
    if not st.prenorm:
        total += t * (h * dt.stream + 8)
    if lora:
        total += t * len(st.lora_targets) * lora_rank * dt.act  # adapter A outputs
    return total


def _stack_tail_bytes(st: Stack, t: int, dt: Dtypes, lora: bool) -> float:
    """After the last layer: final norm (pre-LN stacks) and T5's final dropout."""
    if not st.final_norm:
        return 0.0
    total = t * _norm_bytes(st, dt, lora)
    if st.relative == "t5" and st.hidden_dropout > 0:
        total += t * st.hidden * dt.mask
    return total


def _head_bytes(arch: Architecture, b: int, t: int, dt: Dtypes, lora: bool) -> float:
    head = arch.head
    h = arch.stacks[-1].hidden
    keep_linear = not lora
    if head.kind in ("causal-lm", "seq2seq-lm"):
        # lm_head input; log-softmax output in fp32 (HF upcasts logits for the loss); labels.
        softcap = t * head.vocab * dt.act if head.softcap else 0  # Gemma 2: tanh output
        return t * h * dt.cast(1) * keep_linear + t * head.vocab * 4 + t * 8 + softcap
    if head.kind == "masked-lm" or (head.kind == "pretraining" and head.vocab):
        e = head.transform
        act = (4 if head.transform_act == "gelu_new" else 1) * dt.act
        total = t * h * dt.cast(1) * keep_linear  # transform input
        total += t * e * (act + dt.stream) + t * 8  # activation, LayerNorm input + stats
        total += t * e * dt.cast(1) * keep_linear  # decoder input
        total += t * head.vocab * 4 + t * 8
        if head.kind == "pretraining":
            total += b * h * (dt.act * 2)  # pooler tanh output, next-sentence input
        return total
    if head.kind == "pretraining":  # ELECTRA discriminator: dense, act, one logit per token
        return t * h * (dt.cast(1) * keep_linear + dt.act * 2) + t * 8
    if head.kind in ("token-classification", "question-answering"):
        return t * h * (dt.cast(1) * keep_linear + dt.mask) + t * (head.labels * 4 + 8)
    if head.kind in ("sequence-classification", "image-classification"):
        # The classifier reads the CLS position: a view that keeps the whole last hidden
        # state alive in full precision (under autocast the cast copies just that row).
        pooled = b * h * dt.act if dt.amp else t * h * dt.stream
        extra = b * h * dt.act * 3 if arch.kind in ("encoder",) else 0  # pooler, dropout
        return pooled * keep_linear + extra + b * (head.labels * 4 + 8)
    return 0.0


def _resnet_bytes(net: ResNet, b: int, image: int, dt: Dtypes, checkpoint: bool) -> float:
    a = dt.act

    def bn(ch: int) -> float:
        return ch * 4 * 4  # weight-free statistics: running and saved mean / invstd

    res = image
    total = b * net.channels * res * res * dt.cast(1)  # the image, read by the stem conv
    res = math.ceil(res / 2)
    total += b * net.embedding_size * res * res * 2 * a + bn(net.embedding_size)
    res = math.ceil(res / 2)
    total += b * net.embedding_size * res * res * (8 + a)  # max-pool indices and output
    blocks: list[tuple[float, float]] = []  # (block's saved bytes, its output bytes)
    for stage in net.stages:
        for j in range(stage.depth):
            cin = stage.in_channels if j == 0 else stage.out_channels
            stride = stage.stride if j == 0 else 1
            cout = stage.out_channels
            out = math.ceil(res / stride)
            block = 0.0
            if net.layer_type == "bottleneck":
                r = cout // 4
                block += b * r * (res * res + out * out) * 2 * a + 2 * bn(r)
                block += b * cout * out * out * a + bn(cout)
            else:
                block += b * cout * out * out * 3 * a + 2 * bn(cout)
            if cin != cout or stride != 1:
                block += b * cout * out * out * a + bn(cout)  # shortcut BN input
            output = b * cout * out * out * a  # ReLU after the residual add
            blocks.append((block + output, output))
            res = out
    if checkpoint:
        total += sum(o for _, o in blocks) + max(s for s, _ in blocks)
    else:
        total += sum(s for s, _ in blocks)
    last = net.stages[-1].out_channels
    return total + b * last * dt.cast(1) + b * (net.labels * 4 + 8)


def _audio_frontend_bytes(arch: Architecture, b: int, frames: int, dt: Dtypes, lora: bool) -> float:
    """Whisper's two GELU 1-D convs: the mel input (read by conv1), conv1's output (GELU input)
    and the GELU output (read by conv2) at 2 x `frames`, conv2's output (GELU input) at
    `frames`; the GELU output plus positions is the first layer's input."""
    d = arch.stacks[0].hidden
    total = 0.0 if lora else b * arch.mel_bins * 2 * frames * dt.cast(1)
    return total + b * d * 2 * frames * (dt.act + dt.cast(1)) + b * d * frames * dt.act


def _convnext_bytes(net: ConvNeXt, b: int, image: int, dt: Dtypes, checkpoint: bool) -> float:
    """ConvNeXt per pixel of a stage of width C: each block keeps its input (for the depthwise
    conv), the LayerNorm input and statistics, the LayerNorm output (pwconv1's input), the
    4C GELU input and output (pwconv2's input) and pwconv2's output (for the layer scale);
    the stem and each downsampling keep a LayerNorm input and the conv input."""
    a = dt.act
    res = image // net.patch
    total = b * net.channels * image * image * dt.cast(1)  # the image, read by the stem conv
    total += b * res * res * (net.widths[0] * dt.stream + 8)  # stem LayerNorm (channels-first)
    blocks: list[tuple[float, float]] = []  # (a block's saved bytes, its input's bytes)
    for i, (width, depth) in enumerate(zip(net.widths, net.depths, strict=True)):
        if i:
            total += b * res * res * (net.widths[i - 1] * dt.stream + 8)  # downsample norm
            total += b * res * res * net.widths[i - 1] * dt.cast(1)  # its 2x2 conv's input
            res //= 2
        pixels = b * res * res
        block_in = pixels * width * dt.cast(1)
        block = block_in + pixels * (width * dt.stream + 8) + pixels * width * dt.cast(1)
        block += pixels * 4 * width * (a + dt.cast(1)) + pixels * width * a
        blocks += [(block, block_in)] * depth
    if checkpoint:
        total += sum(i for _, i in blocks) + max(s for s, _ in blocks)
    else:
        total += sum(s for s, _ in blocks)
    last = net.widths[-1]
    # Global average pool, LayerNorm on the pooled vector, the classifier; the loss.
    return total + b * (last * dt.stream + 8) + b * last * dt.cast(1) + b * (net.labels * 4 + 8)


def _dual_encoder_bytes(arch: Architecture, job: JobSpec, dt: Dtypes, eager: bool) -> float:
    """CLIP: the vision tower over patches + CLS (pixels for the patch conv, pre-LayerNorm),
    the text tower over `job.seq` tokens (token ids, final LayerNorm), the pooled rows and
    their projections, and the normalised embeddings and b x b similarities of the loss."""
    b, lora = job.batch, job.lora_rank or 0
    vision, text = arch.stacks
    image = job.image_size or arch.image_size
    lengths = (arch.vision_tokens(image), job.seq)
    total = 0.0 if lora else b * arch.channels * image * image * dt.cast(1)
    if arch.family == "clip":
        total += b * lengths[0] * (vision.hidden * dt.stream + 8)  # pre_layrnorm
    total += 0 if lora else b * job.seq * 8 + job.seq * 8  # token and position ids
    per_layer_max = 0.0
    for st, s in zip((vision, text), lengths, strict=True):
        one = layer_bytes(st, b, s, s, dt, eager, lora)
        per_layer_max = max(per_layer_max, one)
        if job.grad_checkpointing:
            total += st.layers * b * s * st.hidden * dt.stream
        else:
            total += st.layers * one
        total += _stack_tail_bytes(st, b * s, dt, bool(lora))
    if job.grad_checkpointing:
        total += per_layer_max
    sv, hv, ht = lengths[0], vision.hidden, text.hidden
    if arch.family == "siglip":
        # Vision: attention pooling over the final-LN output (its kv projection's input and
        # output, the probe's softmax rows), then per image the probe's q path, out_proj,
        # LayerNorm and MLP; position ids. Text: the head reads a view of the last row, which
        # keeps the whole final-LN output (under autocast only the row's half copy).
        total += b * sv * hv * (dt.cast(1) + 2 * dt.act) + b * vision.heads * sv * dt.softmax
        total += b * (3 * hv * dt.act + hv * dt.stream + 8 + hv * dt.cast(1))
        total += b * 2 * vision.intermediate * dt.act + sv * 8
        total += b * ht * dt.act if dt.amp else b * job.seq * ht * dt.stream
    else:
        # Vision: post_layernorm reads a view of the CLS row, keeping the whole last hidden
        # state; text: the EOS rows are gathered (indices kept). Each feeds its projection.
        total += b * sv * hv * dt.stream + b * 8
        total += b * 8 + b * (hv + ht) * dt.cast(1)
    proj = arch.head.labels
    # L2-normalised embeddings (norm input/output, division), similarity and the two losses.
    total += 2 * b * (proj * 4 * 3 + 8) + 2 * b * b * 4 * 2 + 2 * b * 8
    return total


def _swin_bytes(arch: Architecture, job: JobSpec, dt: Dtypes, eager: bool) -> float:
    """Swin: the image (stem conv) and the stem LayerNorm's input; per stage the windowed
    layers over its tokens (padded to whole windows) and the patch merging (LayerNorm over 4C,
    the reduction's input); the final LayerNorm, the pooled tokens, classifier and loss."""
    b, lora = job.batch, job.lora_rank or 0
    image = job.image_size or arch.image_size
    res = image // arch.patch_size
    total = 0.0 if lora else b * arch.channels * image * image * dt.cast(1)
    total += b * res * res * (arch.stacks[0].hidden * dt.stream + 8)
    per_layer_max = 0.0
    for i, st in enumerate(arch.stacks):
        side = -(-res // math.isqrt(st.window)) * math.isqrt(st.window)
        tokens = side * side
        one = layer_bytes(st, b, tokens, tokens, dt, eager, lora)
        per_layer_max = max(per_layer_max, one)
        if job.grad_checkpointing:
            total += st.layers * b * tokens * st.hidden * dt.stream
        else:
            total += st.layers * one
        if i < len(arch.stacks) - 1:
            merged = math.ceil(res / 2) ** 2
            total += b * merged * (4 * st.hidden * (dt.stream + dt.cast(1)) + 8)
            res = -(-res // 2)
    if job.grad_checkpointing:
        total += per_layer_max
    last = arch.stacks[-1].hidden
    total += b * res * res * (last * (dt.stream + dt.act) + 8)  # final LayerNorm, pooling
    return total + b * last * dt.cast(1) + b * (arch.head.labels * 4 + 8)


def _first_layer_savings(st: Stack, b: int, s: int, dt: Dtypes) -> float:
    """What the first LoRA layer does not save because its input needs no gradient: its
    first norm's input (pre-LN) and the query copy (unless one fused adapter makes q, k and v,
    the keys need no gradient, so the score matmul keeps only them)."""
    t = b * s
    saved = 0 if st.fused_qkv else t * st.q_width * dt.act
    if st.prenorm:
        saved += t * _norm_bytes(st, dt, frozen=True)
    return saved


def activation_bytes(arch: Architecture, job: JobSpec, mask_bytes: int = 1) -> int:
    """Bytes of the tensors autograd keeps for backward, for `job.batch` samples.

    `mask_bytes` is 1 on CUDA (bool dropout masks); PyTorch's CPU dropout keeps a float
    mask, so the CPU accuracy benchmark passes 4.
    """
    traced = getattr(arch, "traced_activation_bytes", None)  # sizing/trace.py
    if traced is not None:
        return traced(job)
    dt = dtypes(job.precision, mask_bytes)
    b = job.batch
    lora = bool(job.lora_rank)
    checkpoint = job.grad_checkpointing
    if arch.resnet is not None:
        image = job.image_size or arch.image_size
        return int(_resnet_bytes(arch.resnet, b, image, dt, checkpoint))
    if arch.convnext is not None:
        image = job.image_size or arch.image_size
        return int(_convnext_bytes(arch.convnext, b, image, dt, checkpoint))
    if arch.kind in ("dual-encoder", "swin"):
        eager = job.attention == "eager" or not arch.sdpa
        bytes_of = _swin_bytes if arch.kind == "swin" else _dual_encoder_bytes
        return int(bytes_of(arch, job, dt, eager))
    eager = job.attention == "eager" or not arch.sdpa
    # LoRA without checkpointing: nothing before the first adapter needs a gradient, so the
    # frozen embeddings save nothing. (With checkpointing PEFT makes the embedding output
    # require grad so the checkpointed layers recompute correctly.)
    frozen_inputs = lora and not checkpoint
    total = 0.0
    emb = arch.embedding
    if arch.kind == "vit":
        image = job.image_size or arch.image_size
        lengths = [arch.vision_tokens(image)]
        if not lora:
            total += b * arch.channels * image * image * dt.cast(1)  # pixels, for the conv
        if not frozen_inputs and arch.stacks[0].hidden_dropout > 0:
            total += b * lengths[0] * arch.stacks[0].hidden * dt.mask
    elif arch.kind == "encoder-decoder":
        lengths = [arch.source_length or job.seq, job.target_seq or job.seq]
    else:
        lengths = [job.seq]

    per_layer_max = 0.0
    for index, st in enumerate(arch.stacks):
        s = lengths[index]
        t = b * s
        if arch.mel_bins and index == 0:
            total += _audio_frontend_bytes(arch, b, s, dt, lora)
            emb = None  # the encoder reads no token ids
        elif index == 1 and arch.mel_bins:
            emb = arch.embedding
        if emb is not None and not lora:
            total += t * 8 * emb.int_inputs  # token ids (and type ids) for the weight grads
        if emb is not None and not frozen_inputs:
            if emb.norm:
                total += t * (emb.width * dt.stream + 8)
            if emb.dropout > 0:
                total += t * emb.width * dt.mask
            if emb.projected and not lora:
                total += t * emb.width * dt.cast(1)
        if st.relative == "t5":
            total += s * s * 8  # relative-position buckets, computed once per stack
        if st.relative == "deberta" and st.hidden_dropout == 0:
            total += st.rel_span * st.hidden * dt.stream  # shared relative embeddings
        src = lengths[0]
        one = layer_bytes(st, b, s, src, dt, eager, job.lora_rank or 0)
        sparse_layers = st.moe.layers if st.moe is not None else 0
        sparse = layer_bytes(st, b, s, src, dt, eager, job.lora_rank or 0, True) if st.moe else 0
        per_layer_max = max(per_layer_max, one if sparse_layers < st.layers else 0, sparse)
        if checkpoint:
            total += st.layers * t * st.hidden * dt.stream  # each layer's input only
        else:
            total += (st.layers - sparse_layers) * one + sparse_layers * sparse
        if frozen_inputs:
            total -= _first_layer_savings(st, b, s, dt)
        total += _stack_tail_bytes(st, t, dt, lora)
        if st.cross_attention:
            # The encoder output, read by every decoder layer's k and v projections.
            readers = st.layers if lora else 2 * st.layers
            total += b * src * st.hidden * dt.cast(readers)
    if checkpoint:
        total += per_layer_max  # one layer recomputed at a time during backward
    t_out = b * lengths[-1]
    total += _head_bytes(arch, b, t_out, dt, lora)
    return int(total)


def transient_bytes(arch: Architecture, job: JobSpec) -> int:
    """The largest short-lived buffer of a step (not saved for backward, but at the peak)."""
    dt = dtypes(job.precision)
    b = job.batch
    if arch.resnet is not None:
        image = job.image_size or arch.image_size
        stem = arch.resnet.embedding_size
        return int(b * stem * math.ceil(image / 2) ** 2 * dt.act * 2)
    if arch.convnext is not None:  # the first stage's 4C MLP output and its gradient
        net = arch.convnext
        image = job.image_size or arch.image_size
        return int(b * 4 * net.widths[0] * (image // net.patch) ** 2 * dt.act * 2)
    lengths = [job.seq]
    if arch.kind == "vit":
        lengths = [arch.vision_tokens(job.image_size or arch.image_size)]
    elif arch.kind == "dual-encoder":
        lengths = [arch.vision_tokens(job.image_size or arch.image_size), job.seq]
    elif arch.kind == "swin":
        lengths = [
            ((job.image_size or arch.image_size) // arch.patch_size // 2**i) ** 2
            for i in range(len(arch.stacks))
        ]
    elif arch.kind == "encoder-decoder":
        lengths = [arch.source_length or job.seq, job.target_seq or job.seq]
    t_out = b * lengths[-1]
    candidates = [0.0]
    if arch.head.vocab and job.fused_ce:
        candidates.append(_fused_ce_transient(arch, job, dt.act))
    elif arch.head.vocab:
        # The logits (kept alive by the model's output) plus, in the loss backward, the
        # fp32 gradients of the log-softmax output and input at the same time.
        candidates.append(t_out * arch.head.vocab * (dt.act + 8))
    eager = job.attention == "eager" or not arch.sdpa
    for st, s in zip(arch.stacks, lengths, strict=False):
        width = max(st.intermediate * (2 if st.gated else 1), 3 * st.hidden)
        candidates.append(b * s * width * dt.act * 2)
        if eager:
            candidates.append(b * st.heads * s * s * (4 + dt.act))
    return int(max(candidates))


# ------------------------------------------------------------------------ states


def _optimizer_bytes_per_group(optimizer: str, shape: tuple[int, ...], count: int, state: int):
    numel = math.prod(shape) * count
    if optimizer in ("adam", "adamw"):
        return 2 * state * numel
    if optimizer == "sgd":
        return 0
    if optimizer == "sgd-momentum":
        return state * numel
    if optimizer == "adamw-8bit":
        if math.prod(shape) < ADAM8BIT_MIN_SIZE:
            return 8 * numel
        return 2 * numel + 2 * 4 * math.ceil(numel / ADAM8BIT_BLOCK)
    if optimizer == "adafactor":
        # Factored second moment for matrices (row and column sums), full for vectors; no
        # first moment (transformers' Adafactor default beta1=None); states kept in fp32.
        if len(shape) >= 2:
            rows = math.prod(shape[:-1])
            cols = math.prod(shape[:-2]) * shape[-1]
            return 4 * (rows + cols) * count
        return 4 * numel
    raise ValueError(f"unknown optimizer {optimizer!r}")


def optimizer_state_bytes(arch: Architecture, job: JobSpec) -> int:
    """Optimizer state bytes for all trainable parameters (before ZeRO sharding)."""
    dt = dtypes(job.precision)
    if job.lora_rank:
        r = job.lora_rank
        total = 0
        for st in arch.stacks:
            for fan_in, fan_out in st.lora_targets:
                for shape in ((r, fan_in), (fan_out, r)):
                    total += _optimizer_bytes_per_group(job.optimizer, shape, st.layers, dt.state)
        return total
    return sum(
        _optimizer_bytes_per_group(job.optimizer, w.shape, w.count, dt.state) for w in arch.weights
    )


def _largest_layer_parameters(arch: Architecture) -> int:
    layers = sum(s.layers for s in arch.stacks) or getattr(arch, "layer_count", 1)
    biggest_tensor = max(math.prod(w.shape) for w in arch.weights)
    return max(arch.parameters // layers, biggest_tensor)


# ------------------------------------------------------------------------------ total


def estimate_memory(arch: Architecture, job: JobSpec) -> MemoryBreakdown:
    """Peak memory of one GPU for one training step of `job` (see module docstring)."""
    dt = dtypes(job.precision)
    gpus = max(1, job.gpus)
    zero = job.zero
    total_params = arch.parameters
    lora = bool(job.lora_rank)

    if lora:
        trainable = arch.lora_parameters(job.lora_rank or 0)
        # The frozen base needs no master copy: held in the compute dtype (bf16/fp16 under
        # autocast); the adapters are trained like full weights (fp32 under autocast).
        params_bytes = total_params * (dt.act if dt.amp else dt.param) + trainable * dt.param
    else:
        trainable = total_params
        params_bytes = total_params * dt.param
    if zero >= 3:
        params_bytes /= gpus
    elif dt.amp and not lora:
        params_bytes += arch.matmul_parameters * dt.act  # autocast's cached half weights

    grads = trainable * dt.grad
    grads_bytes = grads / gpus if zero >= 2 else grads
    opt = optimizer_state_bytes(arch, job)
    opt_bytes = opt / gpus if zero >= 1 else opt
    act_bytes = activation_bytes(arch, job)
    act_bytes += _lora_dropout_bytes(arch, job)
    act_bytes -= _fused_ce_savings(arch, job) + _offload_savings(arch, job)

    overhead = ovh.context_assumption(job).gib * GIB
    if arch.resnet is not None or arch.convnext is not None:
        overhead += CUDNN_WORKSPACE_BYTES
    if gpus > 1:
        overhead += NCCL_BYTES
        if zero == 0:
            overhead += grads  # DDP gradient buckets: a second copy of the gradients
        else:
            overhead += min(grads, COMM_BUCKET_BYTES)
        if zero >= 3:
            # The current and the prefetched layer, gathered in the compute dtype.
            overhead += 2 * _largest_layer_parameters(arch) * dt.act
    transient = transient_bytes(arch, job)
    overhead += transient + ovh.allocator_reserve_bytes(act_bytes, transient)

    parts = [params_bytes, grads_bytes, opt_bytes, act_bytes, overhead]
    ints = [int(math.ceil(p)) for p in parts]
    return MemoryBreakdown(
        parameters_bytes=ints[0],
        gradients_bytes=ints[1],
        optimizer_bytes=ints[2],
        activations_bytes=ints[3],
        overhead_bytes=ints[4],
        total_bytes=sum(ints),
        parameters=total_params,
        trainable_parameters=trainable,
        assumptions=ovh.assumptions(job),
    )


# ------------------------------------------------- activation-footprint knobs (--fused-ce, ...)


def _knob_lengths(arch: Architecture, job: JobSpec) -> list[int]:
    if arch.kind == "vit":
        return [arch.vision_tokens(job.image_size or arch.image_size)]
    if arch.kind == "encoder-decoder":
        return [job.seq, job.target_seq or job.seq]
    return [job.seq]


def _fused_ce_savings(arch: Architecture, job: JobSpec) -> float:
    """Saved-tensor bytes a fused/chunked cross-entropy never materialises.

    The HF loss upcasts the logits and keeps the fp32 log-softmax for backward (t x vocab x 4
    bytes). Liger's FusedLinearCrossEntropy and flash-attn's cross_entropy compute the loss
    and the logits' gradient chunk by chunk inside the forward, so nothing of vocab width is
    kept (https://github.com/linkedin/Liger-Kernel , README "FusedLinearCrossEntropy";
    torchtune's chunked CE does the same in 8 chunks).
    """
    if not job.fused_ce or arch.resnet is not None or not arch.head.vocab:
        return 0.0
    if arch.head.kind not in ("causal-lm", "seq2seq-lm", "masked-lm", "pretraining"):
        return 0.0
    return job.batch * _knob_lengths(arch, job)[-1] * arch.head.vocab * 4


def _fused_ce_transient(arch: Architecture, job: JobSpec, act_bytes: int) -> float:
    """The loss's largest buffer with a fused CE: one chunk of about t x hidden logits (Liger
    sizes chunks as tokens / ceil(vocab / hidden)) in fp32 and its gradient, plus the fp32
    gradient of the head input."""
    t = job.batch * _knob_lengths(arch, job)[-1]
    return t * arch.stacks[-1].hidden * (4 + 4 + act_bytes)


def _offload_savings(arch: Architecture, job: JobSpec) -> float:
    """Bytes activation offload (torch.autograd.graph.save_on_cpu, torchtune/DeepSpeed CPU
    checkpointing) moves to host memory: every layer's saved tensors (with checkpointing,
    each layer's input) except the two layers in flight (the one computed and the one
    being copied back, double-buffered)."""
    if not job.activation_offload or arch.resnet is not None:
        return 0.0
    dt = dtypes(job.precision)
    eager = job.attention == "eager" or not arch.sdpa
    lengths = _knob_lengths(arch, job)
    offloaded = 0.0
    largest = 0.0
    for st, s in zip(arch.stacks, lengths, strict=False):
        t = job.batch * s
        if job.grad_checkpointing:
            kept = t * st.hidden * dt.stream
        else:
            kept = layer_bytes(st, job.batch, s, lengths[0], dt, eager, job.lora_rank or 0)
        offloaded += st.layers * kept
        largest = max(largest, kept)
    return max(0.0, offloaded - 2 * largest)


def _lora_dropout_bytes(arch: Architecture, job: JobSpec) -> float:
    """LoRA dropout on the adapters' input (PEFT's lora_dropout, LitGPT's default 0.05): each
    adapted linear keeps a bool mask and the dropped-out copy of its input for backward."""
    if not job.lora_rank or job.lora_dropout <= 0 or arch.resnet is not None:
        return 0.0
    act = dtypes(job.precision).act
    total = 0.0
    for st, s in zip(arch.stacks, _knob_lengths(arch, job), strict=False):
        fan_in = sum(i for i, _ in st.lora_targets)
        total += st.layers * job.batch * s * fan_in * (1 + act)
    return total
