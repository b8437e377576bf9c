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


@pytest.mark.parametrize("family", sorted(set(EXPECTED) - WITH_DEFAULT_HEAD))
def test_transformers_5_config_gives_transformers_parameter_count(family: str) -> None:
    config = json.loads((V5 / f"{family}.json").read_text())
    assert from_hf_config(config, family).parameters == EXPECTED[family]


@pytest.mark.parametrize("family", ["mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3"])
def test_moe_expert_count_is_never_defaulted(family: str) -> None:
    config = json.loads((V5 / f"{family}.json").read_text())
    for key in ("num_local_experts", "num_experts", "n_routed_experts"):
        config.pop(key, None)
    with pytest.raises(ConfigError, match="missing .*experts"):
        from_hf_config(config, family)
