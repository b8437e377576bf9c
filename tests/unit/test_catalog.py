"""The shipped catalog data: sources, cross-references, required content, and the loader API."""

from __future__ import annotations

import datetime as dt
import re
import shutil
from pathlib import Path

import pytest

from orchestrator.catalog import (
    find_instance,
    find_model,
    load_gpus,
    load_instances,
    load_models,
    loader,
)
from orchestrator.catalog.measurements import load_measurements
from orchestrator.catalog.validate import validate_catalog
from orchestrator.errors import UsageError

REQUIRED_GPUS = (
    "T4",
    "V100-16GB",
    "V100-32GB",
    "A10",
    "A10G",
    "L4",
    "A100-40GB",
    "A100-80GB",
    "H100-80GB",
)
REQUIRED_AWS = [
    *(f"g4dn.{s}" for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge")),
    *(
        f"g5.{s}"
        for s in (
            "xlarge",
            "2xlarge",
            "4xlarge",
            "8xlarge",
            "12xlarge",
            "16xlarge",
            "24xlarge",
            "48xlarge",
        )
    ),
    "g6.xlarge",
    "p3.2xlarge",
    "p3.8xlarge",
    "p3.16xlarge",
    "p3dn.24xlarge",
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
]
REQUIRED_MODELS = (
    "bert-base-uncased",
    "bert-base-cased",
    "bert-large-uncased",
    "bert-large-cased",
    "roberta-base",
    "roberta-large",
    "distilbert-base-uncased",
    "albert-base-v2",
    "deberta-v3-base",
    "gpt2",
    "gpt2-medium",
    "gpt2-large",
    "gpt2-xl",
    "t5-small",
    "t5-base",
    "t5-large",
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "mistral-7b",
    "qwen2-7b",
    "vit-base",
    "vit-large",
    "resnet50",
    "resnet101",
)
# Alibaba family -> GPU. gn6i is T4 and gn7i is A10 (write-ups often swap them).
ALIYUN_FAMILY_GPU = {
    "gn6i": "T4",
    "gn6v": "V100-16GB",
    "gn6e": "V100-32GB",
    "gn7": "A100-40GB",
    "gn7i": "A10",
    "gn7e": "A100-80GB",
}


@pytest.fixture
def fresh_cache():
    loader.clear_cache()
    yield
    loader.clear_cache()


# ------------------------------------------------------------------------------ whole catalog


def test_shipped_catalog_validates_cleanly():
    assert validate_catalog() == []


def _assert_source(source, what):
    assert source.url.startswith("https://"), what
    # Never dated in the future (the bound was the catalog's first day, 2026-12-02).
    assert dt.date.fromisoformat(source.date) <= dt.datetime.now(dt.UTC).date(), what


def test_every_fact_carries_a_source_with_url_and_date():
    for gpu in load_gpus().values():
        _assert_source(gpu.source, gpu.name)
        _assert_source(gpu.efficiency_source, gpu.name)
    for row in load_instances():
        _assert_source(row.source, row.name)
        _assert_source(row.price_source, row.name)
    for entry in load_models().values():
        _assert_source(entry.source, entry.name)
        assert "huggingface.co" in entry.source.url
    for m in load_measurements():
        _assert_source(m.source, f"{m.gpu} {m.model}")


def test_prices_are_positive_and_spot_below_on_demand():
    for row in load_instances():
        for region, price in row.prices.items():
            assert price.on_demand is None or price.on_demand > 0, (row.name, region)
            if price.spot is not None and price.on_demand is not None:
                assert 0 < price.spot <= price.on_demand, (row.name, region)


# ----------------------------------------------------------------------------------- GPUs


def test_required_gpus_with_dense_peaks_and_smi_names():
    gpus = load_gpus()
    assert set(REQUIRED_GPUS) <= set(gpus)
    for name in ("T4", "V100-16GB", "V100-32GB"):
        assert "bf16" not in gpus[name].peak_tflops
        assert "tf32" not in gpus[name].peak_tflops
    for name in ("A10", "A10G", "L4", "A100-40GB", "A100-80GB", "H100-80GB"):
        assert {"fp32", "tf32", "fp16", "bf16"} <= set(gpus[name].peak_tflops)
    # Dense, not sparse: A100 312 and H100 ~989 TFLOPS bf16.
    assert gpus["A100-40GB"].peak_tflops["bf16"] == 312
    assert 980 < gpus["H100-80GB"].peak_tflops["bf16"] < 1000
    smi = {n for g in gpus.values() for n in g.nvidia_smi_names}
    for name in (
        "Tesla T4",
        "Tesla V100-SXM2-16GB",
        "NVIDIA A10G",
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA A10",
        "NVIDIA L4",
    ):
        assert name in smi
    for gpu in gpus.values():
        assert set(gpu.efficiency) <= set(gpu.peak_tflops)
        assert all(0 < v <= 1 for v in gpu.efficiency.values())


def test_measurements_cover_gpus_and_precisions():
    rows = load_measurements()
    assert len(rows) >= 10
    gpus = {m.gpu for m in rows}
    assert {"V100-16GB", "A100-40GB", "A100-80GB", "H100-80GB"} <= gpus
    assert gpus & {"A10", "A10G"}
    precisions = {m.precision for m in rows}
    assert precisions & {"fp32", "tf32"}
    assert precisions & {"amp-fp16", "amp-bf16"}
    for m in rows:
        find_model(m.model)  # every measured model resolves
        assert m.samples_per_s > 0 and m.batch >= 1
        assert (m.seq > 0) != (m.image_size > 0)
        assert m.memory_format in ("", "channels-last")
        assert not m.memory_format or m.image_size > 0  # a layout is a CNN's


# ------------------------------------------------------------------------------ instances


def test_aws_required_types_and_regions():
    rows = {row.name: row for row in load_instances("aws")}
    assert set(REQUIRED_AWS) <= set(rows)
    regions = set()
    for name in REQUIRED_AWS:
        assert rows[name].price("us-east-1") is not None, name
        regions |= set(rows[name].prices)
    assert {"us-east-1", "us-west-2", "eu-west-1"} <= regions
    assert regions & {"ap-northeast-1", "eu-central-1"}
    # the common types are priced in at least four regions
    for name in ("g4dn.xlarge", "g5.xlarge", "g5.12xlarge", "p4d.24xlarge"):
        assert len(rows[name].prices) >= 4, name


def test_aws_specs():
    p4d = find_instance("aws", "p4d.24xlarge")
    assert (p4d.gpu, p4d.gpu_count, p4d.vcpus, p4d.efa) == ("A100-40GB", 8, 96, True)
    assert find_instance("aws", "p4de.24xlarge").gpu == "A100-80GB"
    assert find_instance("aws", "p5.48xlarge").gpu == "H100-80GB"
    assert find_instance("aws", "g5.xlarge").gpu == "A10G"
    assert find_instance("aws", "g6.xlarge").gpu == "L4"
    g4 = find_instance("aws", "g4dn.12xlarge")
    assert (g4.gpu, g4.gpu_count) == ("T4", 4)


def test_p3_is_legacy_with_a_note_and_others_are_not():
    for row in load_instances("aws"):
        if row.family in ("p3", "p3dn"):
            assert row.legacy and "Deep Learning AMI" in row.legacy_note, row.name
        else:
            assert not row.legacy, row.name


def test_aliyun_families_map_to_the_right_gpus():
    rows = load_instances("aliyun")
    families = {row.family for row in rows}
    assert set(ALIYUN_FAMILY_GPU) <= families
    for row in rows:
        assert row.name.startswith(f"ecs.{row.family}-"), row.name
        assert row.gpu == ALIYUN_FAMILY_GPU[row.family], row.name
    for name in ("ecs.gn6i-c4g1.xlarge", "ecs.gn6i-c8g1.2xlarge", "ecs.gn7i-c8g1.2xlarge"):
        find_instance("aliyun", name)
    assert find_instance("aliyun", "ecs.gn7i-c16g1.4xlarge").vcpus == 16


def test_aliyun_prices_are_converted_cny_list_prices_marked_unverified():
    """Every shipped Aliyun price line carries the CNY list figure it was converted from
    (`# CNY x`, 7.2 CNY per USD), and the source they cite is marked unverified: a converted
    price never counts as verified (issue 10)."""
    import re
    import tomllib

    path = Path(loader.DATA_DIR) / "aliyun.toml"
    data = tomllib.loads(path.read_text())
    source = data["sources"][data["defaults"]["price_source"]]
    assert source["verified"] is False and "NOT RE-VERIFIED" in source["note"]
    lines = re.findall(
        r'^"([a-z0-9-]+)" = \{ on_demand = ([0-9.]+) \}  # CNY ([0-9.]+)$', path.read_text(), re.M
    )
    priced = [row for row in data["instance"] if row.get("prices")]
    assert len(lines) == sum(len(row["prices"]) for row in priced) >= 30
    for _region, usd, cny in lines:
        assert float(usd) == pytest.approx(float(cny) / 7.2, abs=0.0005)


def test_load_instances_filters_by_cloud():
    everything = load_instances()
    aws = load_instances("aws")
    aliyun = load_instances("aliyun")
    assert len(everything) == len(aws) + len(aliyun)
    assert {r.cloud for r in aws} == {"aws"} and {r.cloud for r in aliyun} == {"aliyun"}
    with pytest.raises(UsageError, match="unknown cloud"):
        load_instances("gcp")


def test_find_instance_suggests_close_names():
    with pytest.raises(UsageError) as excinfo:
        find_instance("aws", "g5.xlarg")
    assert "g5.xlarge" in excinfo.value.one_line()
    assert excinfo.value.exit_code == 2
    assert find_instance("aws", "G5.XLARGE").name == "g5.xlarge"


# --------------------------------------------------------------------------------- models


def test_required_models_and_aliases():
    models = load_models()
    assert set(REQUIRED_MODELS) <= set(models)
    assert find_model("bert-large").name == "bert-large-uncased"
    assert find_model("BERT-Base").name == "bert-base-uncased"
    assert find_model("distilbert").name == "distilbert-base-uncased"
    assert find_model("albert-base").name == "albert-base-v2"
    assert find_model("google-bert/bert-large-uncased").name == "bert-large-uncased"
    assert find_model("meta-llama/Llama-2-7b-hf").name == "llama-2-7b"
    assert find_model("google/vit-base-patch16-224").name == "vit-base"


def test_unknown_model_names_close_matches():
    with pytest.raises(UsageError) as excinfo:
        find_model("bret-large")
    line = excinfo.value.one_line()
    assert line.startswith("unknown model 'bret-large'")
    assert "did you mean" in line and "bert-large" in line


def test_configs_use_the_real_hugging_face_keys():
    bert = find_model("bert-large-uncased").config
    assert (bert["model_type"], bert["num_hidden_layers"], bert["hidden_size"]) == (
        "bert",
        24,
        1024,
    )
    assert bert["intermediate_size"] == 4096 and bert["type_vocab_size"] == 2
    gpt2 = find_model("gpt2-xl").config
    assert (gpt2["n_layer"], gpt2["n_embd"], gpt2["n_head"]) == (48, 1600, 25)
    t5 = find_model("t5-large").config
    assert (t5["d_model"], t5["num_layers"], t5["num_decoder_layers"], t5["d_ff"]) == (
        1024,
        24,
        24,
        4096,
    )
    distil = find_model("distilbert").config
    assert (distil["dim"], distil["n_layers"], distil["hidden_dim"]) == (768, 6, 3072)
    albert = find_model("albert-base-v2").config
    assert albert["embedding_size"] == 128
    deberta = find_model("deberta-v3-base").config
    assert deberta["model_type"] == "deberta-v2" and deberta["relative_attention"] is True
    assert deberta["pos_att_type"] == "p2c|c2p" and deberta["position_buckets"] == 256
    llama70 = find_model("llama-2-70b").config
    assert (llama70["num_key_value_heads"], llama70["num_attention_heads"]) == (8, 64)
    assert find_model("llama-3-8b").config["rope_theta"] == 500000.0
    vit = find_model("vit-base").config
    assert (vit["image_size"], vit["patch_size"], vit["num_channels"]) == (224, 16, 3)
    resnet = find_model("resnet101").config
    assert resnet["layer_type"] == "bottleneck" and resnet["depths"] == [3, 4, 23, 3]
    assert resnet["hidden_sizes"][-1] == 2048 and resnet["num_labels"] == 1000


def _transformer_parameters(config: dict) -> float:
    """Rough parameter count from a decoder/encoder config (embeddings + blocks)."""
    hidden = config.get("hidden_size") or config.get("n_embd")
    layers = config.get("num_hidden_layers") or config.get("n_layer")
    heads = config.get("num_attention_heads") or config.get("n_head")
    inner = config.get("intermediate_size") or config.get("n_inner") or 4 * hidden
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = hidden // heads
    attention = 2 * hidden * hidden + 2 * hidden * kv_heads * head_dim
    gated = config.get("hidden_act") == "silu"  # llama-style gated MLP has three matrices
    mlp = (3 if gated else 2) * hidden * inner
    untied = config.get("tie_word_embeddings") is False
    embeddings = config["vocab_size"] * hidden * (2 if untied else 1)
    return layers * (attention + mlp) + embeddings


@pytest.mark.parametrize(
    "name",
    [
        "bert-base-uncased",
        "bert-large-uncased",
        "roberta-large",
        "gpt2",
        "gpt2-xl",
        "llama-2-7b",
        "llama-2-70b",
        "llama-3-8b",
        "mistral-7b",
        "qwen2-7b",
    ],
)
def test_configs_agree_with_the_published_parameter_count(name):
    entry = find_model(name)
    estimate = _transformer_parameters(entry.config)
    assert abs(estimate - entry.parameters) / entry.parameters < 0.12, (estimate, entry.parameters)


# ----------------------------------------------------------------------- loader validation


def _copy_data(tmp_path: Path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(loader.DATA_DIR, target)
    return target


def test_validation_reports_an_instance_with_an_unknown_gpu(tmp_path, monkeypatch, fresh_cache):
    data = _copy_data(tmp_path)
    text = (data / "aws.toml").read_text()
    (data / "aws.toml").write_text(text.replace('gpu = "A10G"', 'gpu = "A10X"', 1))
    monkeypatch.setattr(loader, "DATA_DIR", data)
    problems = validate_catalog()
    assert any("unknown GPU 'A10X'" in p for p in problems)


@pytest.mark.parametrize(
    "bad, message",
    [
        ("on_demand = -0.526", "on_demand must be a positive number, not -0.526"),
        ("on_demand = 0", "on_demand must be a positive number, not 0"),
        ("on_demand = nan", "on_demand must be a positive number, not nan"),
        ('on_demand = "0.526"', "on_demand must be a positive number, not '0.526'"),
    ],
)
def test_loading_rejects_a_price_that_is_not_a_positive_number(
    tmp_path, monkeypatch, fresh_cache, bad, message
):
    """Checked when read, not only by validate_catalog() in the tests: a plugin cloud's own
    catalog file goes through the same loader, and a zero, negative or NaN price would win
    every plan ("$-2.44 for the job"), a string was a traceback."""
    data = _copy_data(tmp_path)
    text = (data / "aws.toml").read_text()
    (data / "aws.toml").write_text(text.replace("on_demand = 0.526", bad, 1))
    monkeypatch.setattr(loader, "DATA_DIR", data)
    with pytest.raises(loader.CatalogError, match=re.escape(message)):
        loader.load_instances("aws")


def test_loading_rejects_a_region_that_is_not_a_table(tmp_path, monkeypatch, fresh_cache):
    data = _copy_data(tmp_path)
    text = (data / "aws.toml").read_text()
    line = next(line for line in text.splitlines() if "on_demand = 0.526" in line)
    (data / "aws.toml").write_text(text.replace(line, line.split(" = ")[0] + " = 0.526", 1))
    monkeypatch.setattr(loader, "DATA_DIR", data)
    with pytest.raises(loader.CatalogError, match="must be a table"):
        loader.load_instances("aws")


def test_loading_rejects_a_source_without_a_date(tmp_path, monkeypatch, fresh_cache):
    data = _copy_data(tmp_path)
    text = (data / "gpus.toml").read_text()
    (data / "gpus.toml").write_text(text.replace('date = "2026-12-02"', 'date = "soon"', 1))
    monkeypatch.setattr(loader, "DATA_DIR", data)
    with pytest.raises(loader.CatalogError, match="not an ISO date"):
        loader.load_gpus()


def test_loading_rejects_an_unknown_source_key(tmp_path, monkeypatch, fresh_cache):
    data = _copy_data(tmp_path)
    text = (data / "aws.toml").read_text()
    (data / "aws.toml").write_text(text.replace('source = "aws-g5"', 'source = "aws-g9"', 1))
    monkeypatch.setattr(loader, "DATA_DIR", data)
    with pytest.raises(loader.CatalogError, match="unknown source key 'aws-g9'"):
        loader.load_instances("aws")


@pytest.mark.parametrize(
    "line, bad, message",
    [
        ('optimizer = "eager"', 'optimizer = "lazy"', "optimizer must be"),
        ("accumulation = 1\n", "accumulation = 0\n", "accumulation must be at least 1"),
        ('memory_format = "channels-last"', 'memory_format = "nhwc"', "memory_format must be"),
    ],
)
def test_loading_rejects_a_measurement_the_model_cannot_read(
    tmp_path, monkeypatch, fresh_cache, line, bad, message
):
    data = _copy_data(tmp_path)
    text = (data / "gpus.toml").read_text()
    assert line in text
    (data / "gpus.toml").write_text(text.replace(line, bad, 1))
    monkeypatch.setattr(loader, "DATA_DIR", data)
    with pytest.raises(loader.CatalogError, match=message):
        load_measurements()


def test_loaded_values_are_cached():
    assert load_gpus() is load_gpus()
    assert load_models() is load_models()
