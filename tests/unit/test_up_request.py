"""One launch request, checked once (issue 19): `build_request` refuses what `orch up` refuses,
`to_dict`/`from_dict` carry a request through a pool record (checked again on the way in,
old records included), and a CI registration never reaches the dict."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from orchestrator.errors import OrchError, UsageError
from orchestrator.plan import Plan
from orchestrator.pool import manager, members
from orchestrator.provision.request import SCHEMA, UpRequest, build_request
from tests.support import candidate

CIDR = "203.0.113.7/32"


def plan(*rows: Any) -> Plan:
    rows = rows or (candidate("g4dn.xlarge", "spot"), candidate("g5.xlarge"))
    return Plan(job={"model": "bert-large"}, estimate={}, choice=rows[0],
                alternatives=list(rows[1:]), created_at="2026-12-02T19:00:00Z")  # fmt: skip


def request(**changes: Any) -> UpRequest:
    values: dict[str, Any] = dict(name="exp1", ttl="2h", ssh_cidrs=[CIDR], tags=["team=ml"])
    values.update(changes)
    return build_request(plan(), **values)


def test_the_request_holds_parsed_values():
    before = datetime.now(UTC)
    made = request(state_url="s3://bucket/orch/", spot_bid=0.5, nodes=4)
    assert made.lifetime == timedelta(hours=2)
    assert made.expires_at is not None
    assert before + timedelta(hours=2) - timedelta(seconds=1) <= made.expires_at
    assert made.state is not None and made.state.bucket == "bucket"
    assert made.state_url == "s3://bucket/orch" and made.tags == {"team": "ml"}
    assert made.spot_max_price == 0.5 and made.nodes == 4
    assert request(ttl="none").expires_at is None and request(ttl="none").lifetime is None


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"name": "Bad_Name"}, "box name"),
        ({"ttl": ""}, "--ttl"),
        ({"spot_bid": -1.0}, "--spot-bid"),
        ({"ssh_cidrs": ["0.0.0.0/0"]}, "whole internet"),
        ({"tags": ["orch:box=x"]}, "reserved"),
        ({"state_url": "gs://bucket"}, "--state"),
        ({"nodes": 0}, "--nodes"),
        ({"nodes": 65}, "--nodes"),
        ({"nodes": True}, "--nodes"),
    ],
)
def test_every_check_runs_in_build_request(changes, words):
    with pytest.raises(UsageError, match=words):
        request(**changes)


def test_the_plan_loader_runs_after_the_other_checks():
    read: list[bool] = []

    def loader() -> Plan:
        read.append(True)
        return plan()

    with pytest.raises(UsageError, match="--ttl"):
        build_request(loader, name="exp1", ttl="5 minutes")
    assert read == []
    assert build_request(loader, name="exp1", ttl="1h").plan.choice.instance_type == "g4dn.xlarge"


def test_to_dict_round_trips_and_is_checked_on_the_way_in():
    made = request(state_url="s3://bucket/orch", spot_bid=0.5, nodes=2)
    data = made.to_dict()
    assert data["schema"] == SCHEMA and "expires_at" not in data
    back = UpRequest.from_dict(data)
    assert back.to_dict() == data
    assert back.plan.to_dict() == made.plan.to_dict()
    with pytest.raises(UsageError, match="whole internet"):
        UpRequest.from_dict({**data, "ssh_cidrs": ["0.0.0.0/0"]})
    with pytest.raises(UsageError, match="schema"):
        UpRequest.from_dict({**data, "schema": "orch.up/v0"})
    with pytest.raises(UsageError):
        UpRequest.from_dict({**data, "stores": "s3://x"})


def test_a_registration_adds_its_section_but_never_reaches_the_dict():
    class Section:
        record = {"kind": "github", "label": "orch-exp1"}

        def user_data(self, ssh_user: str) -> str:
            return f"secret-for-{ssh_user}"

    made = replace(request(), ci_runner=Section())
    assert "secret" not in repr(made.to_dict())


def test_for_box_renames_and_counts_the_expiry_from_now():
    made = request(ttl="1h")
    later = datetime(2030, 1, 1, tzinfo=UTC)
    again = made.for_box("exp2", now=later)
    assert again.name == "exp2" and again.expires_at == later + timedelta(hours=1)
    with pytest.raises(UsageError, match="box name"):
        made.for_box("NO")


def test_a_pool_record_from_before_the_request_was_kept_whole_still_launches(tmp_path):
    from orchestrator.pool.store import LocalStore

    data = {
        "plan": plan().to_dict(),
        "ttl": "8h",
        "store": "local",
        "up": {"ssh_cidrs": [CIDR], "allow_world_ssh": False, "spot_bid": None, "state_url": None},
    }
    pool = manager.Pool("gpu", store=LocalStore(tmp_path), say=print)
    old = members.up_request(pool, data, "gpu-a1b2c3")
    assert old.name == "gpu-a1b2c3" and old.ttl == "8h" and old.ssh_cidrs == [CIDR]
    assert old.tags == {} and old.own_tags == {"orch:pool": "gpu", "orch:pool-store": "local"}
    new = members.up_request(pool, {**data, "up": old.to_dict()}, "gpu-d4e5f6")
    assert new.name == "gpu-d4e5f6" and new.own_tags == old.own_tags and new.tags == {}
    damaged = {**data, "up": {**data["up"], "ssh_cidrs": "everyone"}}
    with pytest.raises(UsageError, match="ssh_cidrs"):
        members.up_request(pool, damaged, "gpu-a1b2c3")


def test_a_pool_box_is_tagged_for_the_store_its_record_was_read_from(tmp_path):
    """The record's own `store` field is the store writer's word: a record copied from another
    prefix (or forged) named another store, its new boxes were tagged for it, and the pool then
    found each not its own and left it running while reconcile started another."""
    from orchestrator.pool.store import LocalStore

    data = {"plan": plan().to_dict(), "ttl": "8h", "store": "s3://elsewhere/pools",
            "up": {"ssh_cidrs": [CIDR], "allow_world_ssh": False, "state_url": None}}  # fmt: skip
    pool = manager.Pool("gpu", store=LocalStore(tmp_path), say=print)
    made = members.up_request(pool, data, "gpu-a1b2c3")
    assert made.own_tags == {"orch:pool": "gpu", "orch:pool-store": "local"}


def test_the_run_session_records_what_up_launched(tmp_path, monkeypatch):
    """A failover alternative came up: the attempt names it, its zone and price (not the
    plan's choice); when `up` fails, the attempt names what the box record says it tried."""
    import io

    from orchestrator.provision import launch
    from orchestrator.provision.boxes import Box
    from orchestrator.run.session import Run, RunRequest
    from orchestrator.run.spec import RunSpec

    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    made = request()
    alternative = made.plan.alternatives[0]
    box = Box(name="exp1", directory=tmp_path, cloud="aws", region=alternative.region,
              candidate=alternative, state="up", created_at="2026-12-05T08:00:00Z",
              expires_at=None, outputs={}, owner="me", state_url=None)  # fmt: skip
    launched = launch.Launched(box, alternative, "us-east-1c", 1.006)
    monkeypatch.setattr(launch, "up", lambda *_a, **_k: launched)
    spec = RunSpec(command=["true"], workdir=tmp_path)
    run = Run(RunRequest(spec=spec, box_name="exp1", up_options=made), print, None, io.BytesIO())
    assert run._launch(made) is box
    (attempt,) = run.report.attempts
    assert (attempt.instance_type, attempt.market) == ("g5.xlarge", "on-demand")
    assert attempt.zone == "us-east-1c" and attempt.price_per_hour == 1.006

    def refused(*_args: Any, **_kwargs: Any) -> None:
        raise UsageError("no")

    monkeypatch.setattr(launch, "up", refused)
    with pytest.raises(UsageError):
        run._launch(made)
    assert run.report.attempts[-1].instance_type == made.plan.choice.instance_type


def test_failover_lines_name_a_cluster_as_n_times_its_type():
    from orchestrator.provision.failover import describe
    from tests import support

    one = support.candidate("g5.xlarge", "spot", region="us-east-1")
    assert describe(one, "us-east-1a") == "g5.xlarge spot in us-east-1a"
    cluster = support.candidate("p4d.24xlarge", region="us-east-1", nodes=2)
    assert describe(cluster) == "2 × p4d.24xlarge on-demand in us-east-1"


class _NoZones:
    """A cloud that cannot say which zone offers a type (zones_with_stock -> None)."""

    def zones_with_stock(self, region, instance_type, spot):
        return None

    def error_kind(self, code):
        from orchestrator.clouds import ErrorKind

        return ErrorKind.CAPACITY

    def failover_codes(self):
        return ()


def _attempts(launched, said, failed):
    from orchestrator.provision.failover import Attempts

    return Attempts(
        name="c1",
        prepare=lambda c: c,
        launch=lambda c, zone: launched.append((c.instance_type, c.nodes, zone)),
        clear=lambda: None,
        fail=failed.append,
        attempts=[],
        say=said.append,
    )


def test_a_zone_less_cluster_fails_over_to_the_next_candidate(monkeypatch):
    from orchestrator import clouds
    from orchestrator.provision import failover
    from tests import support

    monkeypatch.setattr(clouds, "get", lambda name: _NoZones())
    cluster = support.candidate("p4d.24xlarge", region="us-east-1", nodes=2)
    box = support.candidate("g5.xlarge", region="us-east-1")
    launched, said, failed = [], [], []
    how = _attempts(launched, said, failed)
    chosen, zone = failover.launch_first([cluster, box], (), how)
    assert (chosen.instance_type, zone) == ("g5.xlarge", None)  # one box: the module picks
    assert launched == [("g5.xlarge", 1, None)]  # the cluster was never rendered zone-less
    assert said == [f"2 × p4d.24xlarge on-demand in us-east-1: {failover.NO_ZONE}; "
                    "trying the next candidate"]  # fmt: skip
    assert how.attempts[0]["error"] == failover.NO_ZONE and not failed

    launched, said, failed = [], [], []
    with pytest.raises(OrchError, match="no capacity for any plan candidate"):
        failover.launch_first([cluster], (), _attempts(launched, said, failed))
    assert launched == [] and failed
