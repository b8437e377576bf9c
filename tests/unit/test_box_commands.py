"""The box commands' options: `up`'s check and spot bid, the deprecated spellings, and
`orch status NAME` (one box) against `orch list` (every box). No cloud, no Terraform:
`launch.up` is replaced by one that records what it was asked and returns a box record.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.provision import launch
from orchestrator.provision.boxes import Box, box_directory
from orchestrator.provision.request import UpRequest
from tests.support import candidate, plan_file, require, run_cli, with_cloud_credentials

CIDR = "203.0.113.7/32"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ORCH_SSH_CONFIG", raising=False)
    with_cloud_credentials(monkeypatch)
    return tmp_path / "home"


def saved_box(name: str, **changes: Any) -> Box:
    directory = box_directory(name)
    directory.mkdir(parents=True, mode=0o700)
    values: dict[str, Any] = dict(
        name=name,
        directory=directory,
        cloud="aws",
        region="us-east-1",
        candidate=candidate("g4dn.xlarge", "spot", price_per_hour=0.158),
        state="up",
        created_at="2026-12-02T19:00:00Z",
        expires_at="2099-01-01T00:00:00Z",
        outputs={"instance_id": "i-0abc", "public_ip": "127.0.0.1", "ssh_user": "ubuntu"},
        owner="me@host",
        state_url=None,
    )
    values.update(changes)
    box = Box(**values)
    box.save()
    return box


@pytest.fixture
def fake_up(home: Path, monkeypatch: pytest.MonkeyPatch) -> list[UpRequest]:
    """`launch.up` that saves a box record instead of calling Terraform."""
    calls: list[UpRequest] = []

    def up(options: UpRequest, say: Any, progress: Any = None) -> launch.Launched:
        calls.append(options)
        box = saved_box(options.name, candidate=options.plan.choice)
        return launch.Launched(box, box.candidate, "", box.candidate.price_per_hour)

    monkeypatch.setattr(launch, "up", up)
    return calls


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Record how `up` runs its check (the check itself is tested over a real sshd)."""
    from orchestrator.check import verify

    calls: list[dict[str, Any]] = []

    def check_box(box: Box, ssh_config: str | None = None, timeout: float = 600, *, via="ssh"):
        calls.append({"box": box.name, "ssh_config": ssh_config, "timeout": timeout, "via": via})
        return verify.CheckReport(box=box.name, transport=via, expected=verify.Expected())

    monkeypatch.setattr(verify, "check_box", check_box)
    return calls


def up_args(tmp_path: Path, *extra: str) -> list[str]:
    plan = plan_file(tmp_path, candidate("g4dn.xlarge", "spot"))
    return ["up", "--plan", plan, "--name", "exp1", "--ssh-cidr", CIDR, *extra]


# ------------------------------------------------------------------------ up's own check


def test_up_checks_with_the_same_options_as_orch_check(capsys, tmp_path, fake_up, checks) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  ConnectTimeout 2\n")
    code, _, err = run_cli(
        capsys,
        *up_args(tmp_path, "--via", "ssm", "--check-timeout", "42", "--ssh-config", str(config)),
    )
    assert code == 0, err
    assert checks == [{"box": "exp1", "ssh_config": str(config), "timeout": 42.0, "via": "ssm"}]
    assert "up to 42 s" in err


def test_up_check_defaults_match_orch_check(capsys, tmp_path, fake_up, checks) -> None:
    code, _, err = run_cli(capsys, *up_args(tmp_path))
    assert code == 0, err
    # One default for the same idea everywhere (check, up, run, pool): 15m.
    assert checks == [{"box": "exp1", "ssh_config": None, "timeout": 900.0, "via": "ssh"}]


def test_up_reads_orch_ssh_config_like_check(capsys, tmp_path, fake_up, checks, monkeypatch):
    config = tmp_path / "env_config"
    config.write_text("Host *\n  ConnectTimeout 2\n")
    monkeypatch.setenv("ORCH_SSH_CONFIG", str(config))
    code, _, err = run_cli(capsys, *up_args(tmp_path))
    assert code == 0, err
    assert checks[0]["ssh_config"] == str(config)


def test_missing_ssh_config_is_refused_before_anything_is_created(
    capsys, tmp_path, fake_up, checks
) -> None:
    code, _, err = run_cli(capsys, *up_args(tmp_path, "--ssh-config", str(tmp_path / "nope")))
    assert code == 2
    assert err.strip().splitlines() == [
        f"orch: error: ssh config {tmp_path / 'nope'} does not exist"
    ]
    assert fake_up == [] and checks == []


def test_up_check_timeout_bounds_a_box_that_never_answers(capsys, tmp_path, fake_up) -> None:
    """The real check, over ssh to a closed port: it gives up after --check-timeout."""
    require(shutil.which("ssh"), "OpenSSH client (ssh)")
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  Port 1\n  ConnectTimeout 1\n")
    start = time.monotonic()
    code, _, err = run_cli(
        capsys, *up_args(tmp_path, "--check-timeout", "2", "--ssh-config", str(config))
    )
    assert code == 1, err
    assert err.strip().splitlines()[-1].startswith("orch: error:")
    assert time.monotonic() - start < 60  # not the default 600 s


def test_check_via_still_works_and_warns(capsys, tmp_path, fake_up, checks) -> None:
    code, _, err = run_cli(capsys, *up_args(tmp_path, "--check-via", "cloud-assistant"))
    assert code == 0, err
    assert checks[0]["via"] == "cloud-assistant"
    assert "orch: warning: --check-via is deprecated; use --via" in err


def test_check_via_and_a_different_via_conflict(capsys, tmp_path, fake_up, checks) -> None:
    code, _, err = run_cli(capsys, *up_args(tmp_path, "--check-via", "ssm", "--via", "ssh"))
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "orch: error: give --via or the deprecated --check-via, not both"
    )
    assert fake_up == []


# ------------------------------------------------------------------------------ spot bid


def test_spot_bid_is_the_bid(capsys, tmp_path, fake_up, checks) -> None:
    code, _, err = run_cli(capsys, *up_args(tmp_path, "--spot-bid", "0.25", "--no-check"))
    assert code == 0, err
    assert fake_up[0].spot_max_price == 0.25
    assert "warning" not in err


def test_max_price_on_up_is_the_old_name_of_the_bid(capsys, tmp_path, fake_up) -> None:
    code, _, err = run_cli(capsys, *up_args(tmp_path, "--max-price", "0.3", "--no-check"))
    assert code == 0, err
    assert fake_up[0].spot_max_price == 0.3
    assert "orch: warning: --max-price is deprecated; use --spot-bid" in err


@pytest.mark.parametrize("bid", ["0", "-1", "nan", "inf"])
def test_a_bid_that_is_no_price_is_refused(capsys, tmp_path, fake_up, bid) -> None:
    code, _, err = run_cli(capsys, *up_args(tmp_path, f"--spot-bid={bid}"))
    assert code == 2
    assert err.strip().splitlines() == [
        f"orch: error: --spot-bid {float(bid)} is not a positive price (USD per hour)"
    ]
    assert fake_up == []


def test_two_different_bids_conflict(capsys, tmp_path, fake_up) -> None:
    code, _, err = run_cli(capsys, *up_args(tmp_path, "--spot-bid", "0.2", "--max-price", "0.3"))
    assert code == 2 and "not both" in err and fake_up == []


# ----------------------------------------------------------------------- sweep --cloud


@pytest.mark.parametrize(("given", "warned"), [("any", False), ("all", True), (None, False)])
def test_sweep_cloud_any_and_its_old_name_all(capsys, home, monkeypatch, given, warned) -> None:
    import orchestrator.sweep as sweep_module
    from orchestrator import clouds

    calls: list[list[str]] = []

    def fake_sweep(clouds, regions, *, dry_run):
        calls.append(list(clouds))
        return sweep_module.SweepReport(now="2026-12-03T00:00:00Z", dry_run=dry_run, regions={})

    monkeypatch.setattr(sweep_module, "sweep", fake_sweep)
    code, _, err = run_cli(capsys, "sweep", *(["--cloud", given] if given else []), "--dry-run")
    assert code == 0, err
    assert calls == [list(clouds.names())]
    assert ("orch: warning: --cloud all is deprecated; use --cloud any" in err) == warned


def test_sweep_rejects_an_unknown_cloud_without_naming_the_old_alias(capsys, home) -> None:
    code, _, err = run_cli(capsys, "sweep", "--cloud", "gcp")
    assert code == 2 and err.startswith("orch: error:")
    assert "'any'" in err and "'all'" not in err


# ------------------------------------------------------------------ status NAME vs list


def test_status_name_shows_one_box_in_detail(capsys, home) -> None:
    saved_box("exp1")
    saved_box("exp2", expires_at="2020-01-01T00:00:00Z")
    code, out, err = run_cli(capsys, "status", "exp1")
    assert code == 0, err
    assert out.splitlines()[0] == "box exp1"
    rows = dict(line.split(None, 1) for line in out.splitlines()[1:] if line.startswith("  "))
    assert rows["state"].strip() == "up"
    assert rows["cloud"].strip() == "aws us-east-1"
    assert "g4dn.xlarge (1xT4, spot, $0.158/h)" in out
    assert "127.0.0.1" in out and "i-0abc" in out
    assert "2026-12-02T19:00:00Z" in out  # created
    assert "2099-01-01T00:00:00Z (in " in out  # expiry and time left
    assert "exp2" not in out  # one box, not the list


def test_status_name_json_carries_the_plan_row(capsys, home) -> None:
    saved_box("exp1", expires_at="2020-01-01T00:00:00Z")
    code, out, _ = run_cli(capsys, "status", "exp1", "--json")
    assert code == 0
    detail = json.loads(out)
    assert detail["name"] == "exp1" and detail["state"] == "up"
    assert detail["instance_id"] == "i-0abc" and detail["public_ip"] == "127.0.0.1"
    assert detail["created_at"] == "2026-12-02T19:00:00Z" and detail["expired"] is True
    assert detail["candidate"]["instance_type"] == "g4dn.xlarge"
    assert detail["candidate"]["price_per_hour"] == 0.158


def test_list_is_the_table_of_every_box(capsys, home) -> None:
    saved_box("exp1")
    saved_box("exp2", expires_at="2020-01-01T00:00:00Z")
    code, out, _ = run_cli(capsys, "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["name", "state", "cloud"]
    assert any(line.startswith("exp1 ") for line in lines)
    assert any(line.startswith("exp2 ") and "(expired)" in line for line in lines)
    code, out, _ = run_cli(capsys, "list", "--json")
    assert [b["name"] for b in json.loads(out)] == ["exp1", "exp2"]


def test_status_without_a_name_still_lists_with_a_warning(capsys, home) -> None:
    saved_box("exp1")
    code, listed, _ = run_cli(capsys, "list")
    code, out, err = run_cli(capsys, "status")
    assert code == 0 and out == listed
    assert "use `orch list`" in err


def test_status_of_an_unknown_box_is_one_error_line(capsys, home) -> None:
    code, _, err = run_cli(capsys, "status", "nobox")
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "no box named" in err


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"candidate": {"price_per_hour": "0.158"}}, "price_per_hour"),  # was a ValueError
        ({"candidate": {"gpu_count": None}}, "gpu_count"),
        ({"candidate": {"gpu": ["T4"]}}, "gpu"),
        ({"candidate": {"instance_type": "g4dn.xlarge\x1b[2J"}}, "instance_type"),
        ({"attempts": ["g4dn.xlarge us-east-1"]}, "attempts"),  # was an AttributeError
        ({"expires_at": 4070908800}, "expires_at"),  # was a TypeError
        ({"state_url": ["s3://b/p"]}, "state_url"),
    ],
)
def test_status_of_a_damaged_record_is_one_line(capsys, home, edit, field) -> None:
    """A hand-edited or damaged box.json (or one rebuilt from a hostile bundle): `status` and
    `down` name the field in one line (exit 2), never a traceback or the raw text."""
    box = saved_box("exp1")
    data = json.loads(box.record_path.read_text())
    data["candidate"].update(edit.pop("candidate", {}))
    data.update(edit)
    box.record_path.write_text(json.dumps(data))
    for argv in (("status", "exp1"), ("down", "exp1")):
        code, out, err = run_cli(capsys, *argv)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, err
        assert "box.json is damaged" in lines[0] and f" {field} " in lines[0], lines[0]
        assert "\x1b" not in out + err
    assert box.record_path.exists()


def test_list_names_a_box_whose_record_it_cannot_read(capsys, home) -> None:
    """A damaged record still names a box that may be running: `list` says so on stderr, one
    line, escaped, instead of leaving it out unseen; the readable boxes are listed as before."""
    saved_box("exp1")
    damaged = saved_box("exp2")
    data = json.loads(damaged.record_path.read_text())
    data["candidate"]["instance_type"] = "g4dn.xlarge\x1b[2J"
    damaged.record_path.write_text(json.dumps(data))
    for argv in (("list",), ("list", "--json")):
        code, out, err = run_cli(capsys, *argv)
        assert code == 0, err
        (line,) = err.strip().splitlines()
        assert line.startswith("orch: warning: box exp2 is not listed: box record ")
        assert "instance_type" in line and "orch:box=exp2" in line and "\x1b" not in line
        assert "exp1" in out and "exp2" not in out
    assert [b["name"] for b in json.loads(run_cli(capsys, "list", "--json")[1])] == ["exp1"]


def test_status_and_list_escape_what_the_cloud_said(capsys, home) -> None:
    """Terraform outputs and errors are the cloud's words: shown escaped."""
    saved_box(
        "exp1",
        outputs={"instance_id": "i-0abc\x1b[2J", "public_ip": "127.0.0.1\x1b]0;x\x07"},
        error="quota\x1b[31m exceeded",
    )
    for argv in (("status", "exp1"), ("list",)):
        code, out, err = run_cli(capsys, *argv)
        assert code == 0, err
        assert "\x1b" not in out and "\x07" not in out
    assert "i-0abc\\x1b[2J" in run_cli(capsys, "status", "exp1")[1]
