"""`orch up / status / down` end to end: real Terraform core + hashicorp/aws against moto.

Each `up` here is a real `terraform apply` (the provider polls the instance for ~10 s), so
the scenarios share applies: about eight in all.
"""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests import support
from tests.support import ok, plan_file

pytestmark = pytest.mark.e2e

CIDR = "203.0.113.7/32"
REGION = "us-east-1"
MOTO_AMI = "ami-1e749f67"  # one of moto's default images (tests/e2e/conftest.py MOTO_AMI)
AL2023_SSM = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
UBUNTU_OWNER = "099720109477"
UBUNTU_TRUSTY = "ubuntu/images/hvm-ssd/ubuntu-trusty-14.04-amd64-server-*"


# The shared factory with this suite's figures: moto's image, a 120 GiB volume.
candidate = partial(
    support.candidate,
    region=REGION,
    price_per_hour=0.5,
    samples_per_s=100.0,
    hours=1.0,
    cost=0.5,
    memory_per_gpu_bytes=2**30,
    memory_fraction=0.5,
    image={"id": MOTO_AMI},
    root_volume_gib=120,
)


def one_line_error(result: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert len(lines) == 1 and lines[0].startswith("orch: error: "), result.stderr
    for word in words:
        assert word in lines[0]
    return lines[0]


def instances_of(ec2: Any, name: str) -> list[dict[str, Any]]:
    pages = ec2.describe_instances(Filters=[{"Name": "tag:orch:box", "Values": [name]}])
    return [i for r in pages["Reservations"] for i in r["Instances"]]


def live_instances(ec2: Any, name: str) -> list[dict[str, Any]]:
    return [i for i in instances_of(ec2, name) if i["State"]["Name"] != "terminated"]


def security_groups_of(ec2: Any, name: str) -> list[dict[str, Any]]:
    groups = ec2.describe_security_groups(Filters=[{"Name": "tag:orch:box", "Values": [name]}])
    return groups["SecurityGroups"]


def key_pairs_of(ec2: Any, name: str) -> list[dict[str, Any]]:
    pairs = ec2.describe_key_pairs()["KeyPairs"]
    return [k for k in pairs if k["KeyName"].startswith(f"orch-{name}-")]


def assert_nothing_left(ec2: Any, name: str) -> None:
    assert live_instances(ec2, name) == []
    assert security_groups_of(ec2, name) == []
    assert key_pairs_of(ec2, name) == []


def tags(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}


# ------------------------------------------------------------------------------ scenarios


def test_g4dn_on_demand_up_status_down(orch, ec2, aws_env, tmp_path):
    name = "e2e-g4dn"
    plan = plan_file(tmp_path, candidate("g4dn.xlarge"))
    result = ok(
        orch("up", "--plan", plan, "--name", name, "--ttl", "2h", "--ssh-cidr", CIDR,
             "--tag", "team=ml", "--no-check", "--json")
    )  # fmt: skip
    box = json.loads(result.stdout)
    assert box["name"] == name and box["instance_type"] == "g4dn.xlarge"
    assert box["instance_id"].startswith("i-") and box["public_ip"]
    assert f"UserKnownHostsFile={box['box_dir']}/known_hosts" in box["ssh_command"]
    assert f"-i {box['box_dir']}/id_ed25519" in box["ssh_command"]

    # What moto holds is what the plan asked for, with the secure defaults.
    (instance,) = live_instances(ec2, name)
    assert instance["InstanceId"] == box["instance_id"]
    assert instance["InstanceType"] == "g4dn.xlarge"
    assert instance["ImageId"] == MOTO_AMI
    assert instance["MetadataOptions"]["HttpTokens"] == "required"
    assert instance["MetadataOptions"]["HttpEndpoint"] == "enabled"
    assert "InstanceLifecycle" not in instance  # on-demand
    instance_tags = tags(instance)
    assert instance_tags["orch:box"] == name
    assert instance_tags["orch:owner"] == "e2e@orch-tests"
    assert instance_tags["orch:expires-at"] == box["expires_at"]
    assert instance_tags["team"] == "ml"
    shutdown = ec2.describe_instance_attribute(
        InstanceId=box["instance_id"], Attribute="instanceInitiatedShutdownBehavior"
    )
    assert shutdown["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    user_data = ec2.describe_instance_attribute(InstanceId=box["instance_id"], Attribute="userData")
    assert user_data["UserData"].get("Value")  # the driver/expiry script went in

    volume_id = instance["BlockDeviceMappings"][0]["Ebs"]["VolumeId"]
    (volume,) = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"]
    assert volume["Encrypted"] is True
    assert volume["VolumeType"] == "gp3" and volume["Size"] == 120
    assert tags(volume)["orch:box"] == name

    (group,) = security_groups_of(ec2, name)
    ingress = [
        (p.get("FromPort"), p.get("ToPort"), r["CidrIp"])
        for p in group["IpPermissions"]
        for r in p.get("IpRanges", [])
    ]
    assert ingress == [(22, 22, CIDR)]
    attached = {g["GroupId"] for n in instance["NetworkInterfaces"] for g in n["Groups"]}
    attached |= {g["GroupId"] for g in instance["SecurityGroups"]}
    assert attached == {group["GroupId"]}
    (key,) = key_pairs_of(ec2, name)
    assert key["KeyName"] == instance["KeyName"]

    # The box directory: private, with a 0600 ed25519 key.
    box_dir = Path(box["box_dir"])
    assert stat.S_IMODE(box_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((box_dir / "id_ed25519").stat().st_mode) == 0o600
    assert (box_dir / "id_ed25519.pub").read_text().startswith("ssh-ed25519 ")
    assert (box_dir / "terraform.tfstate").exists()

    status = json.loads(ok(orch("status", name, "--json")).stdout)
    assert status["state"] == "up" and status["instance_id"] == box["instance_id"]
    listing = ok(orch("list")).stdout
    assert name in listing and "g4dn.xlarge" in listing and " up " in listing

    # A second `up` of a live name is refused before anything is touched.
    again = orch("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--no-check")
    one_line_error(again, 2, "already up")
    assert len(live_instances(ec2, name)) == 1

    ok(orch("down", name))
    assert_nothing_left(ec2, name)
    assert not box_dir.exists()
    one_line_error(orch("status", name), 2, "no box named")


def test_p4d_spot_up_down(orch, ec2, ssm, tmp_path):
    name = "e2e-p4d-spot"
    # The image comes from a public SSM parameter, as DLAMIs do (moto serves Amazon Linux's).
    image = {"ssm_parameter": AL2023_SSM}
    plan = plan_file(
        tmp_path,
        candidate("p4d.24xlarge", "spot", root_volume_gib=500, image=image, ssh_user="ec2-user"),
    )
    box = json.loads(
        ok(
            orch("up", "--plan", plan, "--name", name, "--ssh-cidr", "198.51.100.0/24",
                 "--max-price", "12.5", "--no-check", "--json", "--ttl", "none")
        ).stdout
    )  # fmt: skip
    (instance,) = live_instances(ec2, name)
    assert instance["ImageId"] == ssm.get_parameter(Name=AL2023_SSM)["Parameter"]["Value"]
    assert box["ssh_command"].endswith(f"-l ec2-user -- {box['public_ip']}")
    assert instance["InstanceType"] == "p4d.24xlarge"
    assert instance["InstanceLifecycle"] == "spot"
    assert instance["MetadataOptions"]["HttpTokens"] == "required"
    # `--ttl none`, the explicit way to a box that never expires (without it: 12 h).
    assert tags(instance)["orch:expires-at"] == "" and box["expires_at"] is None
    assert box["ttl"] == "none"
    (group,) = security_groups_of(ec2, name)
    cidrs = [r["CidrIp"] for p in group["IpPermissions"] for r in p.get("IpRanges", [])]
    assert cidrs == ["198.51.100.0/24"]
    volume_id = instance["BlockDeviceMappings"][0]["Ebs"]["VolumeId"]
    assert ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]["Encrypted"] is True

    ok(orch("down", name))
    assert_nothing_left(ec2, name)


def test_state_in_s3_down_from_another_home(orch, ec2, s3, aws_env, tmp_path):
    name = "e2e-remote"
    bucket = "orch-e2e-state"
    s3.create_bucket(Bucket=bucket)
    state_url = f"s3://{bucket}/ci/run-1"
    plan = plan_file(tmp_path, candidate("g4dn.xlarge"))
    ok(orch("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--state", state_url,
            "--no-check", "--json"))  # fmt: skip
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    leaves = ("terraform.tfstate", "orch-box.json", "orch-claim.json")  # + the name's claim
    assert keys == {f"ci/run-1/{name}/{leaf}" for leaf in leaves}
    stored = s3.get_object(Bucket=bucket, Key=f"ci/run-1/{name}/orch-box.json")
    bundle = json.loads(stored["Body"].read())
    assert "id_ed25519" not in json.dumps(bundle["files"])  # the private key stays home
    home_a = Path(aws_env["ORCH_HOME"]) / "boxes" / name
    assert not (home_a / "terraform.tfstate").exists()
    assert len(live_instances(ec2, name)) == 1

    # Another machine: empty ORCH_HOME, same bucket.
    other = {**aws_env, "ORCH_HOME": str(tmp_path / "other-home")}
    one_line_error(orch("down", name, env=other), 2, "no box named")
    ok(orch("down", name, "--state", state_url, env=other))
    assert_nothing_left(ec2, name)
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    assert not (tmp_path / "other-home" / "boxes" / name).exists()


def test_interrupted_up_then_down_leaves_nothing(orch, orch_process, ec2, tmp_path):
    name = "e2e-interrupt"
    plan = plan_file(tmp_path, candidate("g4dn.xlarge"))
    process = orch_process("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--no-check")
    seen = []
    assert process.stderr is not None
    for line in process.stderr:
        seen.append(line)
        if "aws_instance.this[0]: creating" in line:
            process.send_signal(signal.SIGINT)  # mid-apply, like Ctrl-C
            break
    rest = process.stderr.read()
    assert process.wait(timeout=300) == 130, "".join(seen) + rest
    assert "orch: error: interrupted" in rest
    status = json.loads(ok(orch("status", name, "--json")).stdout)
    assert status["state"] == "failed" and status["error"] == "interrupted"

    # Terraform stopped gracefully: what it created is in its state, and `down` removes it.
    assert len(security_groups_of(ec2, name)) == 1
    ok(orch("down", name))
    assert_nothing_left(ec2, name)


def launch_behind_terraforms_back(ec2: Any, name: str) -> str:
    """What a Ctrl-C 15-25 ms after `aws_instance.this: creating` leaves (issue 9 item 1): the
    RunInstances that Terraform's graceful stop cancelled still launched an instance, tagged
    for the box (the provider sends the tags with RunInstances), that never reached the state."""
    reservation = ec2.run_instances(
        ImageId=MOTO_AMI,
        InstanceType="g4dn.xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {"ResourceType": kind, "Tags": [{"Key": "orch:box", "Value": name}]}
            for kind in ("instance", "volume")
        ],
    )
    return reservation["Instances"][0]["InstanceId"]


def test_down_removes_what_the_state_never_held(orch, ec2, tmp_path):
    name = "e2e-race"
    plan = plan_file(tmp_path, candidate("g4dn.xlarge"))
    box = json.loads(
        ok(orch("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--no-check",
                "--json")).stdout
    )  # fmt: skip
    stray = launch_behind_terraforms_back(ec2, name)
    assert {i["InstanceId"] for i in live_instances(ec2, name)} == {box["instance_id"], stray}

    result = ok(orch("down", name))
    assert "destroyed" in result.stdout
    assert_nothing_left(ec2, name)  # the stray instance too: down ends on the cloud's truth
    (instance,) = [i for i in instances_of(ec2, name) if i["InstanceId"] == stray]
    assert instance["State"]["Name"] == "terminated"


def test_down_deletes_by_tag_when_terraform_cannot_destroy(orch, ec2, tmp_path):
    """A state Terraform cannot load (or a config the provider refuses on refresh) used to make
    `down` fail on every retry while the box kept running: now it deletes by tag."""
    name = "e2e-tf-broken"
    plan = plan_file(tmp_path, candidate("g4dn.xlarge"))
    box = json.loads(
        ok(orch("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--no-check",
                "--json")).stdout
    )  # fmt: skip
    launch_behind_terraforms_back(ec2, name)
    (Path(box["box_dir"]) / "terraform.tfstate").write_text("{ this is not a state")
    assert len(live_instances(ec2, name)) == 2 and len(security_groups_of(ec2, name)) == 1

    result = ok(orch("down", name))
    assert "Terraform could not destroy" in result.stderr and "deleting by tag" in result.stderr
    assert_nothing_left(ec2, name)
    assert not Path(box["box_dir"]).exists()
    one_line_error(orch("status", name), 2, "no box named")


def test_rerun_of_a_failed_up_reapplies(orch, ec2, aws_env, capacity_proxy, tmp_path):
    """A non-capacity failure leaves the box "failed"; `up` again finishes it, no duplicates."""
    name = "e2e-rerun"
    plan = plan_file(tmp_path, candidate("g4dn.xlarge"))
    env = {**aws_env, "AWS_ENDPOINT_URL": capacity_proxy.url}
    args = ("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--no-check", "--json")
    with capacity_proxy.refusing({"g4dn.xlarge": "InvalidParameterCombination"}):
        failed = orch(*args, env=env)
    line = one_line_error(failed, 1, "InvalidParameterCombination", f"orch down {name}")
    assert "no capacity" not in line  # not a capacity error: no failover, no retry
    status = json.loads(ok(orch("status", name, "--json")).stdout)
    assert status["state"] == "failed"
    assert len(security_groups_of(ec2, name)) == 1 and live_instances(ec2, name) == []

    box = json.loads(ok(orch(*args, env=env)).stdout)
    assert box["attempts"] == []  # this run succeeded at once
    (instance,) = live_instances(ec2, name)
    assert instance["InstanceId"] == box["instance_id"]
    assert len(security_groups_of(ec2, name)) == 1 and len(key_pairs_of(ec2, name)) == 1
    ok(orch("down", name, env=env))
    assert_nothing_left(ec2, name)


def test_failover_to_next_candidate_on_quota_error(orch, ec2, aws_env, capacity_proxy, tmp_path):
    name = "e2e-failover"
    # The fallback finds its image by owner + name filter (the module's third image source).
    image = {"name_filter": UBUNTU_TRUSTY, "owners": UBUNTU_OWNER}
    plan = plan_file(
        tmp_path, candidate("p4d.24xlarge"), candidate("g4dn.xlarge", "spot", image=image)
    )
    env = {**aws_env, "AWS_ENDPOINT_URL": capacity_proxy.url}
    with capacity_proxy.refusing({"p4d.24xlarge": "VcpuLimitExceeded"}):
        result = ok(
            orch("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--no-check",
                 "--json", env=env)
        )  # fmt: skip
        assert capacity_proxy.refused == ["p4d.24xlarge"]
    box = json.loads(result.stdout)
    assert box["instance_type"] == "g4dn.xlarge"
    assert [(a["instance_type"], a["error"]) for a in box["attempts"]] == [
        ("p4d.24xlarge", "VcpuLimitExceeded")
    ]
    # The partial first attempt (its key pair and security group) was destroyed.
    (instance,) = live_instances(ec2, name)
    assert instance["InstanceType"] == "g4dn.xlarge" and instance["InstanceLifecycle"] == "spot"
    images = ec2.describe_images(
        Owners=[UBUNTU_OWNER], Filters=[{"Name": "name", "Values": [UBUNTU_TRUSTY]}]
    )["Images"]
    newest = max(images, key=lambda i: i["CreationDate"])
    assert instance["ImageId"] == newest["ImageId"]
    assert len(security_groups_of(ec2, name)) == 1 and len(key_pairs_of(ec2, name)) == 1
    ok(orch("down", name, env=env))
    assert_nothing_left(ec2, name)


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("down no-such-box", ["no box named 'no-such-box'"]),
        ("up --plan PLAN --name bad-ttl --ttl 2x --ssh-cidr " + CIDR, ["--ttl"]),
        ("up --plan PLAN --name world --ssh-cidr 0.0.0.0/0", ["--allow-world-ssh"]),
        ("up --plan PLAN --name Bad_Name --ssh-cidr " + CIDR, ["bad box name"]),
        ("up --plan PLAN --name x --ssh-cidr 10.0.0.0/33", ["--ssh-cidr"]),
        ("up --plan PLAN --name x --state gs://b/p --ssh-cidr " + CIDR, ["--state"]),
        ("up --plan PLAN --name x --model bert-large --ssh-cidr " + CIDR, ["not both"]),
        ("up --name x --ssh-cidr " + CIDR, ["--plan"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(orch, ec2, tmp_path, command, words):
    plan = plan_file(tmp_path, candidate("g4dn.xlarge"))
    before = len(ec2.describe_instances()["Reservations"])
    result = orch(*[plan if a == "PLAN" else a for a in command.split()])
    one_line_error(result, 2, *words)
    assert len(ec2.describe_instances()["Reservations"]) == before


def test_concurrent_commands_on_one_box_are_serialised(orch, aws_env, monkeypatch):
    """While one command holds a box's lock, another on the same box waits, then gives up."""
    from orchestrator.provision.boxes import box_lock

    monkeypatch.setenv("ORCH_HOME", aws_env["ORCH_HOME"])
    env = {**aws_env, "ORCH_LOCK_TIMEOUT": "1"}
    with box_lock("e2e-locked"):
        started = time.monotonic()
        result = orch("down", "e2e-locked", env=env)
        waited = time.monotonic() - started
    assert result.returncode == 1
    assert "waiting up to 1s" in result.stderr
    assert "box e2e-locked is busy" in result.stderr.strip().splitlines()[-1]
    assert waited >= 1.0


def test_plan_options_reach_terraform_with_the_dlami_parameter(orch, ec2):
    """Without --plan, `up` plans with the selector; its DLAMI SSM parameter goes to Terraform.

    moto has no DLAMI parameters (and refuses to create /aws/... names), so the apply fails
    reading it: one line, exit 1, the box recorded as failed, and `down` clears it.
    """
    name = "e2e-planned"
    result = orch(
        "up", "--model", "bert-large", "--cloud", "aws", "--region", REGION,
        "--name", name, "--ssh-cidr", CIDR, "--no-check", "--json",
    )  # fmt: skip
    assert result.stdout == ""  # --json: quiet progress, and no object for a failed box
    line = one_line_error(result, 1, "/aws/service/deeplearning/ami/", f"orch down {name}")
    assert "SSM Parameter" in line
    status = json.loads(ok(orch("status", name, "--json")).stdout)
    assert status["state"] == "failed" and status["cloud"] == "aws"
    assert status["region"] == REGION
    ok(orch("down", name))
    assert_nothing_left(ec2, name)


def test_insufficient_capacity_in_one_zone_tries_the_next_zone(
    orch, ec2, aws_env, capacity_proxy, tmp_path
):
    """EC2 has no stock API: orch launches in the first AZ that offers the type
    (DescribeInstanceTypeOfferings) and, on a capacity error there, in the next AZ, before any
    other candidate. The error is `Unsupported` ("not supported in your requested Availability
    Zone"), a per-AZ capacity code: InsufficientInstanceCapacity the AWS provider itself retries
    for minutes before it gives up (its EC2 retryer), too long for a test."""
    name = "e2e-zones"
    plan = plan_file(tmp_path, candidate("g4dn.xlarge"), candidate("p4d.24xlarge"))
    env = {**aws_env, "AWS_ENDPOINT_URL": capacity_proxy.url}
    with capacity_proxy.refusing({"g4dn.xlarge@us-east-1a": "Unsupported"}):
        result = ok(
            orch("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--no-check",
                 "--json", env=env)
        )  # fmt: skip
        # Refused in us-east-1a only (the provider may send a refused call twice).
        assert set(capacity_proxy.refused) == {"g4dn.xlarge@us-east-1a"}
    box = json.loads(result.stdout)
    assert box["instance_type"] == "g4dn.xlarge"
    assert [(a["zone"], a["error"]) for a in box["attempts"]] == [("us-east-1a", "Unsupported")]
    (instance,) = live_instances(ec2, name)
    assert instance["InstanceType"] == "g4dn.xlarge"
    assert instance["Placement"]["AvailabilityZone"] == "us-east-1b"
    subnet = ec2.describe_subnets(SubnetIds=[instance["SubnetId"]])["Subnets"][0]
    assert subnet["AvailabilityZone"] == "us-east-1b" and subnet["DefaultForAz"]
    assert len(security_groups_of(ec2, name)) == 1 and len(key_pairs_of(ec2, name)) == 1
    ok(orch("down", name, env=env))
    assert_nothing_left(ec2, name)
