"""Quota before launch (issue 24 item 6): the arithmetic of the cluster check once the vCPUs
already in use under a quota are known (provision/quota.py), with quotas given directly; the
clouds' readings are tested against their emulators (test_cluster_quota.py, the AWS stand-ins;
test_aliyun_deployment_sets.py, the ECS emulator)."""

from __future__ import annotations

import pytest

from orchestrator.clouds.aws import quotas as aws_quotas
from orchestrator.clouds.aws.errors import AwsError
from orchestrator.clouds.values import VcpuQuota
from orchestrator.errors import OrchError
from orchestrator.provision import quota as check
from tests.support import candidate

P = ("Running On-Demand P instances", "L-417A185B")


def p_quota(limit: float | None, in_use: float | None, problem: str = "") -> VcpuQuota:
    return VcpuQuota(*P, limit, "GetServiceQuota", in_use=in_use, in_use_problem=problem)


def cluster(nodes: int):  # noqa: ANN201 - a Candidate
    return candidate("p4d.24xlarge", region="us-east-1", nodes=nodes)  # 96 vCPUs a node


@pytest.fixture
def quota_is(monkeypatch):  # noqa: ANN201 - a setter
    """quota_is(VcpuQuota): what the cloud's `vcpu_quota` answers for every candidate."""
    answer: list[VcpuQuota] = []
    monkeypatch.setattr(check, "vcpu_quota_of", lambda *_: answer[-1])
    return answer.append


def test_free_is_the_limit_minus_what_is_in_use():
    assert p_quota(96.0, 48.0).free() == 48.0
    assert p_quota(96.0, None).free() == 96.0  # unknown use: the limit alone
    assert p_quota(None, 48.0).free() is None


def test_the_line_names_the_use_and_asks_for_use_plus_need():
    short = check.Shortfall(cluster(2), 64, p_quota(96.0, 48.0))
    assert short.request == 112
    assert short.line() == (
        "2 x p4d.24xlarge on-demand in us-east-1 needs 64 vCPUs; Running On-Demand P instances"
        " (L-417A185B) is 96 with 48 in use: request 112 or more"
    )
    unknown = check.Shortfall(cluster(2), 64, p_quota(32.0, None))
    assert unknown.line().endswith("(L-417A185B) is 32: request 64 or more")


@pytest.mark.parametrize(
    ("nodes", "in_use", "refused"),
    [
        (2, 0.0, False),  # 192 of 384 free
        (4, 0.0, False),  # exactly the limit
        (4, 96.0, True),  # fits the bare limit, not what is left of it
        (3, 96.0, False),  # exactly what is left
        (1, 384.0, False),  # one box is not checked here
    ],
)
def test_a_cluster_must_fit_what_is_left(quota_is, nodes, in_use, refused):
    quota_is(p_quota(384.0, in_use))
    found = check.shortfall(cluster(nodes), lambda _: None)
    assert (found is not None) == refused
    if found is not None:
        assert (found.needed, found.request) == (nodes * 96, in_use + nodes * 96)


def test_unknown_use_falls_back_to_the_limit_and_is_said_once(quota_is):
    quota_is(p_quota(192.0, None, "AWS DescribeInstances failed: UnauthorizedOperation: no"))
    said: list[str] = []
    with pytest.raises(OrchError) as refused:
        check.within_quota([cluster(8), cluster(4)], said.append)
    assert said == [
        "cannot read the vCPUs in use under Running On-Demand P instances (L-417A185B) in"
        " us-east-1: AWS DescribeInstances failed: UnauthorizedOperation: no; checking against"
        " its limit alone"
    ]
    line = refused.value.one_line()
    assert "is 192: request 768 or more" in line and "is 192: request 384 or more" in line
    assert "in use" not in line


def test_known_use_is_not_said(quota_is):
    quota_is(p_quota(384.0, 96.0))
    said: list[str] = []
    assert check.within_quota([cluster(3)], said.append) == [cluster(3)]
    assert said == []


# ------------------------------------------------------------------ AWS: one listed instance


def instance(**changes: object) -> dict[str, object]:
    values: dict[str, object] = {
        "InstanceId": "i-0123456789abcdef0",
        "InstanceType": "p4d.24xlarge",
        "State": {"Code": 16, "Name": "running"},
    }
    values.update(changes)
    return values


def test_cpu_options_give_the_vcpus_when_ec2_names_them():
    custom = instance(CpuOptions={"CoreCount": 24, "ThreadsPerCore": 1})
    assert aws_quotas._running_of(custom) == aws_quotas.Running("p4d.24xlarge", False, 24)
    spot = instance(InstanceLifecycle="spot", CpuOptions={"CoreCount": 48, "ThreadsPerCore": 2})
    assert aws_quotas._running_of(spot) == aws_quotas.Running("p4d.24xlarge", True, 96)


@pytest.mark.parametrize(
    "options",
    [None, {}, {"CoreCount": 0, "ThreadsPerCore": 2}, {"CoreCount": "48", "ThreadsPerCore": 2},
     {"CoreCount": True, "ThreadsPerCore": 2}, "48x2"],
)  # fmt: skip
def test_cpu_options_that_are_missing_or_not_numbers_leave_the_vcpus_to_the_type(options):
    listed = aws_quotas._running_of(instance(CpuOptions=options))
    assert listed is not None and listed.vcpus is None


def test_instances_not_pending_or_running_do_not_count():
    stopped = instance(State={"Code": 80, "Name": "stopped"})
    assert aws_quotas._running_of(stopped) is None
    assert aws_quotas._running_of(instance(State="running")) is None


@pytest.mark.parametrize("bad", [instance(InstanceType=""), instance(InstanceType=None), []])
def test_an_instance_without_a_type_is_an_error(bad):
    with pytest.raises(AwsError, match="DescribeInstances"):
        aws_quotas._running_of(bad)
