"""The tracer: builds a `transformers` model on the meta device and runs one training forward
under saved-tensor hooks, counting what autograd keeps (see the package docstring)."""

from __future__ import annotations

import contextlib
import json
import os
import time
import weakref
from functools import lru_cache
from typing import Any

from orchestrator.errors import UsageError
from orchestrator.sizing.architectures import WeightGroup
from orchestrator.sizing.trace.autocast import cuda_autocast
from orchestrator.sizing.trace.inputs import model_inputs
from orchestrator.sizing.trace.kernels import gpu_kernels
from orchestrator.sizing.trace.key import TraceKey, TraceResult
from orchestrator.sizing.trace.routing import balanced_routing, expert_count, pop, push
from orchestrator.sizing.trace.storage import Saved, storage_key

# Tried in order when the config names no model class transformers has.
AUTO_CLASSES = (
    "AutoModelForCausalLM",
    "AutoModelForSeq2SeqLM",
    "AutoModelForMaskedLM",
    "AutoModelForImageClassification",
    "AutoModel",
)


@lru_cache(maxsize=32)
def trace_config(config_json: str, key: TraceKey) -> TraceResult:
    """Trace one training forward of the model in `config_json` (cached per job shape)."""
    config = json.loads(config_json)
    started = time.perf_counter()
    try:
        tracer = Tracer(config, key)
        result = tracer.run()
        if key.grad_checkpointing:
            # Backward recomputes one checkpointed layer at a time: its saved tensors are
            # alive on top of the checkpoints (the analytic model adds the same maximum).
            plain = Tracer(config, TraceKey(**{**key.__dict__, "grad_checkpointing": False}))
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


class Tracer:
    """One traced training forward of one config at one job shape."""

    def __init__(self, config: dict[str, Any], key: TraceKey) -> None:
        self.config = dict(config)
        self.key = key
        self.notes: list[str] = []
        self.max_layer = 0

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
        for auto in AUTO_CLASSES:
            mapping = getattr(transformers, auto)._model_mapping
            with contextlib.suppress(KeyError, ValueError):
                return mapping[type(hf_config)]
        raise UsageError(f"transformers has no model class for {type(hf_config).__name__}")

    # ---- inputs

    def run(self) -> dict[str, Any]:
        torch, transformers, model = self._build()
        params: dict[tuple[int, int], Any] = {}
        trainable = 0
        for p in model.parameters():
            key = storage_key(p)
            if key not in params:
                params[key] = p
                trainable += p.numel() if p.requires_grad else 0
        buffers = {storage_key(b) for b in model.buffers()}
        output, live, routing, cast_keys = self._forward(torch, model)
        counted, cast_bytes = self._tally(live, params, buffers, cast_keys)
        if routing.guesses:
            self.notes.append(
                f"{routing.guesses} data-dependent values outside MoE routing were assumed "
                "(all-true masks, zero scalars)"
            )
        del output, live
        matmul = _matmul_weights(torch, model)
        weights = tuple(
            WeightGroup(name, tuple(p.shape), 1, matmul=storage_key(p) in matmul)
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

    def _forward(self, torch, model) -> tuple[Any, list[Saved], Any, set[tuple[int, int]]]:
        """One training forward under the hooks: its output (which holds the autograd graph)
        and the autocast mode, the tensors autograd still keeps at its end, the routing mode
        (FLOPs, guesses) and the storages of autocast's weight copies."""
        import warnings

        current = [-1]
        handles = []
        for index, layer in enumerate(_repeated_layers(torch, model)):
            handles.append(layer.register_forward_pre_hook(_set_layer(current, index)))
            handles.append(layer.register_forward_hook(_set_layer(current, -1)))
        experts: list[int] = []
        for module in model.modules():
            count = expert_count(module)
            if count:
                handles.append(module.register_forward_pre_hook(push(experts, count)))
                handles.append(module.register_forward_hook(pop(experts)))

        live: weakref.WeakSet[Saved] = weakref.WeakSet()

        def pack(tensor):
            saved = Saved(tensor, current[0])
            live.add(saved)
            return saved

        def unpack(saved):
            return saved.tensor

        amp = self.key.precision in ("amp-bf16", "amp-fp16")
        half = torch.float16 if self.key.precision == "amp-fp16" else torch.bfloat16
        autocast = cuda_autocast(torch, half) if amp else contextlib.nullcontext()
        routing = balanced_routing(torch, experts)
        inputs = model_inputs(torch, model, self.key)
        with (
            warnings.catch_warnings(),
            gpu_kernels(torch, half if amp else None),
            torch.autograd.graph.saved_tensors_hooks(pack, unpack),
            routing,
            autocast,
        ):
            warnings.simplefilter("ignore")
            output = model(**inputs)
        for handle in handles:
            handle.remove()
        casts = set(autocast.cast_keys) if amp else set()
        return (output, autocast), list(live), routing, casts

    def _tally(self, live, params, buffers, casts) -> tuple[dict[tuple[int, int], int], int]:
        """Saved storages (not parameters, buffers or weight casts) -> the layer that saved
        each first, and the bytes of the weights' half copies; sets `max_layer`."""
        counted: dict[tuple[int, int], int] = {}  # storage -> layer that saved it first
        cast_bytes = 0
        seen_casts = set()
        for saved in live:
            key = storage_key(saved.tensor)
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
        return counted, cast_bytes


def _unique_named_parameters(model):
    seen = set()
    for name, p in model.named_parameters():
        key = storage_key(p)
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
                found.add(storage_key(weight))
        if expert_count(module):
            found.update(storage_key(p) for p in module.parameters(recurse=False) if p.dim() == 3)
    return found


def _repeated_layers(torch, model) -> list[Any]:
    """The longest ModuleList of one module class: the transformer's layers."""
    best: list[Any] = []
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > len(best):
            kinds = {type(m) for m in module}
            if len(kinds) == 1 and expert_count(module[0]) == 0:
                best = list(module)
    return best


def _set_layer(current: list[int], index: int):
    def hook(*_args):
        current[0] = index

    return hook
