"""Quota before launch (issue 24 item 6): `provision.quota.within_quota` against the Service
Quotas stand-in (tests/sim/aws_quotas.py, the real response shapes), through the real AWS
cloud's `vcpu_quota` (botocore over HTTP)."""

from __future__ import annotations

import pytest

from orchestrator.clouds.aws import quotas
from orchestrator.errors import OrchError
from orchestrator.provision.quota import within_quota
from tests.sim.aws_quotas import QuotaServer
from tests.support import candidate


@pytest.fixture
def quota_server(monkeypatch):  # noqa: ANN201 - a QuotaServer
    # 192 vCPUs of on-demand P (two p4d.24xlarge), the G quota at its default 0.
    with QuotaServer(applied={"L-417A185B": 192.0}) as server:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.setenv("AWS_ENDPOINT_URL_SERVICE_QUOTAS", server.endpoint)
        monkeypatch.setattr(quotas, "_defaults", {})  # the per-process caches
        monkeypatch.setattr(quotas, "_applied", {})
        yield server


def cluster(instance_type: str, nodes: int, market: str = "on-demand"):  # noqa: ANN201
    return candidate(instance_type, market, region="us-east-1", nodes=nodes)


def test_a_cluster_beyond_the_quota_is_refused_with_the_number_to_request(quota_server):
    said: list[str] = []
    with pytest.raises(OrchError) as refused:
        within_quota([cluster("p4d.24xlarge", 4)], said.append)
    line = refused.value.one_line()
    assert "4 x p4d.24xlarge on-demand in us-east-1 needs 384 vCPUs" in line
    assert "Running On-Demand P instances (L-417A185B) is 192: request 384 or more" in line
    assert "nothing was created" in line and refused.value.exit_code == 1


def test_a_cluster_the_quota_holds_exactly_goes_on(quota_server):
    rows = [cluster("p4d.24xlarge", 2)]
    assert within_quota(rows, lambda _: None) == rows
    assert [r["operation"] for r in quota_server.requests][-1] == "GetServiceQuota"


def test_a_short_candidate_is_skipped_for_the_next_that_fits(quota_server):
    said: list[str] = []
    short, fits = cluster("p4d.24xlarge", 8), cluster("p4d.24xlarge", 1)
    assert within_quota([short, fits], said.append) == [fits]
    assert said == [
        "skipping 8 x p4d.24xlarge on-demand in us-east-1 needs 768 vCPUs; Running On-Demand "
        "P instances (L-417A185B) is 192: request 768 or more"
    ]


def test_spot_clusters_are_judged_by_the_spot_quota(quota_server):
    # "All P4, P3 and P2 Spot Instance Requests" was never raised: its default, 0.
    with pytest.raises(OrchError, match=r"All P4, P3 and P2 Spot Instance Requests \(L-7212CCBC\)"):
        within_quota([cluster("p4d.24xlarge", 2, "spot")], lambda _: None)


def test_one_box_is_not_asked_about(quota_server):
    rows = [cluster("p4d.24xlarge", 1), cluster("g5.xlarge", 1)]
    assert within_quota(rows, lambda _: None) == rows
    assert quota_server.requests == []


def test_an_unreadable_quota_is_said_and_the_launch_goes_on(quota_server, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_SERVICE_QUOTAS", "http://127.0.0.1:9")  # refused
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    said: list[str] = []
    rows = [cluster("p4d.24xlarge", 4)]
    assert within_quota(rows, said.append) == rows
    assert len(said) == 1 and said[0].startswith("cannot read the vCPU quota for p4d.24xlarge")
