"""`orch catalog refresh --cloud aws`: real boto3 against a loopback stand-in of the Price List
GetProducts (JSON 1.1) and EC2 DescribeSpotPriceHistory (query/XML) APIs (tests/sim/aws_prices.py,
which says why moto cannot serve here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.clouds.aws import prices as aws_pricing
from tests.sim.aws_prices import PriceServer, SpotRow, product

REPO = Path(__file__).resolve().parents[2]
T1, T2 = "p5.48xlarge", "g6e.xlarge"


def rows() -> tuple[list, list[SpotRow]]:
    products = [
        product(T1, "us-east-1", "55.0400000000"),
        product(T1, "us-west-2", "55.0400000000"),
        product(T1, "ap-northeast-1", "68.8000000000"),  # a region nobody asked for
        product(T1, "us-east-1", "70.1000000000", operatingSystem="Windows"),  # filtered out
        product(T1, "us-east-1", "0.0000000000", capacitystatus="UnusedCapacityReservation"),
        product(T2, "us-east-1", "1.8610000000"),
    ]
    spot = [
        SpotRow("us-east-1", "us-east-1a", T1, "20.500000", "2026-12-03T07:00:00.000Z"),
        SpotRow("us-east-1", "us-east-1a", T1, "30.000000", "2026-12-03T08:00:00.000Z"),  # latest
        SpotRow("us-east-1", "us-east-1b", T1, "14.246000", "2026-12-03T08:00:00.000Z"),
        SpotRow(
            "us-east-1", "us-east-1c", T1, "9.000000", "2026-12-03T08:00:00.000Z", "SUSE Linux"
        ),
        SpotRow("us-west-2", "us-west-2a", T1, "21.622900", "2026-12-03T08:00:00.000Z"),
        SpotRow("us-east-1", "us-east-1a", T2, "0.748300", "2026-12-03T08:00:00.000Z"),
    ]
    return products, spot


@pytest.fixture
def server(monkeypatch, tmp_path):
    products, spot = rows()
    with PriceServer(products, spot, page_size=1) as sim:
        for key in list(os.environ):
            if key.startswith("AWS_"):
                monkeypatch.delenv(key)
        monkeypatch.setenv("AWS_ENDPOINT_URL", sim.endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        yield sim


def test_refresh_reads_on_demand_and_lowest_current_spot(server):
    table = aws_pricing.refresh_prices(["us-east-1", "us-west-2"], [T1, T2])
    assert table[T1]["us-east-1"] == {"on_demand": 55.04, "spot": 14.246}
    assert table[T1]["us-west-2"] == {"on_demand": 55.04, "spot": 21.6229}
    assert table[T2]["us-east-1"] == {"on_demand": 1.861, "spot": 0.7483}
    assert table[T2]["us-west-2"] == {"on_demand": None, "spot": None}  # not sold there
    assert "ap-northeast-1" not in table[T1]


def test_requests_have_the_real_shape_and_follow_next_token(server):
    aws_pricing.refresh_prices(["us-east-1", "us-west-2"], [T1])
    pricing = [r for r in server.requests if "target" in r]
    ec2 = [r for r in server.requests if "action" in r]
    # The Price List API is called in us-east-1 whatever region is priced.
    assert {(r["service"], r["region"]) for r in pricing} == {("pricing", "us-east-1")}
    assert all(r["body"]["ServiceCode"] == "AmazonEC2" for r in pricing)
    filters = {(f["Field"], f["Value"]) for f in pricing[0]["body"]["Filters"]}
    assert {("instanceType", T1), ("operatingSystem", "Linux"), ("tenancy", "Shared")} <= filters
    assert all(f["Type"] == "TERM_MATCH" for f in pricing[0]["body"]["Filters"])
    # page_size=1: every product page after the first was asked for with the NextToken.
    tokens = [r["body"].get("NextToken") for r in pricing]
    assert tokens[0] is None and tokens[1:] == [f"page:{i}" for i in range(1, len(tokens))]
    assert len(pricing) == 3  # us-east-1, us-west-2 and ap-northeast-1 Linux products
    assert {r["region"] for r in ec2} == {"us-east-1", "us-west-2"}
    first = ec2[0]["form"]
    assert first["InstanceType.1"] == [T1] and first["ProductDescription.1"] == ["Linux/UNIX"]
    # Three Linux rows for T1 in us-east-1 (SUSE is filtered by ProductDescription): 3 pages.
    assert "StartTime" in first and len([r for r in ec2 if r["region"] == "us-east-1"]) == 3


def test_parse_product_ignores_non_hourly_and_zero_prices():
    doc = product(T1, "us-east-1", "0.0000000000")
    assert aws_pricing.parse_product(doc) is None
    doc = product(T1, "us-east-1", "55.04")
    assert aws_pricing.parse_product(doc) == (T1, "us-east-1", 55.04)
    assert aws_pricing.parse_product({"product": {}}) is None


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], env=env, cwd=REPO,
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_cli_refresh_writes_the_overlay_that_catalog_and_plan_use(server, tmp_path):
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "d"), XDG_CACHE_HOME=str(tmp_path / "c"))
    done = cli(
        "catalog", "refresh", "--cloud", "aws", "--region", "us-east-1", "--type", T1, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "98.32 -> 55.04" not in done.stdout  # the shipped price is already the post-cut one
    overlay = (tmp_path / "d" / "orch" / "prices" / "aws.toml").read_text()
    assert 'cloud = "aws"' in overlay and "on_demand = 55.04, spot = 14.246" in overlay
    assert "AWS Price List API GetProducts" in overlay
    shown = cli(
        "catalog", "instances", "--cloud", "aws", "--region", "us-east-1", "--spot", env=env
    )
    assert any(line.split()[1] == T1 and "14.246" in line for line in shown.stdout.splitlines()[1:])


def test_cli_refresh_without_credentials_is_one_line(server, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_SECRET")}
    env.pop("AWS_ACCESS_KEY_ID", None)
    env.update(XDG_DATA_HOME=str(tmp_path / "d"), AWS_EC2_METADATA_DISABLED="true")
    done = cli("catalog", "refresh", "--cloud", "aws", "--type", T1, env=env)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("orch: error: AWS price API")
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "d" / "orch").exists()
