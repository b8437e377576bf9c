"""The placement-group stand-in (tests/sim/ec2_placement.py) answers and refuses as EC2 does,
through boto3 against moto behind the tests' proxy."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.e2e.conftest import CapacityProxy
from tests.support import reset_moto

AMI = "ami-1e749f67"


@pytest.fixture(scope="module")
def ec2(moto_server_url: str):  # noqa: ANN201 - a boto3 client
    reset_moto(moto_server_url)  # no placement group of another file's tests
    with CapacityProxy(moto_server_url) as proxy:
        yield boto3.client(
            "ec2",
            endpoint_url=proxy.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )


def code(error: pytest.ExceptionInfo[ClientError]) -> str:
    return error.value.response["Error"]["Code"]


def test_create_describe_by_tag_and_name(ec2):
    tags = [{"ResourceType": "placement-group", "Tags": [{"Key": "orch:box", "Value": "c1"}]}]
    created = ec2.create_placement_group(GroupName="pg-c1", Strategy="cluster",
                                         TagSpecifications=tags)  # fmt: skip
    assert created["PlacementGroup"]["GroupId"].startswith("pg-")
    by_tag = ec2.describe_placement_groups(Filters=[{"Name": "tag:orch:box", "Values": ["c1"]}])
    (group,) = by_tag["PlacementGroups"]
    assert (group["GroupName"], group["Strategy"], group["State"]) == ("pg-c1", "cluster",
                                                                       "available")  # fmt: skip
    assert group["Tags"] == [{"Key": "orch:box", "Value": "c1"}]
    other = ec2.describe_placement_groups(Filters=[{"Name": "tag:orch:box", "Values": ["c2"]}])
    assert other["PlacementGroups"] == []
    with pytest.raises(ClientError) as duplicate:
        ec2.create_placement_group(GroupName="pg-c1", Strategy="cluster")
    assert code(duplicate) == "InvalidPlacementGroup.Duplicate"
    with pytest.raises(ClientError) as bad:
        ec2.create_placement_group(GroupName="pg-bad", Strategy="tight")
    assert code(bad) == "InvalidParameterValue"
    with pytest.raises(ClientError) as unknown:
        ec2.describe_placement_groups(GroupNames=["pg-none"])
    assert code(unknown) == "InvalidPlacementGroup.Unknown"


def test_a_group_in_use_cannot_be_deleted_until_its_instances_end(ec2):
    ec2.create_placement_group(GroupName="pg-used", Strategy="cluster")
    with pytest.raises(ClientError) as nowhere:
        ec2.run_instances(ImageId=AMI, InstanceType="p4d.24xlarge", MinCount=1, MaxCount=1,
                          Placement={"GroupName": "pg-nowhere"})  # fmt: skip
    assert code(nowhere) == "InvalidPlacementGroup.Unknown"
    launched = ec2.run_instances(ImageId=AMI, InstanceType="p4d.24xlarge", MinCount=2,
                                 MaxCount=2, Placement={"GroupName": "pg-used"})  # fmt: skip
    ids = [i["InstanceId"] for i in launched["Instances"]]
    with pytest.raises(ClientError) as in_use:
        ec2.delete_placement_group(GroupName="pg-used")
    assert code(in_use) == "InvalidPlacementGroup.InUse"
    ec2.terminate_instances(InstanceIds=ids)
    ec2.delete_placement_group(GroupName="pg-used")
    with pytest.raises(ClientError) as gone:
        ec2.delete_placement_group(GroupName="pg-used")
    assert code(gone) == "InvalidPlacementGroup.Unknown"
