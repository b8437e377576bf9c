"""Options that change nothing for the model and job are named in one `warning:` line each, in
`orch estimate` and `orch plan`, the same in the table and in the JSON, and never refused (a
job file may set them for every model it is used with)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import run_cli

PLACE = ("--cloud", "aws", "--region", "us-east-1", "--samples", "10000")

IGNORED = [
    (
        ("--model", "gpt2", "--lora-dropout", "0.1"),
        "--lora-dropout 0.1 is ignored: it applies to LoRA adapters and no --lora-rank is given",
    ),
    (
        ("--model", "vit-base", "--fused-ce"),
        "--fused-ce is ignored: vit-base has no vocabulary cross-entropy loss",
    ),
    (
        ("--model", "resnet50", "--fused-ce"),
        "--fused-ce is ignored: resnet50 has no vocabulary cross-entropy loss",
    ),
    (
        ("--model", "resnet50", "--attention", "eager"),
        "--attention eager is ignored: resnet50 is a CNN (no attention)",
    ),
    (
        # The default value, typed: still nothing for a CNN to use.
        ("--model", "convnext-base", "--attention", "sdpa"),
        "--attention sdpa is ignored: convnext-base is a CNN (no attention)",
    ),
    (
        ("--model", "resnet50", "--activation-offload"),
        "--activation-offload is not modelled for CNNs: resnet50 is estimated without it",
    ),
]


def _warnings(text: str) -> list[str]:
    return [
        line.removeprefix("warning: ") for line in text.splitlines() if line.startswith("warning: ")
    ]


@pytest.fixture(autouse=True)
def _no_wrapping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # warning lines unwrapped, as in a pipe


@pytest.mark.parametrize(("args", "warning"), IGNORED)
def test_estimate_warns_once_in_the_table_and_the_json(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], warning: str
) -> None:
    code, out, err = run_cli(capsys, "estimate", *args)
    assert code == 0, err
    table = _warnings(out)
    assert table.count(warning) == 1, out
    code, out, err = run_cli(capsys, "estimate", *args, "--json")
    assert code == 0, err
    assert json.loads(out)["warnings"] == table


@pytest.mark.parametrize(("args", "warning"), IGNORED)
def test_plan_warns_once_in_the_table_and_the_json(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], warning: str
) -> None:
    code, out, err = run_cli(capsys, "plan", *args, *PLACE)
    assert code == 0, err
    table = _warnings(out)
    assert table.count(warning) == 1, out
    code, out, err = run_cli(capsys, "plan", *args, *PLACE, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert warning in data["warnings"]
    # The table's lines: the job's warnings, then the winner's.
    assert [*data["warnings"], *data["choice"]["warnings"]] == table


@pytest.mark.parametrize(
    "args",
    [
        ("--model", "gpt2", "--lora-rank", "8", "--lora-dropout", "0.1"),
        ("--model", "gpt2", "--fused-ce", "--attention", "eager"),
        ("--model", "bert-base", "--fused-ce", "--attention", "sdpa"),
        ("--model", "vit-base", "--activation-offload"),
        ("--model", "resnet50"),
    ],
)
def test_options_that_apply_draw_no_warning(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    code, out, err = run_cli(capsys, "estimate", *args, "--json")
    assert code == 0, err
    assert not any("is ignored" in w for w in json.loads(out)["warnings"])
    code, out, err = run_cli(capsys, "plan", *args, *PLACE, "--json")
    assert code == 0, err
    assert "warnings" not in json.loads(out)


def test_a_job_file_that_sets_attention_for_a_cnn_warns(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "orch.yaml").write_text(
        "version: 1\nmodel: resnet50\njob:\n  attention: sdpa\n  samples: 10000\n"
        "resources:\n  cloud: aws\n  region: us-east-1\n"
    )
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "plan")
    assert code == 0, err
    assert (
        _warnings(out).count("--attention sdpa is ignored: resnet50 is a CNN (no attention)") == 1
    )
