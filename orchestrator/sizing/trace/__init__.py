"""Activations of any `transformers` model, traced: one training forward on the meta device.

The analytic model (sizing/memory.py) knows a list of families. For any other config, and on
request (`--trace`), this module builds the model from its config with `transformers` on the
meta device (tensors with shapes and dtypes but no storage: no real memory, no weights) and
runs one training forward under `torch.autograd.graph.saved_tensors_hooks`, counting the
tensors autograd keeps for backward - the activation memory of a training step. What a CPU
run would keep differs from what a GPU run keeps in a few places; the trace counts the GPU's:

- dropout: CUDA's fused kernel keeps a bool mask, CPU's composite dropout a float one, so
  `F.dropout` is routed through `torch.native_dropout` (bool mask, 1 byte per element);
- SDPA attention: on the meta device PyTorch would take the math fallback, which saves the
  score matrices; CUDA runs the flash (or memory-efficient) kernel, which saves only q, k, v,
  the output and fp32 log-sum-exp rows. `F.scaled_dot_product_attention` is routed to the
  aten flash / efficient ops, whose autograd formulas save exactly what they save on CUDA;
- autocast (amp-*): the meta device has no autocast kernel, so `autocast.cuda_autocast` applies
  CUDA's autocast policy at the torch-function level (docs/memory-model.md, "Traced
  activations", lists the op lists and the known gaps);
- MoE: experts run their eager implementation (a loop over experts); routing is data, which
  the meta device does not have, so `routing.balanced_routing` answers the data-dependent ops with
  perfectly balanced routing: every expert is hit and receives tokens x top-k / experts rows.

Parameters and buffers are counted apart from activations (a linear saves its weight for
backward, but the weight is not an activation), and so are autocast's cached half copies
of the weights; saved tensors are deduplicated by storage (one tensor saved by two ops, or
two views of one storage, count once), and only those still referenced by the autograd graph
at the end of the forward count (a GPU frees the rest).

Layout: `key` (TraceKey, TraceResult), `tracer` (build the model, run the forward, tally what
is saved), `inputs` (inputs and labels per head), `kernels` (dropout and SDPA substitutions),
`autocast` (CUDA autocast's op lists, as data, and the mode applying them), `routing` (MoE
experts and balanced routing, FLOP counting), `storage` (saved tensors, storage keys).

torch and transformers are imported only when a trace runs: the optional extra
`pip install 'orch[trace]'`. Nothing is downloaded (HF_HUB_OFFLINE).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from orchestrator.errors import UsageError
from orchestrator.sizing.architectures import Architecture, Head
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.trace.inputs import head_of
from orchestrator.sizing.trace.key import TraceKey, TraceResult, trace_key
from orchestrator.sizing.trace.tracer import trace_config

EXTRA_HINT = "pip install 'orch[trace]'"
LORA_TARGETS = ("query", "value", "q_proj", "v_proj", "c_attn", "query_key_value", "Wqkv")


def available() -> bool:
    """Whether the `trace` extra is installed (without importing it)."""
    for module in ("torch", "transformers"):
        try:
            if importlib.util.find_spec(module) is None:
                return False
        except (ImportError, ValueError):  # e.g. sys.modules[module] = None: blocked
            return False
    return True


@dataclass(frozen=True)
class TracedArchitecture(Architecture):
    """An Architecture whose activations (and, for families the analytic model does not
    know, FLOPs) come from a trace of `config` for the job's shape."""

    config_json: str = ""
    layer_count: int = 1  # repeated layers (for ZeRO-3's per-layer gather buffers)
    analytic: bool = False  # weights/stacks come from the analytic model; only activations traced
    traced: ClassVar[bool] = True

    def trace(self, job: JobSpec) -> TraceResult:
        return trace_config(self.config_json, trace_key(job))

    def activation_source(self, job: JobSpec) -> str:
        """One line saying where the activation figure came from."""
        result = self.trace(job)
        return (
            f"trace: {result.model_class} on the meta device, {result.saved_tensors:,} saved "
            f"tensors, {result.versions}, {result.seconds:.1f} s"
        )

    def traced_activation_bytes(self, job: JobSpec) -> int:
        return self.trace(job).activation_bytes

    def traced_flops_per_sample(self, job: JobSpec) -> float | None:
        """Forward + backward FLOPs for one sample (None: use the analytic count)."""
        if self.analytic:
            return None
        result = self.trace(job)
        forward = result.forward_flops / job.batch
        # Backward is twice the forward (input and weight gradients; docs/flops conventions);
        # checkpointing recomputes the forward once.
        return forward * (4.0 if job.grad_checkpointing else 3.0)


def traced_architecture(
    config: dict[str, Any], name: str, job: JobSpec, analytic: Architecture | None = None
) -> TracedArchitecture:
    """The model of `config` with traced activations for `job` (UsageError when the extra is
    missing or transformers cannot build it). With `analytic`, its weights and shapes are
    kept (exact already) and only the activations are traced."""
    if not available():
        raise UsageError(f"tracing needs torch and transformers: {EXTRA_HINT}")
    if job.lora_rank:
        raise UsageError("--lora-rank is not supported with the traced activation model yet")
    config_json = json.dumps(config, sort_keys=True)
    result = trace_config(config_json, trace_key(job))
    if analytic is not None:
        base = {f.name: getattr(analytic, f.name) for f in fields(Architecture)}
        base["notes"] = (*analytic.notes, *result.notes)
        return TracedArchitecture(
            **base, config_json=config_json, layer_count=_layer_count(analytic), analytic=True
        )
    family = str(config.get("model_type"))
    kind, head = _kind_and_head(config, result.model_class)
    image = config.get("image_size") or 224
    patch = config.get("patch_size") or 0
    return TracedArchitecture(
        name=name or str(config.get("_name_or_path") or family),
        family=family,
        kind=kind,
        weights=result.weights,
        head=head,
        max_positions=_int_or_none(config.get("max_position_embeddings")),
        absolute_positions=False,
        image_size=image[0] if isinstance(image, list | tuple) else int(image),
        patch_size=patch[0] if isinstance(patch, list | tuple) else int(patch),
        channels=int(config.get("num_channels") or 3),
        sdpa=True,
        notes=result.notes,
        config_json=config_json,
        layer_count=_int_or_none(
            config.get("num_hidden_layers") or config.get("n_layer") or config.get("num_layers")
        )
        or 1,
    )


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _layer_count(arch: Architecture) -> int:
    return sum(s.layers for s in arch.stacks) or 1


def _kind_and_head(config: dict[str, Any], model_class: str) -> tuple[str, Head]:
    head_kind = head_of(model_class)
    vocab = int(config.get("vocab_size") or 0) if head_kind.endswith("lm") else 0
    if config.get("is_encoder_decoder"):
        kind = "encoder-decoder"
    elif "image_size" in config or "num_channels" in config:
        kind = "vit" if config.get("patch_size") else "cnn"
    elif head_kind in ("causal-lm", "none") and not config.get("is_encoder_only"):
        kind = "decoder"
    else:
        kind = "encoder"
    return kind, Head(head_kind, vocab=vocab, labels=int(config.get("num_labels") or 0))


__all__ = [
    "EXTRA_HINT",
    "TraceKey",
    "TraceResult",
    "TracedArchitecture",
    "available",
    "trace_config",
    "trace_key",
    "traced_architecture",
]
