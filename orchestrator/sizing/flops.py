"""Training FLOPs for one sample: forward plus backward, from the architecture's shapes.

Conventions (a multiply-add is 2 FLOPs):
- Backward costs twice the forward: a gradient for the input and one for the weight of every
  matmul; attention's score and context matmuls have no weights but two input gradients.
  So a step is 3x the forward, i.e. ~6 N FLOPs per token for N matmul weights.
- Attention scores and context: 2 matmuls x 2 x s_q x s_kv x (heads x head_dim) per layer
  forward. Causal self-attention is halved with SDPA (flash kernels skip fully masked
  blocks); eager attention computes the whole square and masks it, so it is not halved.
- LoRA: frozen weights get no weight gradient, so their backward costs one forward (~4 N per
  token instead of 6 N); attention and the adapters themselves cost the full 3x.
- Gradient checkpointing recomputes every layer's forward once during backward.
- Embedding lookups, norms and element-wise ops are not counted (memory-bound, small).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.sizing.architectures import Architecture, Head, Stack
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.lengths import stack_lengths

if TYPE_CHECKING:
    from orchestrator.sizing.architectures.cnn import ConvNeXt, ResNet


def _conv(cin: int, cout: int, k: int, out: int) -> float:
    return 2.0 * cin * cout * k * k * out * out


def resnet_forward_flops(net: ResNet, image: int) -> float:
    """Forward FLOPs of one image through the convolutions and the classifier."""
    res = -(-image // 2)
    total = _conv(net.channels, net.embedding_size, 7, res)
    res = -(-res // 2)  # max-pool
    for stage in net.stages:
        for j in range(stage.depth):
            cin = stage.in_channels if j == 0 else stage.out_channels
            stride = stage.stride if j == 0 else 1
            cout = stage.out_channels
            out = -(-res // stride)
            if net.layer_type == "bottleneck":
                r = cout // 4
                total += _conv(cin, r, 1, res) + _conv(r, r, 3, out) + _conv(r, cout, 1, out)
            else:
                total += _conv(cin, cout, 3, out) + _conv(cout, cout, 3, out)
            if cin != cout or stride != 1:
                total += _conv(cin, cout, 1, out)
            res = out
    return total + 2.0 * net.stages[-1].out_channels * net.labels


def convnext_forward_flops(net: ConvNeXt, image: int) -> float:
    """Forward FLOPs of one image: stem, per block the 7x7 depthwise conv and the two 1x1
    linears (4x), the downsampling convs and the classifier."""
    res = image // net.patch
    total = _conv(net.channels, net.widths[0], net.patch, res)
    for i, (width, depth) in enumerate(zip(net.widths, net.depths, strict=True)):
        if i:
            res //= 2
            total += _conv(net.widths[i - 1], width, 2, res)
        total += depth * (2.0 * 49 * width * res * res + 2 * 2.0 * 4 * width * width * res * res)
    return total + 2.0 * net.widths[-1] * net.labels


def _layer_flops(st: Stack, s: int, src: int, sdpa: bool) -> tuple[float, float]:
    """(weight matmul FLOPs, attention score/context FLOPs) of one layer, forward."""
    h, q, kv = st.hidden, st.q_width, st.kv_width
    mlp = st.mlp_weights  # MoE: the router and the top-k experts a token goes through
    weights = 2.0 * s * (h * q + 2 * h * kv + q * h + mlp)
    if st.mla is not None:  # DeepSeek: q, the kv latent, its expansion, o
        m = st.mla
        q_in = (h * m.q_rank + m.q_rank * q) if m.q_rank else h * q
        latent = h * (m.kv_rank + m.rope) + m.kv_rank * st.heads * (m.nope + m.v)
        weights = 2.0 * s * (q_in + latent + st.heads * m.v * h + mlp)
    causal_factor = 0.5 if (st.causal and sdpa) else 1.0
    attention = 4.0 * s * (st.window or s) * q * causal_factor  # Swin: within windows
    if st.cross_attention:
        weights += 2.0 * s * (h * q + q * h) + 2.0 * src * (2 * h * kv)
        attention += 4.0 * s * src * q
    if st.relative == "deberta":
        attention += 2 * 4.0 * s * st.rel_span * q  # c2p and p2c score matmuls
    return weights, attention


layer_flops = _layer_flops  # public name for the throughput model's attention share


def _lm_head_flops(head: Head, tokens: int, hidden: int) -> float:
    return 2.0 * tokens * hidden * head.vocab


def _mlm_head_flops(head: Head, tokens: int, hidden: int) -> float:
    return 2.0 * tokens * (hidden * head.transform + head.transform * head.vocab)


def _pretraining_head_flops(head: Head, tokens: int, hidden: int) -> float:
    """BERT (a vocabulary): the masked-LM head; ELECTRA's discriminator: dense + one logit."""
    if head.vocab:
        return _mlm_head_flops(head, tokens, hidden)
    return 2.0 * tokens * (hidden * hidden + hidden)


def _token_head_flops(head: Head, tokens: int, hidden: int) -> float:
    return 2.0 * tokens * hidden * head.labels


def _pooled_head_flops(head: Head, tokens: int, hidden: int) -> float:
    return 2.0 * (hidden * hidden + hidden * head.labels)


# Head kind -> forward FLOPs of the head (other kinds: none).
_HEAD_FLOPS = {
    "causal-lm": _lm_head_flops,
    "seq2seq-lm": _lm_head_flops,
    "masked-lm": _mlm_head_flops,
    "pretraining": _pretraining_head_flops,
    "token-classification": _token_head_flops,
    "question-answering": _token_head_flops,
    "sequence-classification": _pooled_head_flops,
    "image-classification": _pooled_head_flops,
}


def _head_flops(arch: Architecture, tokens: int, hidden: int) -> float:
    formula = _HEAD_FLOPS.get(arch.head.kind)
    return formula(arch.head, tokens, hidden) if formula is not None else 0.0


def _patch_embedding_flops(arch: Architecture, lengths: list[int]) -> float:
    """ViT, CLIP: the patch convolution over the image's patches (the tokens less CLS)."""
    return 2.0 * (lengths[0] - 1) * arch.channels * arch.patch_size**2 * arch.stacks[0].hidden


def _stage_embedding_flops(arch: Architecture, lengths: list[int]) -> float:
    """Swin: the patch convolution, then each patch merging (4h -> 2h linear)."""
    pre = 2.0 * lengths[0] * arch.channels * arch.patch_size**2 * arch.stacks[0].hidden
    pre += sum(2.0 * n * 8 * st.hidden**2 for n, st in zip(lengths[1:], arch.stacks, strict=False))
    return pre


# Model kind -> FLOPs before the first stack (other kinds: none).
_INPUT_FLOPS = {
    "vit": _patch_embedding_flops,
    "dual-encoder": _patch_embedding_flops,
    "swin": _stage_embedding_flops,
}


def training_flops_per_sample(arch: Architecture, job: JobSpec) -> float:
    """FLOPs of forward + backward for one sample of `job` (see the module docstring)."""
    flops = arch.traced_flops_per_sample(job)  # sizing/trace
    if flops is not None:
        return flops
    if arch.resnet is not None or arch.convnext is not None:
        image = job.image_size or arch.image_size
        if arch.resnet is not None:
            forward = resnet_forward_flops(arch.resnet, image)
        else:
            forward = convnext_forward_flops(arch.convnext, image)
        extra = forward if job.grad_checkpointing else 0.0
        return 3.0 * forward + extra
    sdpa = job.attention == "sdpa" and arch.sdpa
    lengths = stack_lengths(arch, job)
    input_flops = _INPUT_FLOPS.get(arch.kind)
    pre = input_flops(arch, lengths) if input_flops is not None else 0.0
    emb = arch.embedding
    if emb is not None and emb.projected:
        pre += sum(2.0 * s * emb.width * arch.stacks[0].hidden for s in lengths)

    layer_weights = layer_attention = 0.0
    for st, s in zip(arch.stacks, lengths, strict=False):
        w, a = _layer_flops(st, s, lengths[0], sdpa)
        layer_weights += st.layers * w
        layer_attention += st.layers * a
    head = _head_flops(arch, lengths[-1], arch.stacks[-1].hidden)
    weight_flops = pre + layer_weights + head

    if job.lora_rank:
        r = job.lora_rank
        adapters = sum(
            2.0 * s * r * (i + o) * st.layers
            for st, s in zip(arch.stacks, lengths, strict=False)
            for i, o in st.lora_targets
        )
        total = 2.0 * weight_flops + 3.0 * (layer_attention + adapters)
    else:
        total = 3.0 * (weight_flops + layer_attention)
    if job.grad_checkpointing:
        total += layer_weights + layer_attention
    return total
