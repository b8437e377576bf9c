"""Peak memory of a training step as the largest of its phases (docs/memory-model.md, "Peak").

A step (forward, loss, backward, optimizer step, zero_grad) holds different tensors at
different moments; the peak is the largest moment, never the sum of every kind of tensor:

  forward    weights, optimizer states, autocast's half weights, every saved activation, the
             logits in the compute dtype and their fp32 upcast
  loss       the same, with the loss backward's two fp32 vocabulary-wide gradients (nll's and
             log-softmax's) beside the saved log-softmax instead of the logits
  backward   weights, states and the half weights (freed layer by layer), the larger of the
             remaining activations and the arriving gradients, one layer's gradient
             temporaries, and under checkpointing the one layer recomputed
  optimizer  weights, gradients, states and the optimizer's temporaries (torch's foreach AdamW
             makes one state-sized `exp_avg_sq.sqrt()` of all parameters at once)

Optimizer states are created lazily by the first step's optimizer call, so every later step
carries them through its forward and backward; gradients are freed by zero_grad(set_to_none)
unless the stack keeps them (runtime_stack.grads_persist).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.sizing.activation_layers import dtypes
from orchestrator.sizing.activations import (
    SavedActivations,
    fused_ce_transient,
    output_tokens,
    vocab_loss_bytes,
)
from orchestrator.sizing.architectures import Architecture
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.lengths import stack_lengths
from orchestrator.sizing.quantized import dequant_transient_bytes
from orchestrator.sizing.runtime_stack import RuntimeStack

PHASES = ("forward", "loss", "backward", "optimizer")


@dataclass(frozen=True, slots=True)
class Resident:
    """Per-GPU bytes that live across phases (after ZeRO sharding)."""

    weights: float  # stored weights (quantised base, adapters)
    cast_cache: float  # autocast's half copies of the matmul weights (forward and backward)
    gradients: float
    states: float  # optimizer states
    optimizer_temp: float  # the optimizer step's temporaries


def loss_transients(arch: Architecture, job: JobSpec) -> tuple[float, float]:
    """Bytes beyond the saved activations at the end of the forward and in the loss backward.

    transformers' causal-LM loss (loss_utils.ForCausalLMLoss) upcasts the logits with
    `.float()` and cross-entropy keeps the fp32 log-softmax (counted in the activations); in the
    loss backward nll_loss's gradient and log-softmax's input gradient (t x vocab, fp32 each)
    exist together with it. With --fused-ce only one chunk of logits exists at a time.
    """
    if vocab_loss_bytes(arch, job) == 0:
        return 0.0, 0.0
    dt = dtypes(job.precision)
    if job.fused_ce:
        chunk = fused_ce_transient(arch, job, dt.act)
        return chunk, chunk
    logits = output_tokens(arch, job) * arch.head.vocab
    upcast = 4 if arch.head.traits.upcast_logits and dt.act < 4 else 0
    return logits * (dt.act + upcast), logits * 8


def layer_backward_transient(arch: Architecture, job: JobSpec) -> float:
    """The largest gradient temporaries of one layer's backward: an MLP's output and input
    gradients (2 x the wider of its up projection and 3h), eager attention's score gradient
    (fp32 softmax gradient and its half copy); for CNNs the stem's (or first stage's)."""
    dt = dtypes(job.precision)
    b = job.batch
    image = job.image_size or arch.image_size
    if arch.resnet is not None:
        return b * arch.resnet.embedding_size * math.ceil(image / 2) ** 2 * dt.act * 2
    if arch.convnext is not None:
        net = arch.convnext
        return b * 4 * net.widths[0] * (image // net.patch) ** 2 * dt.act * 2
    lengths = stack_lengths(arch, job, rounding=math.floor)  # Swin: floored stage sides
    eager = job.attention == "eager" or not arch.sdpa
    candidates = [0.0]
    for st, s in zip(arch.stacks, lengths, strict=False):
        width = max(st.intermediate * (2 if st.gated else 1), 3 * st.hidden)
        candidates.append(b * s * width * dt.act * 2)
        if eager:
            candidates.append(b * st.heads * s * s * (4 + dt.act))
    return max(candidates)


def optimizer_temporary_bytes(
    arch: Architecture, job: JobSpec, stack: RuntimeStack, states: float
) -> float:
    """The optimizer step's temporaries, per GPU.

    torch.optim.Adam/AdamW foreach (torch/optim/adam.py, _multi_tensor_adam):
    `exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)` is one state-sized tensor per
    parameter, all at once: half the two states' bytes. A per-parameter loop (transformers'
    AdamW) makes that temporary for one tensor at a time. transformers' Adafactor makes about two
    fp32 temporaries of the tensor it updates. bitsandbytes' 8-bit AdamW and SGD update in place.
    """
    if job.optimizer in ("adam", "adamw"):
        if stack.optimizer_impl == "foreach":
            return states / 2
        if stack.optimizer_impl == "fused":  # one kernel updates in place (fused=True)
            return 0.0
        return _largest_trainable(arch, job) * dtypes(job.precision).state
    if job.optimizer == "adafactor":
        return _largest_trainable(arch, job) * 4 * 2
    return 0.0


def _largest_trainable(arch: Architecture, job: JobSpec) -> int:
    if job.lora_rank:
        return max(
            (
                job.lora_rank * max(fan_in, fan_out)
                for st in arch.stacks
                for fan_in, fan_out in st.lora_targets
            ),
            default=0,
        )
    return max((math.prod(w.shape) for w in arch.weights), default=0)


def step_phases(
    arch: Architecture,
    job: JobSpec,
    resident: Resident,
    saved: SavedActivations,
    stack: RuntimeStack,
) -> dict[str, float]:
    """Allocated bytes of each phase of a step (steady state: from the second step on)."""
    fwd_loss, bwd_loss = loss_transients(arch, job)
    kept_grads = resident.gradients if stack.grads_persist else 0.0
    base = resident.weights + resident.states + kept_grads
    with_acts = base + resident.cast_cache + saved.forward_end
    arriving = 0.0 if stack.grads_persist else resident.gradients
    body = resident.cast_cache + saved.forward_end - saved.loss
    backward = base + max(body, arriving) + saved.recompute
    dequant = 0.0
    if job.quantize:  # a quantised linear's weight, dequantised for each matmul
        dequant = dequant_transient_bytes(arch, dtypes(job.precision).act)
    backward += layer_backward_transient(arch, job) + dequant
    optimizer = resident.weights + resident.gradients + resident.states
    return {
        "forward": with_acts + max(fwd_loss, dequant),
        "loss": with_acts + bwd_loss,
        "backward": backward,
        "optimizer": optimizer + resident.optimizer_temp,
    }
