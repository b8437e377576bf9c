"""Issue 23 item 4: conflicting or absurd planning options are one line and exit 2 naming the
flags; GPU names take their common short forms; a named cloud ranks its boxes even when their
prices are unverified. The real CLI runs as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from orchestrator.catalog.gpu_names import resolve_gpu
from orchestrator.errors import UsageError
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.run_length import MAX_SAMPLES, job_samples


def orch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, timeout=120
    )


def one_error(result: subprocess.CompletedProcess[str], *words: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result
    assert len(lines) == 1 and lines[0].startswith("orch: error: "), result.stderr
    assert all(word in lines[0] for word in words), lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (("--epochs", "3"), ("--epochs 3", "--dataset-size")),
        (
            ("--samples", "5000", "--epochs", "2", "--dataset-size", "100"),
            ("--samples", "--epochs"),
        ),
        (("--samples", "5000", "--dataset-size", "100"), ("--samples", "--dataset-size")),
        (("--dataset-size", "100"), ("--dataset-size 100", "--epochs")),
        (("--samples", "1000000000000000"), ("--samples 1000000000000000", "10,000,000,000")),
        (("--epochs", "1e9", "--dataset-size", "1000000"), ("--epochs", "--dataset-size")),
        (("--gpus", "3"), ("--gpus 3", "no box has 3 GPUs", "1, 2, 4, 8")),
        (("--gpus", "3", "--gpu", "V100-16GB"), ("--gpus 3", "--gpu V100-16GB", "1, 4, 8")),
        (("--gpu", "A100"), ("--gpu 'A100' is ambiguous", "A100-40GB, A100-80GB")),
        (("--gpu", "Z9"), ("unknown GPU 'Z9'", "H100-80GB")),
        (("--throughput", "V100=50"), ("--throughput 'V100' is ambiguous",)),
    ],
)
def test_conflicts_and_ranges_are_one_line_exit_2(extra, words) -> None:
    one_error(orch("plan", "--model", "bert-large", *extra), *words)


def test_a_job_beyond_a_year_on_every_box_is_refused_not_priced() -> None:
    # Within the sample bound, yet no box finishes it in a year: no $-billion plan, exit 2.
    args = ("--model", "llama-3-70b", "--lora-rank", "16", "--zero", "3")
    result = orch("plan", *args, "--samples", str(MAX_SAMPLES))
    one_error(result, "no box finishes 10,000,000,000 samples within a year", "--samples")


def test_short_gpu_names_select_the_one_catalog_gpu() -> None:
    known = ["A100-40GB", "A100-80GB", "A10", "A10G", "H100-80GB", "T4"]
    assert resolve_gpu("H100", known) == "H100-80GB"
    assert resolve_gpu("h100-80gb", known) == "H100-80GB"
    assert resolve_gpu("a10", known) == "A10"  # exact first: not A10G, not A100-*
    assert resolve_gpu("A10G", known) == "A10G"
    with pytest.raises(UsageError, match="ambiguous: it matches A100-40GB, A100-80GB"):
        resolve_gpu("A100", known)
    with pytest.raises(UsageError, match="unknown GPU 'H10'"):
        resolve_gpu("H10", known)
    result = orch("plan", "--model", "bert-large", "--gpu", "H100", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert {c["gpu"] for c in [plan["choice"], *plan["alternatives"]]} == {"H100-80GB"}
    listed = orch("catalog", "instances", "--gpu", "h100", "--json")
    assert listed.returncode == 0 and {r["gpu"] for r in json.loads(listed.stdout)} == {"H100-80GB"}


def test_run_length_rules_in_the_library() -> None:
    assert job_samples(JobSpec(model="gpt2", epochs=2, dataset_size=1000)) == (2000, False)
    assert job_samples(JobSpec(model="gpt2")) == (100_000, True)
    assert job_samples(JobSpec(model="gpt2", samples=MAX_SAMPLES)) == (MAX_SAMPLES, False)
    with pytest.raises(UsageError):
        job_samples(JobSpec(model="gpt2", samples=MAX_SAMPLES + 1))


def test_a_named_cloud_ranks_its_unverified_prices_with_a_dated_warning() -> None:
    result = orch("plan", "--model", "bert-large", "--cloud", "aliyun")
    assert result.returncode == 0, result.stderr
    assert "Winner: ecs." in result.stdout
    warning = next(ln for ln in result.stdout.splitlines() if ln.startswith("warning: price"))
    assert "read 2026-12-03" in warning and "https://" in warning
    data = json.loads(orch("plan", "--model", "bert-large", "--cloud", "aliyun", "--json").stdout)
    assert data["choice"]["price_verified"] is False and data["choice"]["price_date"]


def test_unverified_prices_never_beat_verified_ones_under_cloud_any() -> None:
    data = json.loads(orch("plan", "--model", "bert-large", "--json").stdout)
    rows = [data["choice"], *data["alternatives"]]
    assert all(c["price_verified"] for c in rows)
    assert {c["cloud"] for c in rows} == {"aws"}
