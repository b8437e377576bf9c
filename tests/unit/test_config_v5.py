"""Configs written by transformers 5 (`AutoConfig.for_model(TYPE, num_hidden_layers=2)
.to_json_string()`, transformers 5.25.0, 2026-12-04; tests/fixtures/hf_configs_v5/) for every
family: each key is read under the spelling transformers 5 writes, so the parameter count is
the one transformers builds from that config (parameters.json: sum(p.numel()) of
AutoModel.from_config on the meta device, the base model without a task head)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.sizing.architectures import from_hf_config
from orchestrator.sizing.architectures.families import FAMILIES
from orchestrator.sizing.architectures.shapes import ConfigError

V5 = Path(__file__).resolve().parent.parent / "fixtures" / "hf_configs_v5"
EXPECTED = json.loads((V5 / "parameters.json").read_text())
# Vision base models: the fixture's `*Model` names no head, so the family's classifier is
# sized too (its weights are the difference).
WITH_DEFAULT_HEAD = {"convnext", "resnet", "swin"}


def test_every_family_has_a_transformers_5_fixture() -> None:
    assert set(EXPECTED) == set(FAMILIES)


MOE = ["mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3"]
# transformers 5's default DeepseekV2Config leaves the experts per token null (the model cannot
# route with it); DeepSeek-V2-Lite's config.json sets 6. It changes activations, not weights.
NULL_TOP_K = {"deepseek_v2": 6}


def load(family: str) -> dict:
    config = json.loads((V5 / f"{family}.json").read_text())
    if family in NULL_TOP_K:
        config["num_experts_per_tok"] = NULL_TOP_K[family]
    return config


@pytest.mark.parametrize("family", sorted(set(EXPECTED) - WITH_DEFAULT_HEAD))
def test_transformers_5_config_gives_transformers_parameter_count(family: str) -> None:
    assert from_hf_config(load(family), family).parameters == EXPECTED[family]


def test_a_null_experts_per_token_is_refused_not_defaulted() -> None:
    config = json.loads((V5 / "deepseek_v2.json").read_text())
    assert config["num_experts_per_tok"] is None  # as transformers 5.25 wrote it
    with pytest.raises(ConfigError, match="missing num_experts_per_tok / num_experts_per_token"):
        from_hf_config(config, "deepseek_v2")


def _top_k(config: dict, family: str) -> int:
    moe = [st.moe for st in from_hf_config(config, family).stacks if st.moe is not None]
    return moe[0].top_k


@pytest.mark.parametrize("family", MOE)
def test_experts_per_token_is_never_defaulted_nor_taken_from_sampling_top_k(family: str) -> None:
    config = load(family)
    config.pop("num_experts_per_tok")
    config["top_k"] = 50  # transformers 4.x configs carry the sampling parameter
    with pytest.raises(ConfigError, match="missing num_experts_per_tok"):
        from_hf_config(config, family)


@pytest.mark.parametrize("spelling", ["num_experts_per_token", "moe_topk"])
@pytest.mark.parametrize("family", MOE)
def test_experts_per_token_is_read_under_every_spelling(family: str, spelling: str) -> None:
    config = load(family)
    expected = _top_k(config, family)
    config[spelling] = config.pop("num_experts_per_tok")
    assert _top_k(config, family) == expected


@pytest.mark.parametrize(
    ("family", "key"),
    [
        ("qwen2_moe", "shared_expert_intermediate_size"),
        ("deepseek_v2", "n_shared_experts"),
        ("deepseek_v3", "n_shared_experts"),
        ("deepseek_v3", "first_k_dense_replace"),
        ("qwen3_moe", "moe_intermediate_size"),
    ],
)
def test_expert_widths_and_layouts_are_never_defaulted(family: str, key: str) -> None:
    config = load(family)
    config.pop(key)
    with pytest.raises(ConfigError, match=f"missing {key}"):
        from_hf_config(config, family)


def test_two_spellings_that_disagree_are_refused() -> None:
    config = load("qwen3_moe")
    config["num_experts"] = 60  # transformers 4.x's spelling, beside 5.x's num_local_experts
    with pytest.raises(ConfigError, match="disagree: num_experts = 60, num_local_experts = 128"):
        from_hf_config(config, "qwen3_moe")
    config["num_experts"] = 128  # the same value twice is one setting
    assert from_hf_config(config, "qwen3_moe").parameters == EXPECTED["qwen3_moe"]


def test_kv_heads_are_read_under_either_spelling() -> None:
    config = load("mistral")
    config["num_kv_heads"] = config.pop("num_key_value_heads")
    assert from_hf_config(config, "mistral").parameters == EXPECTED["mistral"]


@pytest.mark.parametrize("family", ["llama", "gemma"])
def test_a_null_tie_word_embeddings_means_the_family_default(family: str) -> None:
    config = load(family)
    config.pop("tie_word_embeddings")
    absent = from_hf_config(config, family).parameters
    config["tie_word_embeddings"] = None  # used to read as False: an untied head for Gemma
    assert from_hf_config(config, family).parameters == absent


@pytest.mark.parametrize("family", ["mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3"])
def test_moe_expert_count_is_never_defaulted(family: str) -> None:
    config = json.loads((V5 / f"{family}.json").read_text())
    for key in ("num_local_experts", "num_experts", "n_routed_experts"):
        config.pop(key, None)
    with pytest.raises(ConfigError, match="missing .*experts"):
        from_hf_config(config, family)
