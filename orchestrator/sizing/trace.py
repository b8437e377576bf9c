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
- autocast (amp-*): the meta device has no autocast kernel, so `_CudaAutocast` applies
  CUDA's autocast policy at the torch-function level (docs/memory-model.md, "Traced
  activations", lists the op lists and the known gaps);
- MoE: experts run their eager implementation (a loop over experts); routing is data, which
  the meta device does not have, so `_BalancedRouting` answers the data-dependent ops with
  perfectly balanced routing: every expert is hit and receives tokens x top-k / experts rows.

Parameters and buffers are counted apart from activations (a linear saves its weight for
backward, but the weight is not an activation), and so are autocast's cached half copies
of the weights; saved tensors are deduplicated by storage (one tensor saved by two ops, or
two views of one storage, count once), and only those still referenced by the autograd graph
at the end of the forward count (a GPU frees the rest).

torch and transformers are imported only when a trace runs: the optional extra
`pip install 'orch[trace]'`. Nothing is downloaded (HF_HUB_OFFLINE).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import time
import weakref
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any, ClassVar

from orchestrator.errors import UsageError
from orchestrator.sizing.architectures import Architecture, Head, WeightGroup
from orchestrator.sizing.job import JobSpec

EXTRA_HINT = "pip install 'orch[trace]'"
LORA_TARGETS = ("query", "value", "q_proj", "v_proj", "c_attn", "query_key_value", "Wqkv")
# Head suffixes of transformers model classes -> (head kind, label shape).
_LABELS = (
    ("ForCausalLM", "causal-lm"),
    ("LMHeadModel", "causal-lm"),
    ("ForMaskedLM", "masked-lm"),
    ("ForConditionalGeneration", "seq2seq-lm"),
    ("ForPreTraining", "pretraining"),
    ("ForSequenceClassification", "sequence-classification"),
    ("ForImageClassification", "image-classification"),
    ("ForTokenClassification", "token-classification"),
    ("ForQuestionAnswering", "question-answering"),
)
_AUTO_CLASSES = (
    "AutoModelForCausalLM",
    "AutoModelForSeq2SeqLM",
    "AutoModelForMaskedLM",
    "AutoModelForImageClassification",
    "AutoModel",
)


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
class TraceResult:
    """What one traced training forward keeps, in bytes (for the job's micro-batch)."""

    activation_bytes: int  # saved for backward: not parameters, buffers or weight casts
    parameters: int  # unique parameter elements (tied weights once)
    trainable_parameters: int
    parameter_bytes: int
    buffer_bytes: int
    weight_cast_bytes: int  # autocast's half copies of the weights, saved by matmuls
    saved_tensors: int  # unique storages counted in activation_bytes
    forward_flops: float  # matmul/conv/attention FLOPs of the forward (FlopCounterMode)
    seconds: float  # build + forward
    model_class: str
    weights: tuple[WeightGroup, ...] = ()
    notes: tuple[str, ...] = ()
    versions: str = ""


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


@dataclass(frozen=True)
class TraceKey:
    """The parts of a job that change what a forward saves."""

    batch: int
    seq: int
    target_seq: int | None
    image_size: int | None
    precision: str
    attention: str
    grad_checkpointing: bool
    lora_rank: int | None


def trace_key(job: JobSpec) -> TraceKey:
    return TraceKey(
        job.batch,
        job.seq,
        job.target_seq,
        job.image_size,
        job.precision,
        job.attention,
        job.grad_checkpointing,
        job.lora_rank,
    )


# --------------------------------------------------------------------------- public entry


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
    head_kind = next((k for suffix, k in _LABELS if model_class.endswith(suffix)), "none")
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


@lru_cache(maxsize=32)
def trace_config(config_json: str, key: TraceKey) -> TraceResult:
    """Trace one training forward of the model in `config_json` (cached per job shape)."""
    config = json.loads(config_json)
    started = time.perf_counter()
    try:
        tracer = _Tracer(config, key)
        result = tracer.run()
        if key.grad_checkpointing:
            # Backward recomputes one checkpointed layer at a time: its saved tensors are
            # alive on top of the checkpoints (the analytic model adds the same maximum).
            plain = _Tracer(config, TraceKey(**{**key.__dict__, "grad_checkpointing": False}))
            plain.run()
            result = result | {"activation_bytes": result["activation_bytes"] + plain.max_layer}
    except UsageError:
        raise
    except Exception as exc:  # a model transformers builds but the meta device cannot run
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise UsageError(
            f"tracing model_type {config.get('model_type')!r} failed: {type(exc).__name__}: {first}"
        ) from None
    return TraceResult(**result, seconds=time.perf_counter() - started)


# --------------------------------------------------------------------------- the tracer


class _Saved:
    """What the pack hook hands autograd: alive exactly as long as autograd keeps it."""

    __slots__ = ("tensor", "layer", "__weakref__")

    def __init__(self, tensor: Any, layer: int) -> None:
        self.tensor = tensor
        self.layer = layer


def _storage_key(tensor: Any) -> tuple[int, int]:
    # Meta storages have no data pointer; the StorageImpl's address identifies them (all
    # counted storages are alive at once, held by `_Saved`, so addresses are not reused).
    storage = tensor.untyped_storage()
    return storage._cdata, storage.nbytes()


class _Tracer:
    def __init__(self, config: dict[str, Any], key: TraceKey) -> None:
        self.config = dict(config)
        self.key = key
        self.notes: list[str] = []
        self.max_layer = 0

    # ---- build

    def _build(self):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
        import torch
        import transformers

        transformers.logging.set_verbosity_error()
        config = dict(self.config)
        model_type = config.pop("model_type", None)
        names = config.get("architectures") or []
        try:
            hf_config = transformers.AutoConfig.for_model(model_type, **config)
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError(
                f"transformers {transformers.__version__} cannot build model_type "
                f"{model_type!r}: {str(exc).splitlines()[0]}"
            ) from None
        if hasattr(hf_config, "_experts_implementation"):
            hf_config._experts_implementation = "eager"
        cls = self._model_class(transformers, hf_config, names)
        attention = self.key.attention
        model = None
        for impl in (attention, "eager") if attention != "eager" else ("eager",):
            hf_config._attn_implementation = impl
            try:
                with torch.device("meta"):
                    model = cls(hf_config)
                break
            except ValueError as exc:
                if impl == "eager":
                    raise UsageError(f"transformers cannot build {cls.__name__}: {exc}") from None
                self.notes.append(
                    f"{cls.__name__} has no {impl} attention in transformers: traced with eager"
                )
        assert model is not None
        if self.key.precision == "bf16":
            model = model.to(torch.bfloat16)
        model.train()
        if self.key.grad_checkpointing:
            if not model.supports_gradient_checkpointing:
                raise UsageError(f"{cls.__name__} does not support gradient checkpointing")
            # Reentrant checkpointing saves each layer's inputs through ctx.save_for_backward,
            # so the hooks see them (the non-reentrant variant hides them behind its own hooks).
            kwargs = {"use_reentrant": True}
            if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x
                model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        return torch, transformers, model

    @staticmethod
    def _model_class(transformers, hf_config, names: list[str]):
        for name in names if isinstance(names, list) else [names]:
            cls = getattr(transformers, str(name), None)
            if isinstance(cls, type):
                return cls
        for auto in _AUTO_CLASSES:
            mapping = getattr(transformers, auto)._model_mapping
            with contextlib.suppress(KeyError, ValueError):
                return mapping[type(hf_config)]
        raise UsageError(f"transformers has no model class for {type(hf_config).__name__}")

    # ---- inputs

    def _inputs(self, torch, model) -> dict[str, Any]:
        import inspect

        b, s = self.key.batch, self.key.seq
        config = model.config
        meta = {"device": "meta"}
        accepted = set(inspect.signature(model.forward).parameters)
        name = type(model).__name__
        head = next((k for suffix, k in _LABELS if name.endswith(suffix)), "none")
        main = getattr(model, "main_input_name", "input_ids")
        inputs: dict[str, Any] = {}
        float_dtype = next(model.parameters()).dtype
        if main == "pixel_values":
            size = self.key.image_size or _first(getattr(config, "image_size", 224))
            channels = getattr(config, "num_channels", 3)
            inputs["pixel_values"] = torch.empty(b, channels, size, size, dtype=float_dtype, **meta)
        elif main == "input_features":  # speech encoders: mel frames, the config's length
            frames = 2 * getattr(config, "max_source_positions", 1500)
            bins = getattr(config, "num_mel_bins", 80)
            inputs["input_features"] = torch.empty(b, bins, frames, dtype=float_dtype, **meta)
        else:
            inputs["input_ids"] = torch.zeros(b, s, dtype=torch.long, **meta)
        target = self.key.target_seq or s
        long = {"dtype": torch.long, **meta}
        if head in ("causal-lm", "masked-lm", "token-classification"):
            inputs["labels"] = torch.zeros(b, s, **long)
        elif head == "seq2seq-lm":
            inputs["labels"] = torch.zeros(b, target, **long)
        elif head in ("sequence-classification", "image-classification"):
            inputs["labels"] = torch.zeros(b, **long)
        elif head == "question-answering":
            inputs["start_positions"] = torch.zeros(b, **long)
            inputs["end_positions"] = torch.zeros(b, **long)
        elif head == "pretraining":
            if "next_sentence_label" in accepted:
                inputs["labels"] = torch.zeros(b, s, **long)
                inputs["next_sentence_label"] = torch.zeros(b, **long)
            else:  # ELECTRA's discriminator: one label per token
                inputs["labels"] = torch.zeros(b, s, **long)
        if head == "none" and config.is_encoder_decoder and "decoder_input_ids" in accepted:
            inputs["decoder_input_ids"] = torch.zeros(b, target, **long)
        return {k: v for k, v in inputs.items() if k in accepted}

    # ---- run

    def run(self) -> dict[str, Any]:
        import warnings

        torch, transformers, model = self._build()

        params = {}
        trainable = 0
        for p in model.parameters():
            key = _storage_key(p)
            if key not in params:
                params[key] = p
                trainable += p.numel() if p.requires_grad else 0
        buffers = {_storage_key(b) for b in model.buffers()}
        layers = _repeated_layers(torch, model)
        current = [-1]
        handles = []
        for index, layer in enumerate(layers):
            handles.append(layer.register_forward_pre_hook(_set_layer(current, index)))
            handles.append(layer.register_forward_hook(_set_layer(current, -1)))
        experts: list[int] = []
        for module in model.modules():
            count = _expert_count(module)
            if count:
                handles.append(module.register_forward_pre_hook(_push(experts, count)))
                handles.append(module.register_forward_hook(_pop(experts)))

        live: weakref.WeakSet[_Saved] = weakref.WeakSet()

        def pack(tensor):
            saved = _Saved(tensor, current[0])
            live.add(saved)
            return saved

        def unpack(saved):
            return saved.tensor

        amp = self.key.precision in ("amp-bf16", "amp-fp16")
        half = torch.float16 if self.key.precision == "amp-fp16" else torch.bfloat16
        autocast = _CudaAutocast(torch, half) if amp else contextlib.nullcontext()
        routing = _BalancedRouting(torch, experts)
        inputs = self._inputs(torch, model)
        with (
            warnings.catch_warnings(),
            _gpu_kernels(torch, half if amp else None),
            torch.autograd.graph.saved_tensors_hooks(pack, unpack),
            routing,
            autocast,
        ):
            warnings.simplefilter("ignore")
            output = model(**inputs)
        for handle in handles:
            handle.remove()
        casts = set(autocast.cast_keys) if amp else set()
        counted: dict[tuple[int, int], int] = {}  # storage -> layer that saved it first
        cast_bytes = 0
        seen_casts = set()
        for saved in list(live):
            key = _storage_key(saved.tensor)
            if key in params or key in buffers:
                continue
            if key in casts:
                if key not in seen_casts:
                    seen_casts.add(key)
                    cast_bytes += key[1]
                continue
            if key not in counted or counted[key] < 0:
                counted[key] = saved.layer
        per_layer: dict[int, int] = {}
        for (_, nbytes), layer in counted.items():
            per_layer[layer] = per_layer.get(layer, 0) + nbytes
        self.max_layer = max((v for k, v in per_layer.items() if k >= 0), default=0)
        if routing.guesses:
            self.notes.append(
                f"{routing.guesses} data-dependent values outside MoE routing were assumed "
                "(all-true masks, zero scalars)"
            )
        del output
        matmul = _matmul_weights(torch, model)
        weights = tuple(
            WeightGroup(name, tuple(p.shape), 1, matmul=_storage_key(p) in matmul)
            for name, p in _unique_named_parameters(model)
        )
        return {
            "activation_bytes": sum(k[1] for k in counted),
            "parameters": sum(p.numel() for p in params.values()),
            "trainable_parameters": trainable,
            "parameter_bytes": sum(k[1] for k in params),
            "buffer_bytes": sum(k[1] for k in buffers),
            "weight_cast_bytes": cast_bytes,
            "saved_tensors": len(counted),
            "forward_flops": float(routing.flops),
            "model_class": type(model).__name__,
            "weights": weights,
            "notes": tuple(self.notes),
            "versions": f"torch {torch.__version__.split('+')[0]}, "
            f"transformers {transformers.__version__}",
        }


def _first(value: Any) -> int:
    return int(value[0] if isinstance(value, list | tuple) else value)


def _unique_named_parameters(model):
    seen = set()
    for name, p in model.named_parameters():
        key = _storage_key(p)
        if key not in seen:
            seen.add(key)
            yield name, p


def _matmul_weights(torch, model) -> set[tuple[int, int]]:
    """Storages of the weights a matmul or convolution reads (autocast casts these): those of
    linear and conv modules (GPT-2's Conv1D too, and tied embeddings through the LM head) and
    MoE experts' 3-D weights."""
    found = set()
    nn = torch.nn
    for module in model.modules():
        kind = isinstance(module, nn.Linear | nn.modules.conv._ConvNd)
        if kind or type(module).__name__ == "Conv1D":
            weight = getattr(module, "weight", None)
            if weight is not None:
                found.add(_storage_key(weight))
        if _expert_count(module):
            found.update(_storage_key(p) for p in module.parameters(recurse=False) if p.dim() == 3)
    return found


def _repeated_layers(torch, model) -> list[Any]:
    """The longest ModuleList of one module class: the transformer's layers."""
    best: list[Any] = []
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > len(best):
            kinds = {type(m) for m in module}
            if len(kinds) == 1 and _expert_count(module[0]) == 0:
                best = list(module)
    return best


def _expert_count(module: Any) -> int:
    """Experts of an MoE experts module (the one that loops over experts), else 0."""
    name = type(module).__name__.lower()
    if "expert" not in name and "moe" not in name:
        return 0
    for attr in ("num_experts", "num_local_experts", "n_routed_experts"):
        value = getattr(module, attr, None)
        if isinstance(value, int) and value > 1:
            return value
    return 0


def _set_layer(current: list[int], index: int):
    def hook(*_args):
        current[0] = index

    return hook


def _push(stack: list[int], count: int):
    def hook(*_args):
        stack.append(count)

    return hook


def _pop(stack: list[int]):
    def hook(*_args):
        if stack:
            stack.pop()

    return hook


# ----------------------------------------------------------------- GPU kernels on meta


@contextlib.contextmanager
def _gpu_kernels(torch, amp_dtype):
    """Route dropout and SDPA to the ops a CUDA run uses (see the module docstring)."""
    functional = torch.nn.functional
    original_dropout = functional.dropout
    original_sdpa = functional.scaled_dot_product_attention

    def dropout(input, p=0.5, training=True, inplace=False):
        if training and 0.0 < p < 1.0 and input.is_floating_point():
            return torch.native_dropout(input, p, True)[0]  # bool mask, as on CUDA
        return original_dropout(input, p, training, inplace)

    def sdpa(
        query,
        key,
        value,
        attn_mask=None,
        dropout_p=0.0,
        is_causal=False,
        scale=None,
        enable_gqa=False,
    ):
        # Why not the meta/CPU SDPA: it takes the math fallback, which materialises and
        # saves the b x heads x s x s scores and probabilities. CUDA picks flash attention
        # (half precision, no explicit mask, head_dim <= 256) or the memory-efficient kernel
        # (fp32, or an additive mask), both O(s): q, k, v, out and fp32 log-sum-exp.
        if amp_dtype is not None:  # autocast casts SDPA's inputs before the kernel choice
            query, key, value = (
                t.to(amp_dtype) if t.dtype == torch.float32 else t for t in (query, key, value)
            )
        aten = torch.ops.aten
        half = query.dtype in (torch.float16, torch.bfloat16)
        if half and attn_mask is None and query.shape[-1] <= 256:
            # FlashAttention-2 handles grouped-query attention natively (k, v at kv width).
            return aten._scaled_dot_product_flash_attention(
                query, key, value, dropout_p, is_causal, False, scale=scale
            )[0]
        if enable_gqa and key.shape[-3] != query.shape[-3]:
            groups = query.shape[-3] // key.shape[-3]
            key = key.repeat_interleave(groups, dim=-3)
            value = value.repeat_interleave(groups, dim=-3)
        bias = attn_mask
        if bias is not None:
            if bias.dtype == torch.bool:  # SDPA turns a bool mask into an additive one
                bias = torch.zeros(bias.shape, dtype=query.dtype, device=query.device)
            elif bias.dtype != query.dtype:
                bias = bias.to(query.dtype)
            bias = bias.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
        return aten._scaled_dot_product_efficient_attention(
            query, key, value, bias, True, dropout_p, is_causal, scale=scale
        )[0]

    functional.dropout = dropout
    functional.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        functional.dropout = original_dropout
        functional.scaled_dot_product_attention = original_sdpa


def _mode_base(torch, kind: str):
    if kind == "dispatch":
        from torch.utils._python_dispatch import TorchDispatchMode

        return TorchDispatchMode
    from torch.overrides import TorchFunctionMode

    return TorchFunctionMode


class _BalancedRouting:
    """A dispatch mode that counts matmul/conv/attention FLOPs (torch.utils.flop_counter's
    formulas, without FlopCounterMode's per-module bookkeeping, which tripled trace times)
    and answers the data-dependent ops the meta device cannot: nonzero and scalar reads.
    Inside an MoE experts module of E experts, a 1-D expert-hit mask is all hit and a
    routing mask (top-k x tokens) holds numel / E true entries (balanced routing); elsewhere
    masks are all true, bool checks true (transformers asks "is every sequence unpacked?")
    and numbers read 0 (masks and numbers counted in `guesses`)."""

    def __new__(cls, torch, experts: list[int]):
        from torch.utils.flop_counter import flop_registry

        base = _mode_base(torch, "dispatch")
        aten = torch.ops.aten

        class Mode(base):
            guesses = 0
            flops = 0

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                packet = getattr(func, "overloadpacket", None)
                first = args[0] if args else None
                on_meta = getattr(first, "is_meta", False)
                if on_meta and packet is aten.nonzero:
                    numel = first.numel()
                    if experts:
                        rows = min(numel, experts[-1]) if first.dim() == 1 else numel // experts[-1]
                    else:
                        rows = numel
                        Mode.guesses += 1
                    return torch.empty(rows, first.dim(), dtype=torch.long, device="meta")
                if on_meta and packet is aten._local_scalar_dense:
                    if first.dtype != torch.bool:
                        Mode.guesses += 0 if experts else 1
                        return 0
                    # In the experts loop a test is "is this the padding expert" (no);
                    # elsewhere a check such as transformers' "no packed sequences" (yes).
                    return not experts
                out = func(*args, **kwargs)
                count = flop_registry.get(packet)
                if count is not None:
                    Mode.flops += count(*args, **kwargs, out_val=out)
                return out

        mode = Mode()
        return mode


class _CudaAutocast:
    """CUDA autocast's policy, applied at the torch-function level (above autograd, as the
    real Autocast dispatch key is), for meta tensors that no autocast kernel covers.

    Lists follow aten/src/ATen/autocast_mode.cpp (CUDA): matmuls, convolutions and SDPA run in
    the half dtype (weights that are leaves requiring grad are cast once per forward and
    cached, as autocast's cast cache does); the fp32 list (norms, softmax, losses, exp/log/
    pow/rsqrt, sum) runs in fp32; the promote list casts to the widest input dtype. Every
    other op runs in its inputs' dtype.
    """

    def __new__(cls, torch, half):
        base = _mode_base(torch, "function")
        functional = torch.nn.functional
        tensor = torch.Tensor
        aten = torch.ops.aten
        low = {
            functional.linear,
            functional.bilinear,
            torch.matmul,
            tensor.matmul,
            tensor.__matmul__,
            tensor.__rmatmul__,
            torch.mm,
            tensor.mm,
            torch.bmm,
            tensor.bmm,
            torch.baddbmm,
            tensor.baddbmm,
            torch.addmm,
            tensor.addmm,
            torch.addbmm,
            torch.addmv,
            torch.mv,
            tensor.mv,
            torch.einsum,
            functional.conv1d,
            functional.conv2d,
            functional.conv3d,
            functional.conv_transpose1d,
            functional.conv_transpose2d,
            functional.conv_transpose3d,
            functional.prelu,
            aten._scaled_dot_product_flash_attention.default,
            aten._scaled_dot_product_efficient_attention.default,
        }
        fp32 = {
            functional.layer_norm,
            functional.group_norm,
            functional.cross_entropy,
            functional.nll_loss,
            functional.mse_loss,
            functional.l1_loss,
            functional.smooth_l1_loss,
            functional.kl_div,
            functional.binary_cross_entropy_with_logits,
            functional.softplus,
            functional.cosine_similarity,
            torch.exp,
            tensor.exp,
            torch.log,
            tensor.log,
            torch.log1p,
            tensor.log1p,
            torch.expm1,
            torch.reciprocal,
            tensor.reciprocal,
            torch.rsqrt,
            tensor.rsqrt,
            torch.pow,
            tensor.pow,
            tensor.__pow__,
            torch.logsumexp,
            tensor.logsumexp,
            torch.norm,
            tensor.norm,
            torch.cdist,
        }
        # fp32 by an output dtype argument ("fp32_set_opt_dtype"): the input is not copied.
        fp32_dtype = {
            functional.softmax,
            functional.log_softmax,
            torch.softmax,
            tensor.softmax,
            torch.log_softmax,
            tensor.log_softmax,
            torch.sum,
            tensor.sum,
            torch.cumsum,
            tensor.cumsum,
            torch.prod,
            tensor.prod,
        }
        promote = {
            torch.addcmul,
            tensor.addcmul,
            torch.addcdiv,
            torch.index_put,
            tensor.index_put,
            tensor.index_put_,
            torch.scatter_add,
            tensor.scatter_add,
            tensor.scatter_add_,
            torch.dot,
            torch.cross,
            torch.atan2,
            torch.tensordot,
        }

        def eligible(value) -> bool:
            return (
                isinstance(value, torch.Tensor)
                and value.is_floating_point()
                and value.dtype != torch.float64
            )

        class Mode(base):
            def __init__(self):
                super().__init__()
                self.cache: dict[int, Any] = {}
                self.cast_keys: list[tuple[int, int]] = []

            def cast(self, value, dtype):
                if not eligible(value) or value.dtype == dtype:
                    return value
                if dtype == half and value.is_leaf and value.requires_grad:
                    cached = self.cache.get(id(value))
                    if cached is None or cached[0] is not value:
                        cached = (value, value.to(dtype))
                        self.cache[id(value)] = cached
                        self.cast_keys.append(_storage_key(cached[1]))
                    return cached[1]
                cast = value.to(dtype)
                base = value._base
                if dtype == half and base is not None and base.is_leaf and base.requires_grad:
                    # A view of a weight (an MoE expert's slice of a 3-D parameter) is not
                    # cached: each call makes a copy, which the matmul saves. It is counted
                    # with the weights' half copies (memory.py adds those per parameter).
                    self.cast_keys.append(_storage_key(cast))
                return cast

            def map(self, args, kwargs, dtype):
                def one(value):
                    if isinstance(value, list | tuple):
                        return type(value)(one(v) for v in value)
                    return self.cast(value, dtype)

                return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}

            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = dict(kwargs or {})
                if func in low:
                    args, kwargs = self.map(args, kwargs, half)
                elif func in fp32:
                    args, kwargs = self.map(args, kwargs, torch.float32)
                elif func in fp32_dtype:
                    if args and eligible(args[0]) and kwargs.get("dtype") is None:
                        kwargs["dtype"] = torch.float32
                elif func in promote:
                    floats = [a for a in (*args, *kwargs.values()) if eligible(a)]
                    if floats:
                        widest = max((a.dtype for a in floats), key=lambda d: d.itemsize)
                        args, kwargs = self.map(args, kwargs, widest)
                return func(*args, **kwargs)

        return Mode()


__all__ = [
    "EXTRA_HINT",
    "TraceResult",
    "TracedArchitecture",
    "available",
    "trace_config",
    "traced_architecture",
]
