"""`orch estimate`: the JSON contract, the table, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import run_cli

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "hf_configs"
ROOT = Path(__file__).resolve().parents[2]
PARTS = (
    "parameters_bytes",
    "gradients_bytes",
    "optimizer_bytes",
    "activations_bytes",
    "overhead_bytes",
    "total_bytes",
)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    return run_cli(capsys, "estimate", *args)


def fixture(name: str) -> str:
    return str(FIXTURES / f"{name}.json")


def test_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, "--hf-config", fixture("llama-2-7b"), "--batch", "2", "--seq", "1024", "--json"
    )
    assert code == 0, err
    data = json.loads(out)  # exactly one JSON object
    assert {"model", "job", "parameters", "memory", "warnings"} <= set(data)
    assert isinstance(data["parameters"], int) and data["parameters"] == 6_738_415_616
    assert set(data["memory"]) == {*PARTS, "peak_bytes", "peak_phase", "phases"}
    assert data["memory"]["peak_phase"] in data["memory"]["phases"]
    assert all(type(v) is int for k, v in data["memory"].items() if k.endswith("_bytes"))
    memory = data["memory"]
    assert memory["total_bytes"] == memory["peak_bytes"] + memory["overhead_bytes"]
    assert data["job"]["batch"] == 2 and data["job"]["seq"] == 1024
    assert data["warnings"] == []


def test_catalog_model_by_alias(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--model", "bert-large", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["model"] == "bert-large-uncased" and data["parameters"] == 335_174_458


def test_options_move_the_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    def total(*extra: str) -> dict[str, int]:
        code, out, err = run(capsys, "--hf-config", fixture("gpt2"), "--json", *extra)
        assert code == 0, err
        return json.loads(out)["memory"]

    base = total()
    assert total("--grad-checkpointing")["activations_bytes"] < base["activations_bytes"]
    assert total("--batch", "16")["activations_bytes"] > base["activations_bytes"]
    sharded = total("--gpus", "4", "--zero", "3")
    assert sharded["parameters_bytes"] < base["parameters_bytes"]
    assert total("--optimizer", "sgd")["optimizer_bytes"] == 0
    lora = total("--lora-rank", "8")
    assert lora["gradients_bytes"] < base["gradients_bytes"] / 50


def test_human_table_lists_the_parts_and_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--params-m", "350", "--batch", "4")
    assert code == 0, err
    for label in ("parameters", "gradients", "optimizer states", "activations", "overhead"):
        assert label in out
    assert "total" in out and "GiB" in out
    assert "warning: --params-m 350" in out


def test_params_m_warning_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--params-m", "1300", "--json")
    assert code == 0
    data = json.loads(out)
    assert abs(data["parameters"] / 1.3e9 - 1) < 0.05
    assert any("GPT-2-style" in w for w in data["warnings"])


def test_encoder_decoder_and_vision_shapes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--hf-config", fixture("t5-small"), "--target-seq", "64", "--json")
    assert code == 0 and json.loads(out)["parameters"] == 60_506_624
    code, out, _ = run(capsys, "--hf-config", fixture("resnet-50"), "--image-size", "160", "--json")
    assert code == 0 and json.loads(out)["parameters"] == 25_557_032


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "bert-larj"], "unknown model 'bert-larj'"),
        (["--hf-config", "/no/such/config.json"], "/no/such/config.json: no such file"),
        (["--params-m", "350", "--batch", "0"], "--batch must be at least 1"),
        (["--params-m", "350", "--seq", "2000000"], "--seq 2,000,000 is beyond any real job"),
        (["--params-m", "350", "--batch", "5000000"], "beyond any real job"),
        (["--params-m", "0.001"], "--params-m 0.001 is out of range"),
        (["--params-m", "350", "--model", "gpt2"], "only one model source"),
        ([], "no model given"),
        (["--model", "bert-large", "--seq", "4096"], "longer than bert-large-uncased's 512"),
        (["--hf-config", "RESNET", "--lora-rank", "8"], "needs a transformer"),
        (["--params-m", "350", "--lora-rank", "0"], "--lora-rank must be at least 1"),
        (["--params-m", "350", "--zero", "5"], "--zero"),
        (["--params-m", "350", "--precision", "fp8"], "--precision"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    args = [fixture("resnet-50") if a == "RESNET" else a for a in args]
    code, out, err = run(capsys, *args)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("orch: error:")
    assert message in lines[0]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ('["a list"]', "not a JSON object"),
        ('{"model_type": "mamba", "hidden_size": 768}', "unsupported model_type 'mamba'"),
        ('{"model_type": "llama", "hidden_size": 4096}', "missing"),
    ],
)
def test_bad_config_files_name_the_file(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    content: str,
    message: str,
) -> None:
    # As without the `trace` extra (with it, an unknown family is traced instead).
    monkeypatch.setattr("orchestrator.sizing.trace.available", lambda: False)
    path = tmp_path / "config.json"
    path.write_text(content)
    code, _, err = run(capsys, "--hf-config", str(path))
    assert code == 2
    assert err.count("\n") == 1 and str(path) in err and message in err


def test_relative_position_models_warn_past_their_context(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "--hf-config", fixture("llama-2-7b"), "--seq", "8192", "--json")
    assert code == 0
    assert any("4096 positions" in w for w in json.loads(out)["warnings"])


def test_no_traceback_from_the_real_entry_point(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{")
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", "estimate", "--hf-config", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
