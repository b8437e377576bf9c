"""Hugging Face config dict -> Architecture: the shapes that memory and FLOPs are computed from.

An `Architecture` lists every weight tensor group (shape and how many), the transformer stacks
(per-layer widths, attention, MLP and norm kinds, dropouts), the embeddings and the task head;
or, for CNNs, the ResNet stages. Nothing here is a parameter-count heuristic: the counts come
from the same shapes `transformers` builds (checked against published counts in the tests).

Supported `model_type`s: `families.FAMILIES` (BERT family and ModernBERT; GPT-2, NeoX, OPT and
the LLaMA-style decoders incl. Gemma 1-3, Phi-3, Qwen3, OLMo-2, Falcon, BLOOM and the MoE
families Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3; T5, BART/mBART, Whisper; ViT, Swin, CLIP,
SigLIP; ResNet, ConvNeXt).

Layout: `shapes` (the value types; `cnn` and `decoder_parts` hold those only some families
have), `families` (which model_types, per-family facts),
`config` (reading config keys), and one module per kind of model with its builders:
`encoders`, `decoders`, `seq2seq`, `vision`. A builder's module is imported only when a config
of its family is built, so `orch plan --model bert-large` loads the encoder builders alone.
"""

from __future__ import annotations

import importlib
from typing import Any

from orchestrator.sizing.architectures.families import (
    DECODER_FAMILIES,
    ENCODER_FAMILIES,
    FAMILIES,
)
from orchestrator.sizing.architectures.shapes import (
    Architecture,
    ConfigError,
    Embedding,
    Head,
    Stack,
    WeightGroup,
)

__all__ = [
    "Architecture",
    "ConfigError",
    "Embedding",
    "FAMILIES",
    "Head",
    "Stack",
    "WeightGroup",
    "from_hf_config",
    "gpt_from_parameters",
]

# model_type -> (module under this package, builder). Every builder takes (config, family, name).
_BUILDERS: dict[str, tuple[str, str]] = {
    **{family: ("encoders", "build_bert") for family in ENCODER_FAMILIES},
    "modernbert": ("encoders", "build_modernbert"),
    **{family: ("decoders", "build_decoder") for family in DECODER_FAMILIES},
    "t5": ("seq2seq", "build_t5"),
    "bart": ("seq2seq", "build_bart"),
    "mbart": ("seq2seq", "build_bart"),
    "whisper": ("seq2seq", "build_whisper"),
    "vit": ("vision", "build_vit"),
    "resnet": ("vision", "build_resnet"),
    "convnext": ("vision", "build_convnext"),
    "swin": ("vision", "build_swin"),
    "clip": ("vision", "build_clip"),
    "siglip": ("vision", "build_clip"),
}
# Spellings of model_type that older configs use.
_ALIASES = {"deberta_v2": "deberta-v2", "gpt-neox": "gpt_neox"}


def from_hf_config(config: dict[str, Any], name: str = "") -> Architecture:
    """Build an Architecture from a Hugging Face config dict; ConfigError when unsupported."""
    if not isinstance(config, dict):
        raise ConfigError("config is not a JSON object")
    family = config.get("model_type")
    if not isinstance(family, str) or not family:
        raise ConfigError("config has no model_type")
    family = _ALIASES.get(family, family)
    name = name or str(config.get("_name_or_path") or family)
    entry = _BUILDERS.get(family)
    if entry is None:
        raise ConfigError(f"unsupported model_type {family!r} (supported: {', '.join(FAMILIES)})")
    module, builder = entry
    build = getattr(importlib.import_module(f"{__name__}.{module}"), builder)
    return build(config, family, name)


def gpt_from_parameters(parameters: float, name: str = "") -> Architecture:
    """A GPT-2-style decoder (tied embeddings, GELU MLP of 4x) with about `parameters`."""
    from orchestrator.sizing.architectures.decoders import gpt_of_size

    return gpt_of_size(parameters, name)
