"""A box's identity end to end: real Terraform core + hashicorp/aws against moto's EC2 and IAM.

`orch up --via ssm` gives the box a role of its own (AmazonSSMManagedInstanceCore, path /orch/,
the box's tags plus orch:region) that `down` removes; `--instance-profile NAME` attaches an
existing profile and leaves it alone; the sweeper removes leftover roles and profiles by tag.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest

from tests import support
from tests.support import ok, plan_file

pytestmark = pytest.mark.e2e

CIDR = "203.0.113.7/32"
MOTO_AMI = "ami-1e749f67"
SSM_CORE = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
ASSUME_EC2 = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "ec2.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
)

S3_POLICY = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::ckpt/runs/*"}
        ],
    }
)

candidate = partial(
    support.candidate, region="us-east-1", image={"id": MOTO_AMI}, root_volume_gib=120
)


def live_instance(ec2: Any, name: str) -> dict[str, Any]:
    pages = ec2.describe_instances(Filters=[{"Name": "tag:orch:box", "Values": [name]}])
    (instance,) = [
        i
        for r in pages["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] != "terminated"
    ]
    return instance


def orch_roles(iam: Any, box: str) -> list[str]:
    names = [r["RoleName"] for r in iam.list_roles(PathPrefix="/orch/")["Roles"]]
    return [
        n
        for n in names
        if {"Key": "orch:box", "Value": box} in iam.list_role_tags(RoleName=n)["Tags"]
    ]


def tags(answer: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in answer["Tags"]}


def test_via_ssm_the_box_gets_a_role_of_its_own_and_down_removes_it(orch, ec2, iam, tmp_path):
    plan = plan_file(tmp_path, candidate("g4dn.xlarge"))
    ok(orch("up", "--plan", plan, "--name", "id-ssm", "--ttl", "1h", "--ssh-cidr", CIDR,
            "--via", "ssm", "--no-check"))  # fmt: skip
    instance = live_instance(ec2, "id-ssm")
    # IMDSv2 only, reachable from a container on the box (hop limit 2).
    assert instance["MetadataOptions"]["HttpTokens"] == "required"
    assert instance["MetadataOptions"]["HttpPutResponseHopLimit"] == 2
    profile_name = instance["IamInstanceProfile"]["Arn"].rsplit("/", 1)[1]
    profile = iam.get_instance_profile(InstanceProfileName=profile_name)["InstanceProfile"]
    assert profile["Path"] == "/orch/" and profile_name.startswith("orch-id-ssm-")
    (role,) = profile["Roles"]
    assert role["Path"] == "/orch/"
    role_tags = tags(iam.list_role_tags(RoleName=role["RoleName"]))
    assert role_tags["orch:box"] == "id-ssm" and role_tags["orch:region"] == "us-east-1"
    assert role_tags["orch:expires-at"].endswith("Z")
    assert tags(profile)["orch:box"] == "id-ssm"
    attached = iam.list_attached_role_policies(RoleName=role["RoleName"])["AttachedPolicies"]
    assert [p["PolicyArn"] for p in attached] == [SSM_CORE]
    assert iam.list_role_policies(RoleName=role["RoleName"])["PolicyNames"] == []  # no store
    trust = role["AssumeRolePolicyDocument"]
    trust = json.loads(trust) if isinstance(trust, str) else trust
    assert trust["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}

    ok(orch("down", "id-ssm"))
    assert orch_roles(iam, "id-ssm") == []
    profiles = iam.list_instance_profiles(PathPrefix="/orch/")["InstanceProfiles"]
    assert profile_name not in [p["InstanceProfileName"] for p in profiles]


def test_an_existing_instance_profile_is_attached_and_left_alone(orch, ec2, iam, tmp_path):
    iam.create_role(RoleName="team-training", AssumeRolePolicyDocument=ASSUME_EC2)
    iam.create_instance_profile(InstanceProfileName="team-training")
    iam.add_role_to_instance_profile(InstanceProfileName="team-training", RoleName="team-training")
    try:
        plan = plan_file(tmp_path, candidate("g4dn.xlarge"))
        ok(orch("up", "--plan", plan, "--name", "id-own", "--ssh-cidr", CIDR,
                "--instance-profile", "team-training", "--via", "ssm", "--no-check"))  # fmt: skip
        arn = live_instance(ec2, "id-own")["IamInstanceProfile"]["Arn"]
        assert arn.endswith(":instance-profile/team-training")
        assert orch_roles(iam, "id-own") == []  # nothing created
        ok(orch("down", "id-own"))
        kept = iam.get_instance_profile(InstanceProfileName="team-training")["InstanceProfile"]
        assert [r["RoleName"] for r in kept["Roles"]] == ["team-training"]
    finally:
        iam.remove_role_from_instance_profile(
            InstanceProfileName="team-training", RoleName="team-training"
        )
        iam.delete_instance_profile(InstanceProfileName="team-training")
        iam.delete_role(RoleName="team-training")


@pytest.mark.parametrize("bad", ["has space", "x" * 129, "semi;colon"])
def test_a_bad_instance_profile_name_is_exit_2_before_anything(orch, ec2, tmp_path, bad):
    plan = plan_file(tmp_path, candidate("g4dn.xlarge"))
    result = orch("up", "--plan", plan, "--name", "id-bad", "--ssh-cidr", CIDR,
                  "--instance-profile", bad, "--no-check")  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("orch: error: --instance-profile")
    assert not (tmp_path / "orch-home" / "boxes" / "id-bad").exists()


def leftover(iam: Any, name: str, box: str, expires: str, region: str = "us-east-1") -> None:
    """A role and profile as a box's apply leaves them when its machine dies mid-way."""
    box_tags = [
        {"Key": "orch:box", "Value": box},
        {"Key": "orch:expires-at", "Value": expires},
        {"Key": "orch:region", "Value": region},
    ]
    iam.create_role(
        RoleName=name, Path="/orch/", AssumeRolePolicyDocument=ASSUME_EC2, Tags=box_tags
    )
    iam.put_role_policy(RoleName=name, PolicyName="orch-checkpoints", PolicyDocument=S3_POLICY)
    iam.attach_role_policy(RoleName=name, PolicyArn=SSM_CORE)
    iam.create_instance_profile(InstanceProfileName=name, Path="/orch/", Tags=box_tags)
    iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)


def test_the_sweeper_removes_expired_boxes_roles_and_profiles(orch, iam):
    leftover(iam, "orch-swept-1", "swept", "2020-01-01T00:00:00Z")
    leftover(iam, "orch-fresh-1", "fresh", "2999-01-01T00:00:00Z")
    leftover(iam, "orch-elsewhere-1", "elsewhere", "2020-01-01T00:00:00Z", region="eu-west-1")
    try:
        report = json.loads(
            ok(orch("sweep", "--cloud", "aws", "--region", "us-east-1", "--json")).stdout
        )
        by_box = {b["box"]: b for b in report["boxes"]}
        assert by_box["swept"]["action"] == "destroyed"
        kinds = sorted(r["kind"] for r in by_box["swept"]["resources"])
        assert kinds == ["iam_role", "instance_profile"]
        assert by_box["fresh"]["action"] == "kept"
        assert "elsewhere" not in by_box  # another region's sweep claims it
        roles = [r["RoleName"] for r in iam.list_roles(PathPrefix="/orch/")["Roles"]]
        assert "orch-swept-1" not in roles and "orch-fresh-1" in roles
        profiles = iam.list_instance_profiles(PathPrefix="/orch/")["InstanceProfiles"]
        assert "orch-swept-1" not in [p["InstanceProfileName"] for p in profiles]
    finally:
        for name in ("orch-fresh-1", "orch-elsewhere-1", "orch-swept-1"):
            try:
                iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=name)
                iam.delete_instance_profile(InstanceProfileName=name)
                iam.delete_role_policy(RoleName=name, PolicyName="orch-checkpoints")
                iam.detach_role_policy(RoleName=name, PolicyArn=SSM_CORE)
                iam.delete_role(RoleName=name)
            except iam.exceptions.NoSuchEntityException:
                pass
