"""HF config dict -> Architecture: parameter counts, heads, GQA, errors, the --params-m guess.

tests/fixtures/hf_configs/*.json are the public config.json files of those models (the
resnet-50 ImageNet label map is the same 1000 labels as vit-base-patch16-224's).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.sizing.architectures import (
    ConfigError,
    from_hf_config,
    gpt_from_parameters,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "hf_configs"

# Published parameter counts: `sum(p.numel() for p in model.parameters())` of the model class
# named in each config's `architectures` (tied weights counted once), which is what the model
# cards report (e.g. Llama-2-7b 6.74B, Mistral-7B 7.24B, Qwen2-7B 7.62B, ResNet-50 25.6M,
# ViT-B/16 86.6M, GPT-2 124M, BERT-large 335M, T5-small 60.5M, DeBERTa-v3-base 184M).
PUBLISHED = {
    "albert-base-v2": 11_221_680,
    "bert-large-uncased": 335_174_458,
    "deberta-v3-base": 184_551_780,
    "deepseek-v2-lite": 15_706_484_224,  # model card: 15.7B total (measured: torch meta build)
    "distilbert-base-uncased": 66_985_530,
    "electra-small-discriminator": 13_549_057,
    "gpt2": 124_439_808,
    "llama-2-7b": 6_738_415_616,
    "mistral-7b": 7_241_732_096,
    "opt-125m": 125_239_296,
    "pythia-160m": 162_322_944,
    "qwen2-7b": 7_615_616_512,
    "resnet-50": 25_557_032,
    "roberta-base": 124_697_433,
    "t5-small": 60_506_624,
    "vit-base-patch16-224": 86_567_656,
}


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def test_every_fixture_has_a_published_count() -> None:
    assert {p.stem for p in FIXTURES.glob("*.json")} == set(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_matches_published_within_one_percent(name: str) -> None:
    arch = from_hf_config(fixture(name), name)
    assert abs(arch.parameters / PUBLISHED[name] - 1) < 0.01, arch.parameters


@pytest.mark.parametrize(
    ("name", "family", "kind", "head"),
    [
        ("bert-large-uncased", "bert", "encoder", "masked-lm"),
        ("electra-small-discriminator", "electra", "encoder", "pretraining"),
        ("gpt2", "gpt2", "decoder", "causal-lm"),
        ("t5-small", "t5", "encoder-decoder", "seq2seq-lm"),
        ("vit-base-patch16-224", "vit", "vit", "image-classification"),
        ("resnet-50", "resnet", "cnn", "image-classification"),
        ("deberta-v3-base", "deberta-v2", "encoder", "masked-lm"),  # no `architectures`
    ],
)
def test_family_kind_and_head(name: str, family: str, kind: str, head: str) -> None:
    arch = from_hf_config(fixture(name), name)
    assert (arch.family, arch.kind, arch.head.kind) == (family, kind, head)


def test_architectures_field_picks_the_head() -> None:
    config = fixture("bert-large-uncased")
    mlm = from_hf_config(config)
    config["architectures"] = ["BertForSequenceClassification"]
    config["num_labels"] = 3
    classifier = from_hf_config(config)
    assert classifier.head.kind == "sequence-classification"
    assert classifier.head.labels == 3
    # The MLM head has a transform and a vocab-sized bias; the classifier a pooler and 3 logits.
    vocab, h = config["vocab_size"], config["hidden_size"]
    assert mlm.parameters - classifier.parameters == (h * h + h + 2 * h + vocab) - (
        h * h + h + 3 * h + 3
    )


def test_unknown_head_falls_back_to_the_family_default_with_a_note() -> None:
    config = fixture("gpt2")
    config["architectures"] = ["GPT2DoubleHeadsModelX"]
    arch = from_hf_config(config)
    assert arch.head.kind == "causal-lm"
    assert any("GPT2DoubleHeadsModelX" in note for note in arch.notes)


def test_gqa_keys_and_values_are_narrower() -> None:
    mistral = from_hf_config(fixture("mistral-7b"))
    stack = mistral.stacks[0]
    assert stack.kv_heads == 8 and stack.heads == 32
    assert stack.kv_width * 4 == stack.q_width
    mha = dict(fixture("mistral-7b"), num_key_value_heads=32)
    # Each of 32 layers loses 2 x (hidden x 3072) weights in k and v.
    assert from_hf_config(mha).parameters - mistral.parameters == 32 * 2 * 4096 * 3072


def test_swiglu_llama_and_gelu_gpt2_mlps() -> None:
    llama = from_hf_config(fixture("llama-2-7b")).stacks[0]
    gpt2 = from_hf_config(fixture("gpt2")).stacks[0]
    assert llama.gated and llama.norm == "rmsnorm" and llama.causal
    assert not gpt2.gated and gpt2.activation == "gelu_new" and gpt2.norm == "layernorm"


def test_tied_embeddings_are_counted_once() -> None:
    config = fixture("gpt2")
    untied = dict(config, tie_word_embeddings=False)
    assert from_hf_config(untied).parameters - from_hf_config(config).parameters == 50257 * 768


def test_albert_shares_layer_weights() -> None:
    config = fixture("albert-base-v2")
    deeper = dict(config, num_hidden_layers=24)
    assert from_hf_config(deeper).parameters == from_hf_config(config).parameters
    assert from_hf_config(deeper).stacks[0].layers == 24


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_type": "mamba"}, "unsupported model_type"),
        ({"model_type": None}, "no model_type"),
        ({"hidden_size": "big"}, "must be an integer"),
        ({"num_attention_heads": 0}, "must be positive"),
        ({"num_attention_heads": 7}, "not divisible"),
    ],
)
def test_bad_configs_raise_config_error(change: dict, message: str) -> None:
    config = dict(fixture("bert-large-uncased"), **change)
    with pytest.raises(ConfigError, match=message):
        from_hf_config(config)


def test_missing_required_key_is_named() -> None:
    config = fixture("llama-2-7b")
    del config["intermediate_size"]
    with pytest.raises(ConfigError, match="intermediate_size"):
        from_hf_config(config)


@pytest.mark.parametrize("millions", [125, 350, 1300, 7000, 70000])
def test_params_m_guess_lands_near_the_requested_size(millions: int) -> None:
    arch = gpt_from_parameters(millions * 1e6)
    assert arch.synthetic
    assert abs(arch.parameters / (millions * 1e6) - 1) < 0.05
    stack = arch.stacks[0]
    assert stack.hidden % 64 == 0 and stack.hidden // stack.heads in (64, 128)


def test_params_m_guess_gets_deeper_and_wider_with_size() -> None:
    small, large = gpt_from_parameters(125e6).stacks[0], gpt_from_parameters(13e9).stacks[0]
    assert large.layers > small.layers and large.hidden > small.hidden


def test_catalog_models_build_and_match_their_published_counts() -> None:
    from orchestrator.catalog import load_models

    for entry in load_models().values():
        arch = from_hf_config(entry.config, entry.name)
        if entry.parameters:
            # Catalog counts are the rounded figures of papers and model cards ("7B").
            assert abs(arch.parameters / entry.parameters - 1) < 0.07, entry.name
