"""Issue 23 items 3 and 5: what orch says and does when a cloud has no credentials.

`orch` runs as a subprocess with an environment and HOME that hold no credentials of any
cloud (the Alibaba credentials package reads the environment once, at import, so an
in-process run would see an earlier test's values), and with the instance metadata lookups
of both SDKs turned off: a test machine has no instance role.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ORCH = [sys.executable, "-m", "orchestrator"]


@pytest.fixture
def bare_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ALIBABA_CLOUD_"))}
    env.update(
        HOME=str(home),
        ORCH_HOME=str(tmp_path / "orch"),
        AWS_EC2_METADATA_DISABLED="true",
        ALIBABA_CLOUD_ECS_METADATA_DISABLED="true",
    )
    env.pop("ORCH_CLOUD_PLUGINS", None)
    return env


def orch(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ORCH, *argv], env=env, capture_output=True, text=True, timeout=300)


def test_sweep_without_credentials_skips_each_cloud_and_exits_1(bare_env) -> None:
    result = orch(bare_env, "sweep", "--region", "us-east-1")
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    lines = result.stdout.splitlines()
    # Each skip line says what the SDK chain found (the problem) and what to set (the hint).
    assert lines[0].startswith("aws: skipped: no credentials (no AWS credentials found; ")
    assert lines[0].endswith("set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
    assert lines[1].startswith("aliyun: skipped: no credentials (no Alibaba Cloud credentials")
    assert lines[1].endswith(
        "set ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET)"
    ), result.stdout
    first, *rest = result.stderr.strip().splitlines()
    assert not rest and first.startswith(
        "orch: error: nothing was swept: no credentials for aws, aliyun ("
    )


def test_sweep_of_one_named_cloud_without_credentials_says_so_too(bare_env) -> None:
    result = orch(bare_env, "sweep", "--cloud", "aliyun", "--region", "cn-hangzhou", "--json")
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr

    report = json.loads(result.stdout)
    assert list(report["skipped"]) == ["aliyun"] and report["boxes"] == []


# ----------------------------------------------------------------------- down --forget


def _saved_box(env: dict[str, str], name: str, cloud: str, region: str) -> Path:
    """A box record in env's ORCH_HOME, as a failed `orch up` leaves it."""
    code = (
        "import os, sys; sys.path.insert(0, os.getcwd())\n"
        "from tests.unit.test_boxes import make_box\n"
        "from orchestrator.provision.boxes import box_directory\n"
        f"box = make_box({name!r}, cloud={cloud!r}, region={region!r}, state='failed',"
        f" directory=box_directory({name!r}))\n"
        "box.directory.mkdir(parents=True, mode=0o700); box.save()\n"
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    return Path(env["ORCH_HOME"]) / "boxes" / name


@pytest.fixture
def faux_env(bare_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    from tests.fixtures.clouds import faux

    (tmp_path / "faux-cloud" / "faux-east-1").mkdir(parents=True)
    return {
        **bare_env,
        "ORCH_CLOUD_PLUGINS": faux.PLUGIN,
        faux.CLOUD_DIR_ENV: str(tmp_path / "faux-cloud"),
    }


def test_forget_removes_a_record_the_cloud_has_nothing_of(faux_env) -> None:
    record = _saved_box(faux_env, "stuck", "faux", "faux-east-1")
    result = orch(faux_env, "down", "stuck", "--forget", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"name": "stuck", "state": "forgotten", "cloud": "faux"}
    assert not record.exists()
    again = orch(faux_env, "down", "stuck", "--forget")
    assert again.returncode == 2 and "no box named 'stuck'" in again.stderr


def test_forget_keeps_a_record_whose_box_the_cloud_still_lists(faux_env) -> None:
    from tests.fixtures.clouds import faux

    record = _saved_box(faux_env, "live", "faux", "faux-east-1")
    leftover = Path(faux_env[faux.CLOUD_DIR_ENV]) / "faux-east-1" / "i-faux1.json"
    leftover.write_text(
        json.dumps({"kind": "instance", "id": "i-faux1", "tags": {"orch:box": "live"}})
    )
    result = orch(faux_env, "down", "live", "--forget")
    assert result.returncode == 1 and record.exists()
    assert result.stderr.strip().splitlines() == [
        "orch: error: box live: faux faux-east-1 still lists instance i-faux1; not forgotten"
        " (`orch down live` destroys it)"
    ]


def test_forget_without_credentials_needs_force_and_then_names_what_may_remain(bare_env) -> None:
    record = _saved_box(bare_env, "orphan", "aws", "us-east-1")
    refused = orch(bare_env, "down", "orphan", "--forget")
    assert refused.returncode == 1 and record.exists()
    assert "cannot ask aws whether box orphan left anything" in refused.stderr
    assert "--force" in refused.stderr and "Traceback" not in refused.stderr
    forced = orch(bare_env, "down", "orphan", "--forget", "--force")
    assert forced.returncode == 0, forced.stderr
    assert not record.exists()
    [warning] = forced.stderr.strip().splitlines()
    assert warning.startswith("orch: warning: forgetting box orphan without asking aws")
    assert "may remain: i-0abc in aws us-east-1" in warning
    # --force alone would skip the destroy: it is refused.
    alone = orch(bare_env, "down", "orphan", "--force")
    assert alone.returncode == 2 and "--force goes with --forget" in alone.stderr


def test_down_without_credentials_points_at_forget(bare_env) -> None:
    record = _saved_box(bare_env, "failed1", "aws", "us-east-1")
    (record / "main.tf").write_text("terraform {}\n")  # Terraform ran: down asks the cloud
    result = orch(bare_env, "down", "failed1")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()[-1:]
    assert "no AWS credentials found" in line and "orch down failed1 --forget --force" in line


# --------------------------------------------------------------------------- orch doctor


def test_doctor_offline_says_per_cloud_what_is_missing(bare_env) -> None:
    result = orch(bare_env, "doctor")
    assert result.returncode == 1, result  # no cloud has credentials
    lines = result.stdout.splitlines()
    assert lines[0] == "tools:"
    assert any(ln.split()[:2] == ["terraform", "ok"] for ln in lines)
    assert any(ln.split()[:1] == ["rsync"] for ln in lines)
    aws = lines.index("aws (AWS):")
    assert lines[aws + 1].split()[:2] == ["credentials", "FAIL"]
    assert "no AWS credentials found" in lines[aws + 1]
    assert "aliyun (Aliyun):" in lines
    configured = {**bare_env, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
                  "AWS_REGION": "eu-west-1"}  # fmt: skip
    data = json.loads(orch(configured, "doctor", "--json").stdout)
    [aws_report] = [c for c in data["clouds"] if c["cloud"] == "aws"]
    checks = {c["name"]: c for c in aws_report["checks"]}
    assert checks["credentials"] == {"name": "credentials", "ok": True, "detail": "found (env)"}
    assert checks["region"]["detail"] == "eu-west-1 (from AWS_REGION)" and data["ok"] is True


def test_doctor_usage_errors(bare_env) -> None:
    result = orch(bare_env, "doctor", "--region", "us-east-1")
    assert result.returncode == 2 and "add --online" in result.stderr


@pytest.fixture
def quota_env(bare_env, moto):
    from tests.sim.aws_quotas import QuotaServer

    with QuotaServer(applied={"L-DB2E81BA": 8.0}, page_size=3) as server:
        yield (
            server,
            {
                **bare_env,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_ENDPOINT_URL_SERVICE_QUOTAS": server.endpoint,
                "AWS_ENDPOINT_URL_EC2": moto,  # the instances in use under each quota
            },
        )


def test_doctor_online_reads_the_quotas_by_name_for_a_region(quota_env) -> None:
    server, env = quota_env
    result = orch(env, "doctor", "--online", "--region", "us-east-1")
    assert result.returncode == 0, result
    quotas = [ln for ln in result.stdout.splitlines() if ln.split()[:1] == ["quota"]]
    g = next(ln for ln in quotas if "G and VT" in ln)
    assert (
        "Running On-Demand G and VT instances (L-DB2E81BA) in us-east-1: 8 vCPUs with 0 in use" in g
    )
    assert "[GetServiceQuota]" in g and g.split()[1] == "ok"
    p = next(ln for ln in quotas if "On-Demand P instances" in ln)
    assert "0 vCPUs with 0 in use [ListAWSDefaultServiceQuotas (default)]" in p
    assert p.split()[1] == "FAIL"
    listed = [r for r in server.requests if r["operation"] == "ListAWSDefaultServiceQuotas"]
    assert len(listed) == 3  # every page of 7 quotas, 3 at a time, read once
    reads = [r["body"]["QuotaCode"] for r in server.requests if r["operation"] == "GetServiceQuota"]
    assert sorted(reads) == sorted(set(reads))  # one read per quota, not per instance type


def test_doctor_online_compares_a_plan_with_its_quota(quota_env, tmp_path) -> None:
    from tests.support import candidate, plan_file

    _, env = quota_env
    fits = plan_file(tmp_path, candidate("g5.xlarge", region="us-east-1"))
    ok = orch(env, "doctor", "--online", "--plan", fits)
    assert ok.returncode == 0, ok
    assert "g5.xlarge on-demand in us-east-1 needs 4 vCPUs; Running On-Demand G and VT" in ok.stdout
    assert ": enough" in ok.stdout
    short = plan_file(tmp_path, candidate("p4d.24xlarge", "spot", region="us-east-1"))
    low = orch(env, "doctor", "--online", "--plan", short)
    assert low.returncode == 1, low
    line = next(ln for ln in low.stdout.splitlines() if "p4d.24xlarge" in ln)
    assert "All P4, P3 and P2 Spot Instance Requests (L-7212CCBC) is 0" in line
    assert "too low: request 96 or more" in line


def test_doctor_online_counts_the_instances_in_use_under_a_quota(quota_env, moto, tmp_path):
    import boto3

    from tests.support import candidate, plan_file

    _, env = quota_env
    ec2 = boto3.client(
        "ec2", region_name="us-east-1", endpoint_url=moto, aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )  # fmt: skip
    ec2.run_instances(ImageId="ami-1e749f67", InstanceType="g5.xlarge", MinCount=1, MaxCount=1)
    plan = plan_file(tmp_path, candidate("g5.xlarge", region="us-east-1"))
    fits = orch(env, "doctor", "--online", "--plan", plan)  # 8 - 4 in use: one more fits
    assert fits.returncode == 0, fits
    assert "is 8 with 4 in use [GetServiceQuota]: enough" in fits.stdout
    ec2.run_instances(ImageId="ami-1e749f67", InstanceType="g5.xlarge", MinCount=1, MaxCount=1)
    full = orch(env, "doctor", "--online", "--plan", plan)
    assert full.returncode == 1, full
    assert "is 8 with 8 in use [GetServiceQuota]: too low: request 12 or more" in full.stdout
    summary = orch(env, "doctor", "--online", "--region", "us-east-1")
    g = next(ln for ln in summary.stdout.splitlines() if "G and VT instances" in ln)
    assert "8 vCPUs with 8 in use" in g and g.split()[1] == "FAIL"
