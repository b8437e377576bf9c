"""Saved-for-backward bytes of the vision families: ResNet, ConvNeXt, Swin and the two-tower
CLIP/SigLIP (docs/memory-model.md)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from orchestrator.sizing.activation_layers import Dtypes, layer_bytes, stack_tail_bytes
from orchestrator.sizing.architectures import Architecture
from orchestrator.sizing.job import JobSpec

if TYPE_CHECKING:
    from orchestrator.sizing.architectures.cnn import ConvNeXt, ResNet

Saved = tuple[float, float]  # (saved at the end of the forward, one block recomputed in backward)


def resnet_bytes(net: ResNet, b: int, image: int, dt: Dtypes, checkpoint: bool) -> Saved:
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
    total += sum(o if checkpoint else s for s, o in blocks)
    recompute = max(s for s, _ in blocks) if checkpoint else 0.0
    last = net.stages[-1].out_channels
    return total + b * last * dt.cast(1) + b * (net.labels * 4 + 8), recompute


def convnext_bytes(net: ConvNeXt, b: int, image: int, dt: Dtypes, checkpoint: bool) -> Saved:
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
    total += sum(i if checkpoint else s for s, i in blocks)
    recompute = max(s for s, _ in blocks) if checkpoint else 0.0
    last = net.widths[-1]
    # Global average pool, LayerNorm on the pooled vector, the classifier; the loss.
    total += b * (last * dt.stream + 8) + b * last * dt.cast(1) + b * (net.labels * 4 + 8)
    return total, recompute


def dual_encoder_bytes(arch: Architecture, job: JobSpec, dt: Dtypes, eager: bool) -> Saved:
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
        total += stack_tail_bytes(st, b * s, dt, bool(lora))
    recompute = per_layer_max if job.grad_checkpointing else 0.0
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
    return total, recompute


def swin_bytes(arch: Architecture, job: JobSpec, dt: Dtypes, eager: bool) -> Saved:
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
    recompute = per_layer_max if job.grad_checkpointing else 0.0
    last = arch.stacks[-1].hidden
    total += b * res * res * (last * (dt.stream + dt.act) + 8)  # final LayerNorm, pooling
    return total + b * last * dt.cast(1) + b * (arch.head.labels * 4 + 8), recompute
