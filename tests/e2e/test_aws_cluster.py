"""A cluster on AWS (issue 24): real Terraform core + hashicorp/aws against the session's moto.

- the rendered plan of a 4-node p4d cluster: a `cluster` placement group, the four EFA
  interfaces of each node (card 0 device 0, cards 1-3 device 1), a security group open to
  and from itself, an Elastic IP on rank 0, every instance tagged with its rank and the cluster;
- `orch up` of that cluster, then `orch down` with a state Terraform cannot read: deleting by
  tag takes every node, the placement group, the launch template and the address; nothing
  tagged is left;
- all or nothing: a proxy in front of moto refuses the third node's RunInstances in the first
  zone; orch destroys the two that launched and the rest, then launches all four in the next
  zone;
- the vCPU quota: a cluster the account's quota cannot hold is refused before any instance
  exists, with the quota's name and the number to request (tests/sim/aws_quotas.py).

moto applies a launch template's AMI, type, key and tags but not its network interfaces, so the
EFA interfaces are asserted on the plan (what the provider sends) and the launch template.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from orchestrator.provision.render import RenderRequest, render_box
from orchestrator.provision.terraform import Terraform
from tests import support
from tests.e2e.test_aws_lifecycle import instances_of, live_instances, security_groups_of, tags
from tests.support import failed_line, ok, plan_file

pytestmark = pytest.mark.e2e

CIDR = "203.0.113.7/32"
REGION = "us-east-1"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHj2d4Qe1xq7v0H8t8m5sYJ2m7G6mW1s3gk1qv0QH0aB t"

candidate = partial(
    support.candidate,
    region=REGION,
    price_per_hour=21.96,
    samples_per_s=100.0,
    hours=1.0,
    cost=21.96,
    memory_per_gpu_bytes=2**30,
    memory_fraction=0.5,
    image={"id": "ami-1e749f67"},
    root_volume_gib=120,
)


def tagged_left(ec2: Any, name: str) -> list[str]:
    """Everything of box `name` that EC2 still lists by its orch:box tag (what `down` and the
    sweeper look at), as "kind id"."""
    box = [{"Name": "tag:orch:box", "Values": [name]}]
    left = [f"instance {i['InstanceId']}" for i in live_instances(ec2, name)]
    left += [f"sg {g['GroupId']}" for g in security_groups_of(ec2, name)]
    groups = ec2.describe_placement_groups(Filters=box)["PlacementGroups"]
    left += [f"placement-group {g['GroupName']}" for g in groups]
    templates = ec2.describe_launch_templates(Filters=box)["LaunchTemplates"]
    left += [f"launch-template {t['LaunchTemplateId']}" for t in templates]
    left += [f"eip {a['AllocationId']}" for a in ec2.describe_addresses(Filters=box)["Addresses"]]
    return left


# ------------------------------------------------------------------------------ the plan


def test_rendered_cluster_plan_has_placement_group_efa_and_self_rules(aws_env, tmp_path):
    request = RenderRequest(
        name="plan-cluster",
        owner="e2e@orch-tests",
        candidate=candidate("p4d.24xlarge", nodes=4),
        ssh_public_key=KEY,
        ssh_ingress_cidrs=[CIDR],
        zone="us-east-1b",
    )
    directory = tmp_path / "box"
    render_box(directory, request)
    values = json.loads((directory / "terraform.tfvars.json").read_text())
    assert (values["node_count"], values["efa_interfaces"]) == (4, 4)  # the catalog's p4d figure

    env = {k: v for k, v in aws_env.items() if k != "ORCH_HOME"}
    terraform = Terraform(directory, env={**env, "TF_VAR_aws_skip_checks": "true"})
    terraform.init()
    planned = terraform.run(["plan", "-input=false", "-no-color", "-out=cluster.plan"])
    assert planned.returncode == 0, planned.stdout[-3000:] + planned.stderr[-3000:]
    shown = json.loads(terraform.run(["show", "-json", "cluster.plan"]).stdout)
    resources = {
        r["address"].removeprefix("module.box."): r["values"]
        for r in shown["planned_values"]["root_module"]["child_modules"][0]["resources"]
    }

    (group,) = [v for a, v in resources.items() if a.startswith("aws_placement_group.")]
    assert group["strategy"] == "cluster" and group["name"] == "orch-plan-cluster"

    nodes = [resources[f"aws_instance.this[{i}]"] for i in range(4)]
    assert [n["tags"]["orch:node"] for n in nodes] == ["0", "1", "2", "3"]
    assert {n["tags"]["orch:cluster"] for n in nodes} == {"plan-cluster"}
    assert {n["tags"]["orch:box"] for n in nodes} == {"plan-cluster"}
    assert {n["placement_group"] for n in nodes} == {"orch-plan-cluster"}
    assert "aws_instance.this[4]" not in resources

    template = resources["aws_launch_template.this[0]"]
    cards = sorted(
        (i["network_card_index"], i["device_index"], i["interface_type"])
        for i in template["network_interfaces"]
    )
    assert cards == [(0, 0, "efa"), (1, 1, "efa"), (2, 1, "efa"), (3, 1, "efa")]
    assert all(i["delete_on_termination"] == "true" for i in template["network_interfaces"])

    (sg,) = [v for a, v in resources.items() if a.startswith("aws_security_group.")]
    own = [rule for rule in sg["ingress"] if rule["self"]]
    assert [(r["protocol"], r["from_port"], r["to_port"]) for r in own] == [("-1", 0, 0)]
    ssh = [rule for rule in sg["ingress"] if not rule["self"]]
    assert [(r["from_port"], r["cidr_blocks"]) for r in ssh] == [(22, [CIDR])]
    # EFA also needs the way out to the group itself: 0.0.0.0/0 egress does not cover it
    # (Amazon EKS's cluster group, "Outbound | All | All | Self (for EFA traffic)").
    out = [rule for rule in sg["egress"] if rule["self"]]
    assert [(r["protocol"], r["from_port"], r["to_port"]) for r in out] == [("-1", 0, 0)]

    # Four network cards: no public address at launch; rank 0 gets an Elastic IP.
    assert "aws_eip.this[0]" in resources
    assert resources["aws_eip.this[0]"]["domain"] == "vpc"


# ------------------------------------------------------------------------------ up and down


def test_cluster_up_down_leaves_nothing_tagged(orch, ec2, capacity_proxy, tmp_path):
    name = "e2e-cluster"
    plan = plan_file(tmp_path, candidate("p4d.24xlarge", nodes=4))
    box = json.loads(
        ok(orch("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--no-check",
                "--ttl", "2h", "--json")).stdout
    )  # fmt: skip
    record = json.loads((Path(box["box_dir"]) / "box.json").read_text())
    nodes = record["outputs"]["nodes"]
    assert [n["index"] for n in nodes] == [0, 1, 2, 3]
    running = {i["InstanceId"]: i for i in live_instances(ec2, name)}
    assert sorted(running) == sorted(n["instance_id"] for n in nodes)
    assert box["instance_id"] == nodes[0]["instance_id"]  # the plain outputs are rank 0's
    assert {n["availability_zone"] for n in nodes} == {nodes[0]["availability_zone"]}
    for node in nodes:
        assert tags(running[node["instance_id"]])["orch:node"] == str(node["index"])
    # Every node was launched into the cluster's placement group (moto keeps no placement:
    # the proxy's stand-in saw the RunInstances calls).
    assert capacity_proxy.placement.launches.count(f"orch-{name}") == 4
    # Rank 0 is reached at its Elastic IP; the others through it.
    (address,) = ec2.describe_addresses(Filters=[{"Name": "tag:orch:box", "Values": [name]}])[
        "Addresses"
    ]
    assert box["public_ip"] == nodes[0]["public_ip"] == address["PublicIp"]

    # The cloud's truth covers every part: with a state Terraform cannot read, `down` deletes
    # by tag (the third-node test below destroys through Terraform).
    (Path(box["box_dir"]) / "terraform.tfstate").write_text("{ not a state")
    result = ok(orch("down", name))
    assert "deleting by tag" in result.stderr
    assert tagged_left(ec2, name) == []
    assert len(instances_of(ec2, name)) == 4  # all terminated, none forgotten


def test_third_node_refused_destroys_all_then_next_zone(
    orch, ec2, aws_env, capacity_proxy, tmp_path
):
    """All or nothing: the first zone launches two nodes of four and refuses the third (and
    the fourth): the two that launched are destroyed with the rest of the partial cluster, and
    all four launch in the next zone."""
    name = "e2e-cluster-3rd"
    plan = plan_file(tmp_path, candidate("p4d.24xlarge", nodes=4))
    env = {**aws_env, "AWS_ENDPOINT_URL": capacity_proxy.url}
    # "Unsupported" is a per-zone capacity code the provider does not retry for minutes
    # (test_aws_lifecycle's zone test says why InsufficientInstanceCapacity is not used).
    with capacity_proxy.running_out("us-east-1a", after=2, code="Unsupported"):
        result = orch(
            "up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--no-check", "--json",
            env=env,
        )  # fmt: skip
        refused = list(capacity_proxy.refused)
    box = json.loads(ok(result).stdout)
    assert refused and set(refused) == {"p4d.24xlarge@us-east-1a"}
    assert [(a["zone"], a["error"]) for a in box["attempts"]] == [("us-east-1a", "Unsupported")]
    nodes = json.loads((Path(box["box_dir"]) / "box.json").read_text())["outputs"]["nodes"]
    live = live_instances(ec2, name)
    assert len(live) == 4 and {i["Placement"]["AvailabilityZone"] for i in live} == {"us-east-1b"}
    assert sorted(i["InstanceId"] for i in live) == sorted(n["instance_id"] for n in nodes)
    # What launched in us-east-1a before the refusal was terminated, not left running.
    first_zone = [i for i in instances_of(ec2, name) if i["Placement"]["AvailabilityZone"] ==
                  "us-east-1a"]  # fmt: skip
    assert first_zone and all(i["State"]["Name"] == "terminated" for i in first_zone)
    ok(orch("down", name, env=env))
    assert tagged_left(ec2, name) == []


# ------------------------------------------------------------------------------ quota


@pytest.fixture
def quota_server():  # noqa: ANN201 - a QuotaServer
    from tests.sim.aws_quotas import QuotaServer

    with QuotaServer(applied={"L-417A185B": 192.0}) as server:
        yield server


def test_cluster_beyond_the_vcpu_quota_is_refused_before_any_instance(
    orch, ec2, aws_env, quota_server, tmp_path
):
    name = "e2e-cluster-quota"
    plan = plan_file(tmp_path, candidate("p4d.24xlarge", nodes=4))
    env = {**aws_env, "AWS_ENDPOINT_URL_SERVICE_QUOTAS": quota_server.endpoint}
    before = len(ec2.describe_instances()["Reservations"])
    result = orch("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--no-check", env=env)
    line = failed_line(result)
    # 4 x 96 vCPUs against the account's 192 of "Running On-Demand P instances".
    assert "Running On-Demand P instances" in line and "L-417A185B" in line
    assert "384" in line and "192" in line
    assert len(ec2.describe_instances()["Reservations"]) == before
    assert tagged_left(ec2, name) == []
    operations = [r["operation"] for r in quota_server.requests]
    assert "GetServiceQuota" in operations


# A region no other e2e test launches in: the shared moto server's other instances must not
# count under this test's quota (they would, as a real account's do).
IN_USE_REGION = "ap-southeast-2"


def test_instances_already_running_under_the_quota_make_a_fitting_cluster_refused(
    orch, aws_env, quota_server, tmp_path
):
    """4 x p4d (384 vCPUs) fits the account's 480 of on-demand P, but two p4d already run
    under it (192): the cluster is refused before any instance, asking for 192 + 384."""
    import boto3

    ec2 = boto3.client(
        "ec2", endpoint_url=aws_env["AWS_ENDPOINT_URL"], region_name=IN_USE_REGION,
        aws_access_key_id="testing", aws_secret_access_key="testing",
    )  # fmt: skip
    quota_server.applied["L-417A185B"] = 480.0
    name = "e2e-cluster-quota-in-use"
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    launch = partial(ec2.run_instances, ImageId=image, MinCount=1, MaxCount=1)
    launch(InstanceType="p4d.24xlarge")
    launch(InstanceType="p4d.24xlarge")  # 192 vCPUs of on-demand P in use
    launch(InstanceType="p4d.24xlarge", InstanceMarketOptions={"MarketType": "spot"})
    launch(InstanceType="g5.xlarge")  # the G and VT quota's
    try:
        before = len(ec2.describe_instances()["Reservations"])
        plan = plan_file(tmp_path, candidate("p4d.24xlarge", nodes=4, region=IN_USE_REGION))
        env = {**aws_env, "AWS_ENDPOINT_URL_SERVICE_QUOTAS": quota_server.endpoint}
        result = orch(
            "up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--no-check", env=env
        )
        line = failed_line(result)
        assert (
            f"4 x p4d.24xlarge on-demand in {IN_USE_REGION} needs 384 vCPUs; Running On-Demand"
            " P instances (L-417A185B) is 480 with 192 in use: request 576 or more"
        ) in line
        assert "nothing was created" in line
        assert len(ec2.describe_instances()["Reservations"]) == before
        assert tagged_left(ec2, name) == []
    finally:  # this test's region: every instance in it is this test's
        reservations = ec2.describe_instances()["Reservations"]
        ids = [i["InstanceId"] for r in reservations for i in r["Instances"]]
        ec2.terminate_instances(InstanceIds=ids)
