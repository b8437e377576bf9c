"""orchestrator.clouds.aws.state: DescribeInstances answers -> InstanceState (no network).

The same code against a real moto server over HTTP: tests/e2e/test_aws_instance_state.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.clouds.aws import state
from orchestrator.clouds.aws.errors import AwsError
from orchestrator.clouds.base import NoCredentials
from orchestrator.clouds.values import InstanceState


def item(name: str, code: str = "", lifecycle: str | None = "spot") -> dict[str, Any]:
    """An `Instances[]` entry as boto3 returns it (StateReason only after a change)."""
    entry: dict[str, Any] = {"InstanceId": "i-0123456789abcdef0", "State": {"Name": name}}
    if code:
        entry["StateReason"] = {"Code": code, "Message": f"{code}: ..."}
    if lifecycle:
        entry["InstanceLifecycle"] = lifecycle
    return entry


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (item("pending", lifecycle=None), InstanceState("pending")),
        (item("running"), InstanceState("running")),
        (
            item("shutting-down", "Server.SpotInstanceTermination"),
            InstanceState("terminated", "Server.SpotInstanceTermination", True),
        ),
        (
            item("terminated", "Server.SpotInstanceTermination"),
            InstanceState("terminated", "Server.SpotInstanceTermination", True),
        ),
        (
            item("stopped", "Server.SpotInstanceShutdown"),
            InstanceState("stopped", "Server.SpotInstanceShutdown", True),
        ),
        (
            item("stopping", "Server.SpotInstanceShutdown"),
            InstanceState("stopping", "Server.SpotInstanceShutdown", True),
        ),
        # The user (or orch) terminated a spot box: gone, but not reclaimed.
        (
            item("terminated", "Client.UserInitiatedShutdown"),
            InstanceState("terminated", "Client.UserInitiatedShutdown", False),
        ),
        (
            item("stopped", "Client.InstanceInitiatedShutdown", lifecycle=None),
            InstanceState("stopped", "Client.InstanceInitiatedShutdown", False),
        ),
        (
            item("stopped", "Server.ScheduledStop", lifecycle=None),
            InstanceState("stopped", "Server.ScheduledStop", False),
        ),
    ],
)
def test_ec2_states_and_reasons_map(entry, expected):
    assert state.state_of(entry) == expected


def test_lost_follows_the_mapped_state():
    assert not state.state_of(item("running")).lost
    assert state.state_of(item("shutting-down", "Server.SpotInstanceTermination")).lost


def test_an_unknown_state_name_is_an_error_not_a_guess():
    with pytest.raises(AwsError, match="unknown instance state 'rebooting'"):
        state.state_of(item("rebooting"))


class FakeEc2:
    """describe_instances answering a fixed response, or raising a botocore error."""

    def __init__(self, response: dict[str, Any] | None = None, error: Exception | None = None):
        self.response, self.error = response, error
        self.calls: list[dict[str, Any]] = []

    def describe_instances(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if self.error is not None:
            raise self.error
        assert self.response is not None
        return self.response


def client_error(code: str) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": "..."}}, "DescribeInstances")


@pytest.fixture
def fake(monkeypatch):
    def install(fake_ec2: FakeEc2) -> FakeEc2:
        monkeypatch.setattr(state, "client", lambda service, region: fake_ec2)
        return fake_ec2

    return install


def test_instance_state_asks_for_the_one_instance(fake):
    ec2 = fake(FakeEc2({"Reservations": [{"Instances": [item("running")]}]}))
    assert state.instance_state("us-east-1", "i-0123456789abcdef0") == InstanceState("running")
    assert ec2.calls == [{"InstanceIds": ["i-0123456789abcdef0"]}]


def test_not_found_and_an_empty_answer_are_missing(fake):
    fake(FakeEc2(error=client_error("InvalidInstanceID.NotFound")))
    assert state.instance_state("us-east-1", "i-0123456789abcdef0") == InstanceState("missing")
    fake(FakeEc2({"Reservations": []}))
    assert state.instance_state("us-east-1", "i-0123456789abcdef0") == InstanceState("missing")


def test_other_api_errors_raise_the_cloud_s_errors(fake):
    from botocore.exceptions import NoCredentialsError

    fake(FakeEc2(error=client_error("UnauthorizedOperation")))
    with pytest.raises(AwsError) as caught:
        state.instance_state("us-east-1", "i-0123456789abcdef0")
    assert caught.value.code == "UnauthorizedOperation"
    fake(FakeEc2(error=NoCredentialsError()))
    with pytest.raises(NoCredentials):
        state.instance_state("us-east-1", "i-0123456789abcdef0")
