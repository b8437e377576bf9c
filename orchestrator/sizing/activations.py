"""Bytes of the tensors autograd keeps for backward at the end of a training forward, for a
whole model (`activation_bytes`), and what the activation-footprint knobs change (fused
cross-entropy, activation offload, LoRA dropout). Per-layer formulas: activation_layers.py;
vision families: activation_vision.py. Conventions: docs/memory-model.md."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.sizing.activation_layers import (
    Dtypes,
    audio_frontend_bytes,
    dtypes,
    head_bytes,
    layer_bytes,
    norm_bytes,
    stack_tail_bytes,
)
from orchestrator.sizing.activation_vision import (
    convnext_bytes,
    dual_encoder_bytes,
    resnet_bytes,
    swin_bytes,
)
from orchestrator.sizing.architectures import Architecture, Stack
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.lengths import stack_lengths


def _first_layer_savings(st: Stack, b: int, s: int, dt: Dtypes) -> float:
    """What the first LoRA layer does not save because its input needs no gradient: its
    first norm's input (pre-LN) and the query copy (unless one fused adapter makes q, k and v,
    the keys need no gradient, so the score matmul keeps only them)."""
    t = b * s
    saved = 0 if st.fused_qkv else t * st.q_width * dt.act
    if st.prenorm:
        saved += t * norm_bytes(st, dt, frozen=True)
    return saved


@dataclass(frozen=True, slots=True)
class SavedActivations:
    """What autograd holds for backward, split the way the step's phases need it (bytes)."""

    forward_end: float  # everything saved at the end of the forward, the loss's part included
    loss: float  # the loss's vocabulary-wide fp32 log-softmax (freed once the loss backward ran)
    recompute: float  # one layer (block) recomputed at a time in backward under checkpointing

    @property
    def total(self) -> float:
        return self.forward_end + self.recompute


def activation_bytes(arch: Architecture, job: JobSpec, mask_bytes: int = 1) -> int:
    """Bytes of the tensors autograd keeps for backward, for `job.batch` samples (with
    checkpointing, plus the one layer recomputed at a time), as PyTorch saves them: the
    knobs (fused CE, offload, LoRA dropout) are not applied here (see `saved_activations`).

    `mask_bytes` is 1 on CUDA (bool dropout masks); PyTorch's CPU dropout keeps a float
    mask, so the CPU accuracy benchmark passes 4.
    """
    traced = arch.traced_activation_bytes(job)  # sizing/trace
    if traced is not None:
        return traced
    saved, recompute = _saved_and_recompute(arch, job, dtypes(job.precision, mask_bytes))
    return int(saved + recompute)


def saved_activations(arch: Architecture, job: JobSpec) -> SavedActivations:
    """The job's saved activations with the knobs applied, split for the step's phases."""
    loss = vocab_loss_bytes(arch, job) if not job.fused_ce else 0.0
    knobs = _lora_dropout_bytes(arch, job) - _fused_ce_savings(arch, job)
    knobs -= _offload_savings(arch, job)
    traced = arch.traced_activation_bytes(job)  # sizing/trace
    if traced is not None:  # the trace's figure includes the recomputed layer
        return SavedActivations(traced + knobs, loss, 0.0)
    saved, recompute = _saved_and_recompute(arch, job, dtypes(job.precision))
    return SavedActivations(saved + knobs, loss, recompute)


def output_tokens(arch: Architecture, job: JobSpec) -> int:
    """Tokens the head scores: the decoder's for an encoder-decoder, else the input's."""
    return job.batch * stack_lengths(arch, job)[-1]


def vocab_loss_bytes(arch: Architecture, job: JobSpec) -> float:
    """The fp32 log-softmax a vocabulary head's cross-entropy keeps (t x vocab x 4)."""
    if arch.resnet is not None or not arch.head.vocab:
        return 0.0
    if not arch.head.traits.vocab_loss:
        return 0.0
    return output_tokens(arch, job) * arch.head.vocab * 4


def _saved_and_recompute(arch: Architecture, job: JobSpec, dt: Dtypes) -> tuple[float, float]:
    b = job.batch
    checkpoint = job.grad_checkpointing
    if arch.resnet is not None:
        image = job.image_size or arch.image_size
        return resnet_bytes(arch.resnet, b, image, dt, checkpoint)
    if arch.convnext is not None:
        image = job.image_size or arch.image_size
        return convnext_bytes(arch.convnext, b, image, dt, checkpoint)
    eager = job.attention == "eager" or not arch.sdpa
    return _STACK_BYTES.get(arch.kind, _transformer_bytes)(arch, job, dt, eager)


def _input_bytes(arch: Architecture, job: JobSpec, dt: Dtypes) -> tuple[list[int], float]:
    """The sequence length of each stack, and what a ViT keeps of its input image."""
    b, lora = job.batch, bool(job.lora_rank)
    lengths = stack_lengths(arch, job)
    if arch.traits.patch_tokens:
        image = job.image_size or arch.image_size
        total = 0.0 if lora else b * arch.channels * image * image * dt.cast(1)  # the conv's
        frozen_inputs = lora and not job.grad_checkpointing
        if not frozen_inputs and arch.stacks[0].hidden_dropout > 0:
            total += b * lengths[0] * arch.stacks[0].hidden * dt.mask
        return lengths, total
    return lengths, 0.0


def _embedding_bytes(arch: Architecture, emb, t: int, dt: Dtypes, job: JobSpec) -> float:
    """Token ids for the embedding's weight gradient, and its norm, dropout and projection."""
    lora = bool(job.lora_rank)
    # LoRA without checkpointing: nothing before the first adapter needs a gradient, so the
    # frozen embeddings save nothing. (With checkpointing PEFT makes the embedding output
    # require grad so the checkpointed layers recompute correctly.)
    frozen_inputs = lora and not job.grad_checkpointing
    total = 0.0 if lora else t * 8 * emb.int_inputs
    if not frozen_inputs:
        if emb.norm:
            total += t * (emb.width * dt.stream + 8)
        if emb.dropout > 0:
            total += t * emb.width * dt.mask
        if emb.projected and not lora:
            total += t * emb.width * dt.cast(1)
    return total


def _transformer_bytes(
    arch: Architecture, job: JobSpec, dt: Dtypes, eager: bool
) -> tuple[float, float]:
    """Encoders, decoders, encoder-decoders and ViT: (saved, one layer recomputed)."""
    b, rank = job.batch, job.lora_rank or 0
    lora, checkpoint = bool(rank), job.grad_checkpointing
    frozen_inputs = lora and not checkpoint
    lengths, total = _input_bytes(arch, job, dt)
    emb = arch.embedding
    per_layer_max = 0.0
    for index, st in enumerate(arch.stacks):
        s = lengths[index]
        t = b * s
        if arch.mel_bins and index == 0:
            total += audio_frontend_bytes(arch, b, s, dt, lora)
            emb = None  # the encoder reads no token ids
        elif index == 1 and arch.mel_bins:
            emb = arch.embedding
        if emb is not None:
            total += _embedding_bytes(arch, emb, t, dt, job)
        if st.relative == "t5":
            total += s * s * 8  # relative-position buckets, computed once per stack
        if st.relative == "deberta" and st.hidden_dropout == 0:
            total += st.rel_span * st.hidden * dt.stream  # shared relative embeddings
        src = lengths[0]
        one = layer_bytes(st, b, s, src, dt, eager, rank)
        sparse_layers = st.moe.layers if st.moe is not None else 0
        sparse = layer_bytes(st, b, s, src, dt, eager, rank, True) if st.moe else 0
        per_layer_max = max(per_layer_max, one if sparse_layers < st.layers else 0, sparse)
        if checkpoint:
            total += st.layers * t * st.hidden * dt.stream  # each layer's input only
        else:
            total += (st.layers - sparse_layers) * one + sparse_layers * sparse
        if frozen_inputs:
            total -= _first_layer_savings(st, b, s, dt)
        total += stack_tail_bytes(st, t, dt, lora)
        if st.cross_attention:
            # The encoder output, read by every decoder layer's k and v projections.
            readers = st.layers if lora else 2 * st.layers
            total += b * src * st.hidden * dt.cast(readers)
    total += head_bytes(arch, b, b * lengths[-1], dt, lora)
    return total, per_layer_max if checkpoint else 0.0


# Model kind -> (saved, one layer recomputed) of its stacks; others: _transformer_bytes.
# ResNet and ConvNeXt are told apart by their stage lists (arch.resnet, arch.convnext).
_STACK_BYTES = {"swin": swin_bytes, "dual-encoder": dual_encoder_bytes}


def _fused_ce_savings(arch: Architecture, job: JobSpec) -> float:
    """Saved-tensor bytes a fused/chunked cross-entropy never materialises.

    The HF loss upcasts the logits and keeps the fp32 log-softmax for backward (t x vocab x 4
    bytes). Liger's FusedLinearCrossEntropy and flash-attn's cross_entropy compute the loss
    and the logits' gradient chunk by chunk inside the forward, so nothing of vocab width is
    kept (https://github.com/linkedin/Liger-Kernel , README "FusedLinearCrossEntropy";
    torchtune's chunked CE does the same in 8 chunks).
    """
    return vocab_loss_bytes(arch, job) if job.fused_ce else 0.0


def fused_ce_transient(arch: Architecture, job: JobSpec, act_bytes: int) -> float:
    """The loss's largest buffer with a fused CE: one chunk of about t x hidden logits (Liger
    sizes chunks as tokens / ceil(vocab / hidden)) in fp32 and its gradient, plus the fp32
    gradient of the head input."""
    t = job.batch * stack_lengths(arch, job)[-1]
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
    lengths = stack_lengths(arch, job)
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
    for st, s in zip(arch.stacks, stack_lengths(arch, job), strict=False):
        fan_in = sum(i for i, _ in st.lora_targets)
        total += st.layers * job.batch * s * fan_in * (1 + act)
    return total
