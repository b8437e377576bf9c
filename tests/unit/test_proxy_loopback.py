"""The tests' proxy puts private addresses on the loopback only inside
`CapacityProxy.private_ips_on_loopback` (the cluster recovery e2e runs torchrun across loopback
"nodes" at them), the same address in every EC2 answer, and leaves them as moto gives them
outside it (the proxy serves the whole session)."""

from __future__ import annotations

import ipaddress
from typing import Any

import boto3
import pytest

from tests.e2e.conftest import CapacityProxy

AMI = "ami-1e749f67"


@pytest.fixture
def proxied(moto):  # noqa: ANN201 - (proxy, boto3 EC2 client)
    with CapacityProxy(moto) as proxy:
        client = boto3.client(
            "ec2",
            endpoint_url=proxy.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        yield proxy, client


def addresses(ec2: Any, instance_id: str) -> set[str]:
    """Every private address EC2 gives for the instance: its own, its interfaces'."""
    (reservation,) = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    (instance,) = reservation["Instances"]
    found = {instance["PrivateIpAddress"]}
    for interface in instance["NetworkInterfaces"]:
        found.add(interface["PrivateIpAddress"])
        found.update(a["PrivateIpAddress"] for a in interface["PrivateIpAddresses"])
    filters = [{"Name": "attachment.instance-id", "Values": [instance_id]}]
    for interface in ec2.describe_network_interfaces(Filters=filters)["NetworkInterfaces"]:
        found.add(interface["PrivateIpAddress"])
    return found


def test_private_addresses_are_on_the_loopback_only_inside_the_block(proxied):
    proxy, ec2 = proxied
    with proxy.private_ips_on_loopback():
        launched = ec2.run_instances(ImageId=AMI, InstanceType="g5.xlarge", MinCount=2,
                                     MaxCount=2)["Instances"]  # fmt: skip
        inside = [addresses(ec2, i["InstanceId"]) for i in launched]
    outside = [addresses(ec2, i["InstanceId"]) for i in launched]
    # One address an instance, the same in RunInstances and every later answer; two instances,
    # two addresses (the first octet goes, the other three stay).
    assert [{i["PrivateIpAddress"]} for i in launched] == inside
    assert all(len(found) == 1 for found in inside + outside)
    (a,), (b,) = inside
    assert a != b and all(ipaddress.ip_address(x).is_loopback for x in (a, b))
    (real_a,), (real_b,) = outside
    assert not ipaddress.ip_address(real_a).is_loopback
    assert a.split(".")[1:] == real_a.split(".")[1:] and b.split(".")[1:] == real_b.split(".")[1:]
    ec2.terminate_instances(InstanceIds=[i["InstanceId"] for i in launched])
