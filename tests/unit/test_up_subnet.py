"""`--subnet-id` with a plan whose candidates span clouds and regions (provision/subnet.py).

A subnet is in one cloud and one region, but every candidate was checked with it: an Aliyun
alternative refused the whole `up` even when the choice was AWS, and an AWS alternative in
another region was launched with the subnet, where Terraform's `data "aws_subnet"` finds no
such subnet, a failure that is not capacity and so ended `up` ("failed") instead of trying the
next candidate. Now `up`/`run` keep the candidates in the subnet's cloud and region: a plan
made now plans in the one cloud that takes the id and needs --region when its candidates span
regions; a plan file keeps its choice's cloud and region (one note line), and a choice whose
cloud refuses the id is exit 2. All before any cloud or Terraform call (tripwires).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.plan import Candidate
from orchestrator.provision import launch
from orchestrator.run import session
from tests.support import (
    Tripwire,
    candidate,
    cli_refused,
    forbid_cloud_reach,
    plan_file,
    run_cli,
    with_cloud_credentials,
)

CIDR = "203.0.113.7/32"
SUBNET = "subnet-0123456789abcdef0"
UP = ("up", "--name", "x", "--yes", "--no-check", "--ssh-cidr", CIDR, "--subnet-id", SUBNET)
ALIYUN_REFUSAL = "--subnet-id is not supported for Aliyun boxes yet"
NEEDS_REGION = "a subnet id (--subnet-id, box.subnet_id) needs a region"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ORCH_LOCK_TIMEOUT", raising=False)
    with_cloud_credentials(monkeypatch)
    forbid_cloud_reach(monkeypatch)
    return tmp_path / "home"


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[list[Candidate]]:
    """The candidates `up` (or a run's box) would try, in order; launching stops there."""
    seen: list[list[Candidate]] = []

    def fake_up(request: Any, *_args: Any, **_kwargs: Any) -> None:
        seen.append(request.plan.candidates())
        raise Tripwire("reached the launch")

    def fake_run(request: Any, *_args: Any, **_kwargs: Any) -> None:
        fake_up(request.up_options)

    monkeypatch.setattr(launch, "up", fake_up)
    monkeypatch.setattr(session, "Run", fake_run)
    return seen


def where(candidates: list[Candidate]) -> list[tuple[str, str, str]]:
    return [(c.cloud, c.region, c.market) for c in candidates]


def no_box(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "list", "--json")
    assert code == 0 and json.loads(out) == []


# --- a plan file ------------------------------------------------------------------------


def test_an_aliyun_alternative_no_longer_refuses_an_aws_choice(home, tmp_path, capsys, launched):
    """(a) The choice is AWS; an Aliyun alternative (which cannot take the id) is dropped with
    one note line instead of refusing the whole launch."""
    plan = plan_file(
        tmp_path,
        candidate("g5.xlarge", region="us-east-1"),
        candidate("ecs.gn7i-c8g1.2xlarge", region="cn-hangzhou"),
        candidate("g5.2xlarge", region="us-east-1"),
    )
    with pytest.raises(Tripwire):
        run_cli(capsys, *UP, "--plan", plan)
    assert where(launched[0]) == [("aws", "us-east-1", "on-demand")] * 2
    notes = [line for line in capsys.readouterr().err.splitlines() if "--subnet-id" in line]
    assert notes == [
        "orch: --subnet-id: a subnet is in one region, so only the plan's candidates in aws"
        " us-east-1 (its choice's) are tried; 1 alternative elsewhere dropped"
    ]


def test_a_plan_file_fails_over_only_in_its_choice_s_region(home, tmp_path, capsys, launched):
    """(b) An alternative in another region would be launched with the subnet, and Terraform
    would not find it there: only the choice's region is kept."""
    plan = plan_file(
        tmp_path,
        candidate("g5.xlarge", region="us-east-1"),
        candidate("g5.xlarge", region="us-west-2"),
        candidate("g5.xlarge", "spot", region="us-east-1"),
        candidate("g5.xlarge", region="eu-west-1"),
    )
    with pytest.raises(Tripwire):
        run_cli(capsys, *UP, "--plan", plan)
    assert where(launched[0]) == [("aws", "us-east-1", "on-demand"), ("aws", "us-east-1", "spot")]
    assert "2 alternatives elsewhere dropped" in capsys.readouterr().err


def test_a_plan_file_in_one_region_is_launched_as_it_is(home, tmp_path, capsys, launched):
    plan = plan_file(
        tmp_path,
        candidate("g5.xlarge", region="us-west-2"),
        candidate("g5.2xlarge", region="us-west-2"),
    )
    with pytest.raises(Tripwire):
        run_cli(capsys, *UP, "--plan", plan)
    assert where(launched[0]) == [("aws", "us-west-2", "on-demand")] * 2
    assert "dropped" not in capsys.readouterr().err


def test_a_choice_whose_cloud_refuses_the_id_is_exit_2(home, tmp_path, capsys, launched):
    plan = plan_file(
        tmp_path,
        candidate("ecs.gn7i-c8g1.2xlarge", region="cn-hangzhou"),
        candidate("g5.xlarge", region="us-east-1"),
    )
    line = cli_refused(capsys, *UP, "--plan", plan, words=(ALIYUN_REFUSAL,))
    assert "Traceback" not in line and launched == []
    no_box(capsys)


# --- a plan made now ----------------------------------------------------------------------

MODEL = ("--model", "bert-large", "--allow-unverified-prices")  # Aliyun rows rank among AWS's


def test_a_plan_made_now_needs_a_region_when_its_candidates_span_several(home, capsys, launched):
    """(a) and (b) on a plan made now: with --cloud any its alternatives held an Aliyun row
    (the whole `up` refused for Aliyun) and AWS rows in several regions."""
    line = cli_refused(capsys, *UP, *MODEL, words=(NEEDS_REGION, "us-east-1", "us-west-2"))
    assert ALIYUN_REFUSAL not in line and launched == []
    cli_refused(capsys, *UP, *MODEL, "--cloud", "aws", words=(NEEDS_REGION,))
    argv = ("run", "--yes", "--ssh-cidr", CIDR, "--subnet-id", SUBNET, *MODEL, "--", "true")
    cli_refused(capsys, *argv, words=(NEEDS_REGION,))
    assert launched == []
    no_box(capsys)


def test_a_plan_made_now_plans_in_the_subnet_s_cloud_and_region(home, capsys, launched):
    with pytest.raises(Tripwire):
        run_cli(capsys, *UP, *MODEL, "--region", "us-east-1")
    (home.parent / "orch.yaml").write_text("resources:\n  region: us-west-2\n")
    with pytest.raises(Tripwire):
        run_cli(
            capsys, "run", "--yes", "--subnet-id", SUBNET, "--ssh-cidr", CIDR, *MODEL, "--", "t"
        )
    assert [{(c.cloud, c.region) for c in found} for found in launched] == [
        {("aws", "us-east-1")},
        {("aws", "us-west-2")},
    ]
    assert all(len(found) > 1 for found in launched)


def test_a_named_cloud_that_refuses_the_id_is_refused_before_planning(home, capsys, launched):
    cli_refused(capsys, *UP, *MODEL, "--cloud", "aliyun", words=(ALIYUN_REFUSAL,))
    cli_refused(capsys, *UP[:-1], "nope", *MODEL, words=("'nope' is not a subnet id",))
    assert launched == []
    no_box(capsys)


# --- failover in a subnet ---------------------------------------------------------------


def test_in_a_subnet_a_capacity_error_moves_to_the_next_candidate_not_zone(home, monkeypatch):
    """The subnet fixes the zone (aws_gpu ignores zone_id with subnet_id): trying the stock's
    other zones launched the same subnet again, a whole apply and destroy each."""
    from orchestrator.provision import failover
    from orchestrator.provision.request import build_request
    from orchestrator.provision.terraform import TerraformError

    zones = ["us-east-1a", "us-east-1b", "us-east-1c"]
    monkeypatch.setattr(failover, "zones_with_stock_of", lambda *_args: zones)
    monkeypatch.setattr(launch, "_with_current_image", lambda c, say: c)
    cleared: list[str] = []
    monkeypatch.setattr(launch, "destroy_or_fail", lambda box, *_: cleared.append(box.name))
    tried: list[tuple[str, str | None]] = []

    def attempt(box: Any, request: Any, location: Any, *_: Any) -> None:
        tried.append((request.candidate.instance_type, request.zone))
        box.candidate = request.candidate
        if request.candidate.instance_type == "g5.xlarge":
            raise TerraformError("apply failed", [{"summary": "InsufficientInstanceCapacity: no"}])
        box.outputs = {"instance_id": "i-0abc", "availability_zone": "us-east-1c"}
        box.state = "up"

    monkeypatch.setattr(launch, "_attempt", attempt)
    first = candidate("g5.xlarge", region="us-east-1")
    second = candidate("g5.2xlarge", region="us-east-1")
    for subnet, expected in [
        (SUBNET, [("g5.xlarge", None), ("g5.2xlarge", None)]),
        (None, [*(("g5.xlarge", z) for z in zones), ("g5.2xlarge", "us-east-1a")]),
    ]:
        tried.clear()
        request = build_request(
            _plan(first, second), name=f"s{len(cleared)}", ttl="1h", ssh_cidrs=[CIDR],
            subnet_id=subnet,
        )  # fmt: skip
        done = launch.up(request, lambda _line: None)
        assert tried == expected
        assert done.candidate == second and done.zone == ("us-east-1c" if subnet else "us-east-1a")


def _plan(*candidates: Candidate) -> Any:
    from orchestrator.plan import Plan

    return Plan(
        job={"model": "bert-large"},
        estimate={},
        choice=candidates[0],
        alternatives=list(candidates[1:]),
        created_at="2026-12-02T19:00:00Z",
    )


def test_a_cluster_in_a_subnet_is_not_skipped_as_zone_less(monkeypatch):
    """Stock unknown: a cluster outside a subnet has no one zone (next candidate); in a subnet
    the subnet is its zone (aws_gpu: node_count > 1 needs zone_id or subnet_id)."""
    from orchestrator.provision import failover

    monkeypatch.setattr(failover, "zones_with_stock_of", lambda *_args: None)
    cluster = candidate("p4d.24xlarge", region="us-east-1", nodes=2)
    box = candidate("g5.xlarge", region="us-east-1")
    for in_subnet, expected in [(True, "p4d.24xlarge"), (False, "g5.xlarge")]:
        launched: list[str] = []
        how = failover.Attempts(
            name="c1",
            prepare=lambda c: c,
            launch=lambda c, _zone, seen=launched: seen.append(c.instance_type),
            clear=lambda: None,
            fail=lambda _message: None,
            attempts=[],
            say=lambda _line: None,
            in_subnet=in_subnet,
        )
        chosen, zone = failover.launch_first([cluster, box], (), how)
        assert (chosen.instance_type, zone, launched) == (expected, None, [expected])
