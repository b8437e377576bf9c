"""Quota before launch (issue 24 item 6): `provision.quota.within_quota` against the Service
Quotas stand-in (tests/sim/aws_quotas.py, the real response shapes) and moto's EC2 (the
instances already running under a quota), through the real AWS cloud's `vcpu_quota` (botocore
over HTTP)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from orchestrator.clouds.aws import quotas
from orchestrator.errors import OrchError
from orchestrator.provision.quota import within_quota
from tests.sim.aws_quotas import QuotaServer
from tests.support import candidate

MOTO_AMI = "ami-1e749f67"  # one of the images moto serves in every region


@pytest.fixture
def quota_server(monkeypatch, moto):  # noqa: ANN201 - a QuotaServer
    # 192 vCPUs of on-demand P (two p4d.24xlarge), the G quota at its default 0.
    with QuotaServer(applied={"L-417A185B": 192.0}) as server:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.setenv("AWS_ENDPOINT_URL_SERVICE_QUOTAS", server.endpoint)
        monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", moto)
        monkeypatch.setattr(quotas, "_defaults", {})  # the per-process caches
        monkeypatch.setattr(quotas, "_applied", {})
        monkeypatch.setattr(quotas, "_running", {})
        monkeypatch.setattr(quotas, "_type_vcpus", {})
        yield server


def launch(moto: str, instance_type: str, count: int = 1, spot: bool = False) -> list[str]:
    """Start `count` instances in moto's us-east-1 (spot ones with InstanceLifecycle spot)."""
    import boto3

    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto)
    extra: dict[str, Any] = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
    started = ec2.run_instances(
        ImageId=MOTO_AMI, InstanceType=instance_type, MinCount=count, MaxCount=count, **extra
    )
    return [i["InstanceId"] for i in started["Instances"]]


def terminate(moto: str, ids: list[str]) -> None:
    import boto3

    boto3.client("ec2", region_name="us-east-1", endpoint_url=moto).terminate_instances(
        InstanceIds=ids
    )


def cluster(instance_type: str, nodes: int, market: str = "on-demand"):  # noqa: ANN201
    return candidate(instance_type, market, region="us-east-1", nodes=nodes)


def test_a_cluster_beyond_the_quota_is_refused_with_the_number_to_request(quota_server):
    said: list[str] = []
    with pytest.raises(OrchError) as refused:
        within_quota([cluster("p4d.24xlarge", 4)], said.append)
    line = refused.value.one_line()
    assert "4 x p4d.24xlarge on-demand in us-east-1 needs 384 vCPUs" in line
    assert (
        "Running On-Demand P instances (L-417A185B) is 192 with 0 in use: request 384 or more"
        in line
    )
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
        "P instances (L-417A185B) is 192 with 0 in use: request 768 or more"
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


# ------------------------------------------------------------------ what is already running


def test_instances_running_under_the_quota_count_against_it(quota_server, moto):
    quota_server.applied["L-417A185B"] = 480.0  # 4 x p4d (384) fits the bare limit
    launch(moto, "p4d.24xlarge", 2)  # 192 vCPUs of on-demand P in use
    launch(moto, "p4d.24xlarge", spot=True)  # the spot quota's, not this one's
    launch(moto, "g5.xlarge")  # the G and VT quota's
    terminate(moto, launch(moto, "p5.48xlarge"))  # ended: counts for nothing
    with pytest.raises(OrchError) as refused:
        within_quota([cluster("p4d.24xlarge", 4)], lambda _: None)
    assert (
        "4 x p4d.24xlarge on-demand in us-east-1 needs 384 vCPUs; Running On-Demand P instances"
        " (L-417A185B) is 480 with 192 in use: request 576 or more"
    ) in refused.value.one_line()
    rows = [cluster("p4d.24xlarge", 3)]  # 288: exactly what is left
    assert within_quota(rows, lambda _: None) == rows


def test_a_spot_quota_counts_the_spot_instances_of_its_generations(quota_server, moto):
    quota_server.applied["L-7212CCBC"] = 288.0  # All P4, P3 and P2 Spot Instance Requests
    launch(moto, "p4d.24xlarge", spot=True)  # 96 vCPUs under it
    launch(moto, "p5.48xlarge", spot=True)  # All P5 Spot Instance Requests'
    launch(moto, "p4d.24xlarge")  # on-demand
    quota = quotas.vcpu_quota("us-east-1", "p4d.24xlarge", spot=True)
    assert quota is not None and (quota.code, quota.limit, quota.in_use) == (
        "L-7212CCBC",
        288.0,
        96.0,
    )
    p5 = quotas.vcpu_quota("us-east-1", "p5.48xlarge", spot=True)
    assert p5 is not None and (p5.code, p5.in_use) == ("L-C4BD4855", 192.0)
    on_demand = quotas.vcpu_quota("us-east-1", "p4d.24xlarge", spot=False)
    assert on_demand is not None and on_demand.in_use == 96.0
    with pytest.raises(OrchError, match="is 288 with 96 in use: request 384 or more"):
        within_quota([cluster("p4d.24xlarge", 3, "spot")], lambda _: None)


# EC2's answer to a caller without ec2:DescribeInstances: 403, the Query API's error document
# (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html).
UNAUTHORIZED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
    b"<Code>UnauthorizedOperation</Code><Message>You are not authorized to perform this"
    b" operation.</Message></Error></Errors><RequestID>1-2-3</RequestID></Response>"
)


class Refusing(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(403)
        self.send_header("Content-Type", "text/xml;charset=UTF-8")
        self.send_header("Content-Length", str(len(UNAUTHORIZED)))
        self.end_headers()
        self.wfile.write(UNAUTHORIZED)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def refusing_ec2():  # noqa: ANN201 - its URL
    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_usage_that_cannot_be_read_falls_back_to_the_limit(quota_server, monkeypatch, refusing_ec2):
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", refusing_ec2)
    quota = quotas.vcpu_quota("us-east-1", "p4d.24xlarge", spot=False)
    assert quota is not None and (quota.limit, quota.in_use) == (192.0, None)
    assert quota.in_use_problem.startswith("AWS DescribeInstances failed: UnauthorizedOperation"), (
        quota.in_use_problem
    )
    said: list[str] = []
    rows = [cluster("p4d.24xlarge", 2)]
    assert within_quota(rows, said.append) == rows
    assert len(said) == 1 and said[0].startswith(
        "cannot read the vCPUs in use under Running On-Demand P instances (L-417A185B)"
    )
