"""`orch plan --cloud any` ranks what this machine can launch first (issue 10, item 6).

Credentials and default regions are read offline from the standard variables and files; with
none anywhere every candidate is ranked by cost alone (the offline demo)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.clouds.aliyun.setup import local_setup as aliyun_setup
from orchestrator.clouds.aws.setup import local_setup as aws_setup

CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_REGION",
    "AWS_DEFAULT_REGION", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "ALIBABA_CLOUD_ACCESS_KEY_ID",
    "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_REGION_ID",
    "ALIBABA_CLOUD_CREDENTIALS_FILE",
)  # fmt: skip


@pytest.fixture(autouse=True)
def bare_machine(tmp_path, monkeypatch) -> Path:
    """No cloud configured: an empty HOME and none of the credential variables."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    for name in CREDENTIAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return home


def run_plan(capsys, *args: str) -> str:
    code = 0
    try:
        main(["plan", "--model", "bert-large", *args])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert code in (0, None), err
    return out


def plan_json(capsys, *args: str) -> dict:
    return json.loads(run_plan(capsys, "--json", *args))


def plan_text(capsys, *args: str) -> str:
    return run_plan(capsys, *args)


def costs(plan: dict) -> list[float]:
    return [c["cost"] for c in [plan["choice"], *plan["alternatives"]]]


def test_with_nothing_configured_every_cloud_is_ranked_by_cost_alone(capsys):
    plan = plan_json(capsys)
    assert costs(plan) == sorted(costs(plan))
    assert [c["cloud"] for c in plan["clouds"]] == ["aws", "aliyun"]
    assert not any(c["credentials"] for c in plan["clouds"])
    assert "no credentials found for any: all ranked by cost alone" in plan_text(capsys)


def test_configured_region_of_a_usable_cloud_ranks_first(capsys, monkeypatch):
    cheapest = plan_json(capsys)["choice"]
    assert cheapest["region"] != "eu-west-1"  # else this test would prove nothing
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    plan = plan_json(capsys)
    assert (plan["choice"]["cloud"], plan["choice"]["region"]) == ("aws", "eu-west-1")
    assert plan["choice"]["cost"] > cheapest["cost"]
    aws = next(c for c in plan["clouds"] if c["cloud"] == "aws")
    assert aws == {
        "cloud": "aws", "credentials": True, "credentials_from": "AWS_ACCESS_KEY_ID",
        "region": "eu-west-1", "region_from": "AWS_REGION",
    }  # fmt: skip
    text = plan_text(capsys)
    assert "aws (credentials: AWS_ACCESS_KEY_ID; eu-west-1 from AWS_REGION ranked first)" in text
    assert "aliyun (no credentials found: ranked after)" in text
    # Within its tier the order is still cost.
    same_tier = [c["cost"] for c in plan["alternatives"] if c["region"] == "eu-west-1"]
    assert same_tier == sorted(same_tier)


def test_explicit_region_overrides_the_configured_one(capsys, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    plan = plan_json(capsys, "--region", "us-west-2")
    assert plan["choice"]["region"] == "us-west-2"
    assert "ranked first" not in plan_text(capsys, "--region", "us-west-2")


def test_a_cloud_without_credentials_ranks_after_one_with(capsys, monkeypatch):
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "LTAIexample")
    plan = plan_json(capsys, "--allow-unverified-prices")
    assert plan["choice"]["cloud"] == "aliyun"
    clouds = [c["cloud"] for c in [plan["choice"], *plan["alternatives"]]]
    first_aws = clouds.index("aws") if "aws" in clouds else len(clouds)
    assert all(c == "aliyun" for c in clouds[:first_aws])
    assert "aliyun" not in clouds[first_aws:]


def test_aws_profile_region_comes_from_the_shared_config(bare_machine, monkeypatch):
    config = bare_machine / ".aws" / "config"
    config.parent.mkdir()
    config.write_text("[default]\nregion = us-east-1\n[profile ml]\nregion = ap-northeast-1\n")
    assert aws_setup().region == "us-east-1"
    assert aws_setup().basis == str(config)  # a config file can name credentials (SSO)
    monkeypatch.setenv("AWS_PROFILE", "ml")
    setup = aws_setup()
    assert (setup.usable, setup.basis, setup.region) == (True, "AWS_PROFILE", "ap-northeast-1")
    config.write_text("not [ini")  # unreadable: no region, not a crash
    assert aws_setup().region is None


def test_aliyun_region_from_the_cli_profile(bare_machine, monkeypatch):
    cli = bare_machine / ".aliyun" / "config.json"
    cli.parent.mkdir()
    cli.write_text(json.dumps({
        "current": "work",
        "profiles": [{"name": "default", "region_id": "cn-beijing"},
                     {"name": "work", "region_id": "cn-hangzhou"}],
    }))  # fmt: skip
    setup = aliyun_setup()
    assert (setup.usable, setup.region) == (True, "cn-hangzhou")
    monkeypatch.setenv("ALIBABA_CLOUD_REGION_ID", "cn-shanghai")
    assert aliyun_setup().region_basis == "ALIBABA_CLOUD_REGION_ID"
    cli.write_text("{broken")
    monkeypatch.delenv("ALIBABA_CLOUD_REGION_ID")
    assert aliyun_setup().region is None


def test_the_table_names_the_same_winner_as_the_json(capsys, monkeypatch):
    # Aliyun's shipped prices are unverified: under --cloud any they never win, even for the
    # cloud with credentials, so the table's first row and winner line must not name one.
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "LTAIexample")
    choice = plan_json(capsys)["choice"]
    assert choice["cloud"] == "aws"
    text = plan_text(capsys)
    assert f"Winner: {choice['instance_type']} ({choice['cloud']} {choice['region']}," in text
    first_row = next(line for line in text.splitlines() if line.startswith("1 "))
    assert choice["instance_type"] in first_row.split()
