"""Issue 23 item 6: `orch plan` output for people and machines. An ASCII stdout gets an ASCII
bar (no traceback); the table fits $COLUMNS by shortening, then dropping, columns; the header
shows the job as planned (image size for vision models); the JSON carries every assumption."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from orchestrator.textui import Column, fit_bar, fit_table


def orch(*args: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "PYTHONIOENCODING")}
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        env=environment,
        timeout=120,
    )


def test_an_ascii_stdout_gets_an_ascii_bar_and_no_traceback() -> None:
    result = orch("plan", "--model", "bert-large", PYTHONIOENCODING="ascii")
    assert result.returncode == 0, result.stderr.decode()
    text = result.stdout.decode("ascii")  # every byte is ASCII
    assert "Traceback" not in result.stderr.decode()
    bars = re.findall(r"\[[#.]{10}\] +\d+%", text)  # every row's bar, in ASCII
    assert len(bars) == 8, text
    # Where the blocks can be encoded they are used.
    utf8 = orch("plan", "--model", "bert-large", PYTHONIOENCODING="utf-8").stdout.decode()
    assert len(re.findall(r"\[[█░]{10}\] +\d+%", utf8)) == 8
    assert fit_bar(0.5, 4, blocks="#.") == "[##..]"


@pytest.mark.parametrize("width", [120, 80, 60])
def test_the_table_fits_columns(width: int) -> None:
    result = orch("plan", "--model", "llama-3-8b", "--lora-rank", "16", COLUMNS=str(width))
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().splitlines()
    assert max(map(len, lines)) <= width, "\n".join(ln for ln in lines if len(ln) > width)
    head = next(ln for ln in lines if ln.startswith("#  "))
    for kept in ("instance", "$/h", "cost"):
        assert kept in head
    if width < 100:
        assert "too narrow for: " in result.stdout.decode()


def test_without_a_terminal_or_columns_the_table_is_whole() -> None:
    text = orch("plan", "--model", "llama-3-8b", "--lora-rank", "16").stdout.decode()
    head = next(ln for ln in text.splitlines() if ln.startswith("#  "))
    assert head.split()[:4] == ["#", "cloud", "region", "instance"]
    assert "memory per GPU" in head and "MFU" in head and "too narrow" not in text


def test_fit_table_shortens_first_then_drops_in_order() -> None:
    columns = [
        Column("instance", ["g5.xlarge"]),
        Column("samples/s", ["15.4"], right=True, drop=2, short="smp/s"),
        Column("memory per GPU", ["[#####.....] 55%"], drop=3, short="mem", compact=["55%"]),
        Column("precision", ["amp-bf16"], drop=1),
    ]
    whole, dropped = fit_table(columns, None)
    assert dropped == [] and whole.splitlines()[0].split("  ")[0] == "instance"
    short, dropped = fit_table(columns, 28)
    assert dropped == ["precision"] and "smp/s" in short and "55%" in short
    assert max(map(len, short.splitlines())) <= 28
    least, dropped = fit_table(columns, 12)
    assert dropped == ["precision", "samples/s", "memory per GPU"]
    assert least.splitlines() == ["instance", "g5.xlarge"]


def test_vision_jobs_show_the_image_size_not_a_sequence() -> None:
    header = orch("plan", "--model", "resnet-50").stdout.decode().splitlines()[0]
    assert "224px images" in header and "seq" not in header
    bigger = orch("plan", "--model", "vit-base", "--image-size", "384").stdout.decode()
    assert "384px images" in bigger.splitlines()[0]
    text = orch("plan", "--model", "bert-large").stdout.decode()
    assert "seq 512" in text.splitlines()[0]
    assert "hours include 10 min of set-up per box; prices as read: aws 2026-12-0" in text


def test_json_carries_every_assumption() -> None:
    data = json.loads(orch("plan", "--model", "resnet-50", "--json").stdout)
    assumptions = data["assumptions"]
    assert data["job"]["samples"] == 100_000  # not null: that is what was planned
    assert assumptions["samples"] == 100_000 and assumptions["samples_assumed"] is True
    assert assumptions["shape"] == {"image_size": 224}
    assert assumptions["setup_hours"] == pytest.approx(1 / 6, abs=1e-3)
    assert set(assumptions["price_dates"]) == {data["choice"]["cloud"]}
    assert data["choice"]["price_date"].startswith("2026-")
    sized = json.loads(
        orch(
            "plan", "--model", "bert-base", "--epochs", "2", "--dataset-size", "1000", "--json"
        ).stdout
    )
    assert sized["job"]["samples"] is None and sized["job"]["epochs"] == 2
    assert sized["assumptions"]["samples"] == 2000
    assert sized["assumptions"]["samples_basis"] == "--epochs x --dataset-size"
