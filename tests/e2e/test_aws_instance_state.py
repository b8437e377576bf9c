"""AwsCloud.instance_state against the shared moto server, over HTTP through boto3: the
request and the XML answer (StateReason, NotFound errors) are moto's, not ours."""

from __future__ import annotations

import os

import pytest

from orchestrator import clouds
from orchestrator.clouds.registry import instance_state_of
from orchestrator.clouds.values import InstanceState

pytestmark = pytest.mark.e2e

REGION = "us-east-1"
MOTO_AMI = "ami-1e749f67"  # one of moto's default images (tests/e2e/conftest.py MOTO_AMI)


@pytest.fixture
def moto_env(moto_server, monkeypatch, tmp_path):
    for key in list(os.environ):
        if key.startswith("AWS_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    return moto_server


def test_a_spot_instance_seen_running_then_terminated_then_unknown(moto_env):
    import boto3

    ec2 = boto3.client("ec2", region_name=REGION)
    [launched] = ec2.run_instances(
        ImageId=MOTO_AMI,
        MinCount=1,
        MaxCount=1,
        InstanceType="g5.xlarge",
        InstanceMarketOptions={"MarketType": "spot"},
    )["Instances"]
    instance_id = launched["InstanceId"]
    aws = clouds.get("aws")

    assert instance_state_of(aws, REGION, instance_id) == InstanceState("running")

    ec2.terminate_instances(InstanceIds=[instance_id])
    gone = instance_state_of(aws, REGION, instance_id)
    # moto records a user-initiated shutdown; the spot service played no part.
    assert gone == InstanceState("terminated", "Client.UserInitiatedShutdown", False)
    assert gone.lost

    unknown = instance_state_of(aws, REGION, "i-0123456789abcdef0")
    assert unknown == InstanceState("missing")
