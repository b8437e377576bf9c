"""The sweeper's grouping and expiry rules, and its error line for unusable credentials.

No emulator: these were in tests/e2e/test_sweep.py, which drives moto_server.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

from orchestrator.sweep import Resource, group_resources, parse_expiry

REGION = "ca-central-1"
PAST = "2021-06-01T00:00:00Z"


def orch(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_unknown_aws_profile_is_one_error_line(tmp_path):
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ORCH_"))}
    environment.update(
        AWS_PROFILE="orch-no-such-profile",
        AWS_CONFIG_FILE=str(tmp_path / "no-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"),
        ORCH_HOME=str(tmp_path / "orch-home"),
    )
    result = orch(environment, "sweep", "--cloud", "aws", "--region", REGION)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("orch: error:") and "Traceback" not in result.stderr
    assert "orch-no-such-profile" in result.stderr


def test_tag_that_is_no_local_box_name_leaves_local_state_alone(tmp_path, monkeypatch):
    from orchestrator.sweep import BoxGroup, _mark_local

    monkeypatch.setenv("ORCH_HOME", str(tmp_path))
    group = BoxGroup("aws", REGION, "Not/A Box", [], PAST, expired=True, action="destroyed")
    _mark_local(group)
    assert group.local_record is None and not (tmp_path / "boxes").exists()


def resource(kind: str, rid: str, box: str, expires: str) -> Resource:
    return Resource(kind, rid, rid, {"orch:box": box, "orch:expires-at": expires})


def test_grouping_uses_the_latest_expiry_and_ignores_untagged():
    now = datetime(2030, 1, 1, tzinfo=UTC)
    soon = (now + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    groups = group_resources(
        "aws",
        "r",
        [
            resource("key_pair", "k", "a", "2029-01-01T00:00:00Z"),
            resource("instance", "i", "a", soon),  # one member says later: keep the box
            resource("instance", "j", "b", "2029-12-31T23:59:59Z"),
            resource("instance", "x", "c", "not a date"),
            Resource("instance", "y", "y", {}),
        ],
        now,
    )
    assert [(g.box, g.expired) for g in groups] == [("a", False), ("b", True), ("c", False)]
    assert [r.kind for r in groups[0].resources] == ["instance", "key_pair"]


def test_parse_expiry_forms():
    assert parse_expiry("2030-01-01T00:00:00Z") == datetime(2030, 1, 1, tzinfo=UTC)
    assert parse_expiry("2030-01-01T02:00:00+02:00") == datetime(2030, 1, 1, tzinfo=UTC)
    assert parse_expiry("") is None and parse_expiry("soon") is None
