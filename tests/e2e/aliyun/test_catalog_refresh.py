"""`orch catalog refresh --cloud aliyun` against the ECS emulator, through the real SDK.

Refresh fetches DescribePrice figures into the user's price overlay; `orch plan` then ranks the
gn7i (A10) types, which ship with a NOT RE-VERIFIED list price, by the fetched figures.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.e2e.aliyun.conftest import ACCESS_KEY, REGION, REPO

pytestmark = pytest.mark.e2e

A10_TYPE = "ecs.gn7i-c8g1.2xlarge"
T4_TYPE = "ecs.gn6i-c4g1.xlarge"


def refresh_env(tmp_path: Path, endpoint: str | None) -> dict[str, str]:
    """Standard variables only; a private XDG_DATA_HOME (the overlay) and HOME (no profiles)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ALIBABA_CLOUD_", "ALICLOUD_", "ALIBABACLOUD_", "ORCH_", "XDG_"))
    }
    env.update(
        HOME=str(tmp_path / "home"),
        XDG_DATA_HOME=str(tmp_path / "data"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        ALIBABA_CLOUD_ECS_METADATA_DISABLED="true",
    )
    if endpoint is not None:
        env.update(
            ALIBABA_CLOUD_ACCESS_KEY_ID=ACCESS_KEY,
            ALIBABA_CLOUD_ACCESS_KEY_SECRET="orch-test-secret",
            ALIBABA_CLOUD_ENDPOINT_ECS=endpoint,
        )
    return env


def orch(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def overlay_file(env: dict[str, str]) -> Path:
    return Path(env["XDG_DATA_HOME"]) / "orch" / "prices" / "aliyun.toml"


def plan(env: dict[str, str], *extra: str) -> list[dict]:
    result = orch(env, "plan", "--cloud", "aliyun", "--model", "bert-large", "--json", *extra)
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    return [body["choice"], *body["alternatives"]]


def test_refresh_writes_the_overlay_and_plan_ranks_gn7i(aliyun, tmp_path):
    backend = aliyun.backend
    backend.set_price(REGION, A10_TYPE, on_demand=0.31, spot=0.093)
    backend.set_price(REGION, T4_TYPE, on_demand=1.25, spot=0.375)
    env = refresh_env(tmp_path, aliyun.endpoint)
    today = dt.datetime.now(dt.UTC).date().isoformat()

    # The shipped Aliyun prices are NOT RE-VERIFIED: they plan only when allowed.
    before = plan(env, "--allow-unverified-prices")
    assert before and not any(c["price_verified"] for c in before)

    dry = orch(env, "catalog", "refresh", "--cloud", "aliyun", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    # every region the catalog prices: cn-hangzhou, and cn-beijing for gn7 (A100 40 GB)
    assert report["regions"] == sorted({REGION, "cn-beijing"}) and report["dry_run"]
    assert not report["written"]
    assert not overlay_file(env).exists()
    rows = {(r["instance_type"], r["region"]): r for r in report["prices"]}
    assert rows[(A10_TYPE, REGION)]["status"] == "changed"
    assert rows[(A10_TYPE, REGION)]["old"] == {"on_demand": 1.324, "spot": None}
    assert rows[(A10_TYPE, REGION)]["new"] == {"on_demand": 0.31, "spot": 0.093}
    assert rows[(T4_TYPE, REGION)]["status"] == "changed"
    assert rows[(T4_TYPE, REGION)]["old"] == {"on_demand": 1.615, "spot": None}

    table = orch(env, "catalog", "refresh", "--cloud", "aliyun")
    assert table.returncode == 0, table.stderr
    (line,) = [row for row in table.stdout.splitlines() if row.split()[:2] == [A10_TYPE, REGION]]
    assert line.split()[1:] == [REGION, "1.324", "->", "0.31", "-", "->", "0.093"]
    assert "1.615 -> 1.25" in table.stdout and f"wrote {overlay_file(env)}" in table.stdout

    written = tomllib.loads(overlay_file(env).read_text())
    assert written["cloud"] == "aliyun"
    assert written["prices"][A10_TYPE][REGION] == {
        "on_demand": 0.31,
        "spot": 0.093,
        "date": today,
        "source": f"Alibaba Cloud DescribePrice API (region {REGION})",
    }
    assert "DescribePrice" in backend.request_log

    after = {(c["instance_type"], c["region"]): c for c in plan(env)}
    assert after[(A10_TYPE, REGION)]["price_per_hour"] == 0.31
    cheapest = min(after.values(), key=lambda c: c["cost"])
    first = plan(env)[0]
    assert (first["instance_type"], first["region"]) == (cheapest["instance_type"], REGION)
    assert first["instance_type"] == A10_TYPE

    listing = orch(env, "catalog", "instances", "--cloud", "aliyun", "--json")
    (a10,) = [r for r in json.loads(listing.stdout) if r["name"] == A10_TYPE]
    assert a10["price_per_hour"] == 0.31 and a10["price_source"]["date"] == today
    assert "DescribePrice API (region cn-hangzhou)" in a10["price_source"]["note"]

    # A region the API does not price (the emulator serves no government-cloud region):
    # reported, and every figure already there is kept.
    kept = orch(
        env, "catalog", "refresh", "--cloud", "aliyun", "--region", "cn-north-2-gov-1",
        "--type", A10_TYPE, "--json",
    )  # fmt: skip
    assert kept.returncode == 0, kept.stderr
    assert [r["status"] for r in json.loads(kept.stdout)["prices"]] == ["unavailable"]
    assert tomllib.loads(overlay_file(env).read_text()) == written


def test_refresh_without_a_reachable_api_is_one_error_line(aliyun, tmp_path):
    env = refresh_env(tmp_path, "http://127.0.0.1:9")  # discard port: connection refused
    result = orch(env, "catalog", "refresh", "--cloud", "aliyun", "--type", A10_TYPE)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith("orch: error: Alibaba Cloud DescribePrice")
    assert "Traceback" not in result.stderr and not overlay_file(env).exists()

    env = refresh_env(tmp_path, None)  # no keys, no profile file, no metadata service
    result = orch(env, "catalog", "refresh", "--cloud", "aliyun", "--type", A10_TYPE)
    assert result.returncode == 1
    assert "orch: error: no Alibaba Cloud credentials found" in result.stderr
    assert "Traceback" not in result.stderr and not overlay_file(env).exists()
