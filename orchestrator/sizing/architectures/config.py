"""Reading a Hugging Face config dict: typed lookups over alternative key names, the head a
config asks for, and the common transformer dimensions (`Dims`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.sizing.architectures.families import ACTIVATIONS, DEFAULT_HEAD, HEAD_SUFFIXES
from orchestrator.sizing.architectures.shapes import ConfigError


def cfg_get(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    """The value of the first of `keys` (one setting under transformers' spellings) that the
    config sets; `default` where none is set, and without a default a ConfigError naming every
    spelling. Two spellings that disagree are refused: which one transformers reads depends
    on the version (its `attribute_map`s), so either could be wrong."""
    found = {key: cfg[key] for key in keys if cfg.get(key) is not None}
    if len({repr(value) for value in found.values()}) > 1:
        values = ", ".join(f"{key} = {value!r}" for key, value in found.items())
        raise ConfigError(f"config sets one value under two spellings that disagree: {values}")
    if found:
        return next(iter(found.values()))
    if default is not None:
        return default
    raise ConfigError(f"missing {' / '.join(keys)}")


def cfg_int(cfg: dict[str, Any], *keys: str, default: int | None = None) -> int:
    value = cfg_get(cfg, *keys, default=default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ConfigError(f"{keys[0]} must be an integer, got {value!r}")
    if int(value) < 0:
        raise ConfigError(f"{keys[0]} must not be negative, got {value!r}")
    return int(value)


def cfg_float(cfg: dict[str, Any], *keys: str, default: float = 0.0) -> float:
    for key in keys:
        value = cfg.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{key} must be a number, got {value!r}")
            return float(value)
    return default


def cfg_bool(cfg: dict[str, Any], key: str, default: bool) -> bool:
    """A boolean key; absent or null means transformers' class default for the family (an
    explicit null used to read as False)."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    return value


def positive(name: str, value: int) -> int:
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {value}")
    return value


def head_kind(cfg: dict[str, Any], family: str) -> tuple[str, list[str]]:
    """The task head named by `architectures`, or the family's pre-training head."""
    names = cfg.get("architectures") or []
    if isinstance(names, str):
        names = [names]
    for arch in names:
        for suffix, kind in HEAD_SUFFIXES:
            if isinstance(arch, str) and arch.endswith(suffix):
                return kind, []
    if names:
        kind = DEFAULT_HEAD[family]
        return kind, [f"unknown head {names[0]!r}: sizing the {kind} head instead"]
    return DEFAULT_HEAD[family], []


def num_labels(cfg: dict[str, Any], default: int = 2) -> int:
    if isinstance(cfg.get("id2label"), dict) and cfg["id2label"]:
        return len(cfg["id2label"])
    return cfg_int(cfg, "num_labels", default=default)


def cfg_activation(cfg: dict[str, Any], *keys: str, default: str) -> str:
    value = default
    for key in keys:
        if isinstance(cfg.get(key), str):
            value = cfg[key]
            break
    value = {"swish": "silu", "gelu_fast": "gelu_new"}.get(value, value)
    if value not in ACTIVATIONS:
        raise ConfigError(f"unsupported activation {value!r}")
    return value


@dataclass(slots=True)
class FamilyKeys:
    """Which HF config keys hold a family's dimensions (the first key present wins), and the
    family's defaults where the config leaves a value out."""

    hidden: tuple[str, ...] = ("hidden_size",)
    layers: tuple[str, ...] = ("num_hidden_layers",)
    heads: tuple[str, ...] = ("num_attention_heads",)
    kv_heads: tuple[str, ...] = ()  # empty: as many kv heads as heads
    intermediate: tuple[str, ...] = ("intermediate_size",)
    intermediate_factor: int = 0  # > 0: the MLP width is this x hidden when the key is unset
    positions: tuple[str, ...] = ("max_position_embeddings",)
    positions_default: int = 2048
    activation: tuple[str, ...] = ("hidden_act",)
    activation_default: str = "gelu"
    hidden_dropout: tuple[str, ...] = ("hidden_dropout_prob",)
    attn_dropout: tuple[str, ...] = ("attention_probs_dropout_prob",)
    dropout_default: float = 0.0
    type_vocab: bool = False  # token-type (segment) embeddings
    tied_default: bool = False


@dataclass(slots=True)
class Dims:
    """A transformer's sizes as read from its config through its FamilyKeys."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    positions: int
    vocab: int
    activation: str
    hidden_dropout: float
    attn_dropout: float
    types: int
    tied: bool


def read_dims(cfg: dict[str, Any], keys: FamilyKeys) -> Dims:
    h = cfg_int(cfg, *keys.hidden)
    layers = cfg_int(cfg, *keys.layers)
    heads = cfg_int(cfg, *keys.heads)
    kv = cfg_int(cfg, *keys.kv_heads, default=heads) if keys.kv_heads else heads
    if keys.intermediate_factor:
        inter = cfg_int(cfg, *keys.intermediate, default=0) or keys.intermediate_factor * h
    else:
        inter = cfg_int(cfg, *keys.intermediate)
    return Dims(
        hidden=h,
        layers=layers,
        heads=heads,
        kv_heads=kv,
        head_dim=cfg_int(cfg, "head_dim", default=h // max(heads, 1)),
        intermediate=inter,
        positions=cfg_int(cfg, *keys.positions, default=keys.positions_default),
        vocab=cfg_int(cfg, "vocab_size"),
        activation=cfg_activation(cfg, *keys.activation, default=keys.activation_default),
        hidden_dropout=cfg_float(cfg, *keys.hidden_dropout, default=keys.dropout_default),
        attn_dropout=cfg_float(cfg, *keys.attn_dropout, default=keys.dropout_default),
        types=cfg_int(cfg, "type_vocab_size", default=2) if keys.type_vocab else 0,
        tied=cfg_bool(cfg, "tie_word_embeddings", default=keys.tied_default),
    )


def check_sizes(d: Dims, divisible: bool = True) -> None:
    for label, value in (("hidden size", d.hidden), ("layers", d.layers), ("heads", d.heads)):
        positive(label, value)
    if divisible and d.hidden % d.heads:
        raise ConfigError(f"hidden size {d.hidden} is not divisible by {d.heads} heads")
