"""AWS cleanup after `down` (orchestrator/clouds/aws/cleanup.py) against moto's EC2: what the
tag listing finds is deleted, including parts whose state moved on since the listing."""

from __future__ import annotations

import boto3
import pytest

from orchestrator.clouds.aws.cleanup import delete_tagged
from orchestrator.clouds.aws.tags import list_tagged_cluster_parts
from tests.e2e.conftest import CapacityProxy

REGION = "us-east-1"
AMI = "ami-1e749f67"  # one of the images moto serves in every region


@pytest.fixture
def ec2(moto: str, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - a boto3 client
    """moto's EC2 behind the tests' proxy (its placement-group stand-in: the listing asks)."""
    with CapacityProxy(moto) as proxy:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", proxy.url)
        yield boto3.client("ec2", region_name=REGION, endpoint_url=proxy.url)


def tagged(box: str, kind: str) -> list[dict]:
    return [{"ResourceType": kind, "Tags": [{"Key": "orch:box", "Value": box}]}]


def test_an_elastic_ip_whose_association_ended_since_the_listing_is_released(ec2):
    # Rank 0's address (cluster.tf) as `orch down` lists it: still associated. Terminating the
    # instance ends the association (its interface is deleted with it), so by the time the
    # address is released the listed association id is stale: DisassociateAddress answers
    # InvalidAssociationID.NotFound, which must not stop the release.
    instance = ec2.run_instances(ImageId=AMI, InstanceType="t3.micro", MinCount=1, MaxCount=1)
    eni = instance["Instances"][0]["NetworkInterfaces"][0]["NetworkInterfaceId"]
    address = ec2.allocate_address(Domain="vpc", TagSpecifications=tagged("c1", "elastic-ip"))
    association = ec2.associate_address(
        AllocationId=address["AllocationId"], NetworkInterfaceId=eni
    )["AssociationId"]
    listed = [r for r in list_tagged_cluster_parts(REGION, "c1") if r.kind == "elastic_ip"]
    assert [(r.id, r.state) for r in listed] == [(address["AllocationId"], association)]
    ec2.disassociate_address(AssociationId=association)  # what the instance's end does

    delete_tagged(REGION, listed)

    assert list_tagged_cluster_parts(REGION, "c1") == []
    assert ec2.describe_addresses()["Addresses"] == []
