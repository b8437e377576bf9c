"""`orch sweep` against moto_server (boto3 over HTTP) with hundreds of tagged instances.

Regions used here (ca-central-1, eu-north-1, sa-east-1; one set per test) are used by no other
suite or test, so the shared moto
server's other contents cannot change what the sweeper finds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests import support
from tests.support import require

pytestmark = pytest.mark.e2e

REGION = "ca-central-1"
OTHER_REGION = "eu-north-1"
TABLE_REGION = "sa-east-1"
AMI = "ami-1e749f67"  # served by moto by default
PAST = "2021-06-01T00:00:00Z"
FUTURE = "2099-01-01T00:00:00Z"
PUBLIC_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKn0Jrp2lK/puazuJtOAswdqZ9EaaIaScLQ/19IU1Juf orch-test"
)


@pytest.fixture
def env(moto_server: str, tmp_path: Path) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ORCH_"))}
    environment.update(
        AWS_ENDPOINT_URL=moto_server,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_REGION=REGION,
        ORCH_HOME=str(tmp_path / "orch-home"),
    )
    return environment


def ec2_client(env: dict[str, str], region: str):
    import boto3

    return boto3.client(
        "ec2",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        region_name=region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def tags(box: str | None, expires: str | None) -> list[dict[str, str]]:
    result = [{"Key": "Name", "Value": box or "not-orch"}]
    if box is not None:
        result += [{"Key": "orch:box", "Value": box}, {"Key": "orch:owner", "Value": "ci"}]
    if expires is not None:
        result.append({"Key": "orch:expires-at", "Value": expires})
    return result


class World:
    """What the test created, to compare with what survives."""

    def __init__(self) -> None:
        self.instances: dict[str, set[str]] = {"expired": set(), "live": set(), "other": set()}
        self.groups: dict[str, set[str]] = {"expired": set(), "live": set()}
        self.keys: dict[str, set[str]] = {"expired": set(), "live": set()}


def make_box(ec2, world: World, box: str, expires: str, count: int, fate: str, *, extras: bool):
    """`count` instances of one box; with extras, its own security group and key pair."""
    spec = [{"ResourceType": "instance", "Tags": tags(box, expires)}]
    kwargs = {}
    if extras:
        group = ec2.create_security_group(
            GroupName=f"orch-{box}-sg",
            Description=f"orch box {box}",
            TagSpecifications=[{"ResourceType": "security-group", "Tags": tags(box, expires)}],
        )["GroupId"]
        key = ec2.import_key_pair(
            KeyName=f"orch-{box}-key",
            PublicKeyMaterial=PUBLIC_KEY.encode(),
            TagSpecifications=[{"ResourceType": "key-pair", "Tags": tags(box, expires)}],
        )["KeyPairId"]
        world.groups[fate].add(group)
        world.keys[fate].add(key)
        kwargs = {"SecurityGroupIds": [group], "KeyName": f"orch-{box}-key"}
    if count:
        reservation = ec2.run_instances(
            ImageId=AMI,
            InstanceType="g5.xlarge",
            MinCount=count,
            MaxCount=count,
            TagSpecifications=spec,
            **kwargs,
        )
        world.instances[fate].update(i["InstanceId"] for i in reservation["Instances"])


@pytest.fixture
def world(env) -> World:
    ec2 = ec2_client(env, REGION)
    world = World()
    # 300 instances: 150 in 15 expired boxes, 130 in 13 live boxes, 20 with no orch tags.
    for n in range(15):
        make_box(ec2, world, f"old-{n}", PAST, 10, "expired", extras=n < 6)
    for n in range(13):
        make_box(ec2, world, f"new-{n}", FUTURE, 10, "live", extras=n < 4)
    reservation = ec2.run_instances(
        ImageId=AMI,
        InstanceType="t3.micro",
        MinCount=20,
        MaxCount=20,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags(None, None)}],
    )
    world.instances["other"].update(i["InstanceId"] for i in reservation["Instances"])
    # A box whose instance the in-guest timer already terminated: its SG and key pair remain.
    make_box(ec2, world, "orphan", PAST, 0, "expired", extras=True)
    # A box without an expiry is never swept.
    make_box(ec2, world, "forever", "", 2, "live", extras=True)
    # One expired box in a second region.
    make_box(ec2_client(env, OTHER_REGION), World(), "elsewhere", PAST, 1, "expired", extras=False)
    return world


def orch(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def live_instances(ec2) -> set[str]:
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running", "stopped"]}]
    )
    return {i["InstanceId"] for p in pages for r in p["Reservations"] for i in r["Instances"]}


def security_groups(ec2) -> set[str]:
    return {g["GroupId"] for g in ec2.describe_security_groups()["SecurityGroups"]}


def key_pairs(ec2) -> set[str]:
    return {k["KeyPairId"] for k in ec2.describe_key_pairs()["KeyPairs"]}


def save_local_box(name: str, region: str, expires: str):
    """A local record for a box, as `orch up` leaves it."""
    from orchestrator.provision.boxes import Box, box_directory

    candidate = support.candidate(
        "g5.xlarge", region=region, price_per_hour=1.0, samples_per_s=1.0, hours=1.0, cost=1.0,
        memory_per_gpu_bytes=1, memory_fraction=0.5, image={"id": AMI}, root_volume_gib=100,
    )  # fmt: skip
    box = Box(name, box_directory(name), "aws", region, candidate, "up",
              "2021-05-31T00:00:00Z", expires, {"instance_id": "i-0"}, "ci", None)  # fmt: skip
    box.save()
    return box


def test_sweep_destroys_exactly_the_expired_boxes(env, world, monkeypatch):
    monkeypatch.setenv("ORCH_HOME", env["ORCH_HOME"])
    save_local_box("old-3", REGION, PAST)
    save_local_box("new-3", REGION, FUTURE)
    ec2 = ec2_client(env, REGION)
    groups_before, keys_before = security_groups(ec2), key_pairs(ec2)
    everything = set().union(*world.instances.values())
    assert everything <= live_instances(ec2) and len(everything) == 300 + 2

    # Dry run: reports, touches nothing.
    dry = orch(env, "sweep", "--cloud", "aws", "--region", REGION, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report["counts"] == {"would-destroy": 16, "kept": 14}
    assert live_instances(ec2) >= everything and security_groups(ec2) == groups_before

    result = orch(
        env, "sweep", "--cloud", "aws", "--region", REGION, "--region", OTHER_REGION, "--json"
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["counts"] == {"destroyed": 17, "kept": 14}

    survivors = live_instances(ec2)
    assert survivors.isdisjoint(world.instances["expired"])
    assert world.instances["live"] | world.instances["other"] <= survivors
    assert security_groups(ec2) == groups_before - world.groups["expired"]
    assert world.groups["live"] <= security_groups(ec2)
    assert key_pairs(ec2) == keys_before - world.keys["expired"]
    assert live_instances(ec2_client(env, OTHER_REGION)) == set()

    swept = {b["box"]: b for b in report["boxes"] if b["action"] == "destroyed"}
    assert set(swept) == {f"old-{n}" for n in range(15)} | {"orphan", "elsewhere"}
    assert {r["kind"] for r in swept["old-0"]["resources"]} == {
        "instance", "security_group", "key_pair",
    }  # fmt: skip
    assert swept["old-3"]["local_record"] == "marked-destroyed"

    from orchestrator.provision.boxes import load_box

    assert load_box("old-3").state == "destroyed"
    assert "orch sweep" in (load_box("old-3").error or "")
    assert load_box("new-3").state == "up"

    # Nothing left to do the second time.
    again = orch(env, "sweep", "--cloud", "aws", "--region", REGION, "--json")
    assert json.loads(again.stdout)["counts"] == {"kept": 14}


def test_sweep_table_output_and_usage_errors(env):
    ec2 = ec2_client(env, TABLE_REGION)
    make_box(ec2, World(), "stale", PAST, 1, "expired", extras=True)
    make_box(ec2, World(), "fresh", FUTURE, 1, "live", extras=False)
    result = orch(env, "sweep", "--cloud", "aws", "--region", TABLE_REGION, "--dry-run")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-1] == "dry run: 1 kept, 1 would-destroy"
    (stale,) = [line for line in lines if " stale " in line]
    assert stale.startswith("would-destroy") and "security_group sg-" in stale
    assert "key_pair key-" in stale
    bad = orch(env, "sweep", "--cloud", "gcp")
    assert bad.returncode == 2 and bad.stderr.startswith("orch: error:")


# ------------------------------------------------------------------ Aliyun (emulator)

ALIYUN_REGION = "cn-hangzhou"
ALIYUN_TYPE = "ecs.gn6i-c4g1.xlarge"


@pytest.fixture
def aliyun(tmp_path: Path):
    """The Aliyun emulator (tests/sim) on a loopback port, and an env for orch against it."""
    try:
        from tests.sim.aliyun.data import SYSTEM_IMAGES
        from tests.sim.aliyun.server import RunningEmulator
    except ImportError as exc:
        require(False, f"the Aliyun emulator (tests/sim/aliyun): {exc}")
        raise
    emulator = RunningEmulator().start()
    emulator.backend.settings.launch_delay_s = 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ALIBABA_", "ORCH_"))}
    env.update(
        ALIBABA_CLOUD_ENDPOINT_ECS=emulator.endpoint,
        ALIBABA_CLOUD_ENDPOINT_VPC=emulator.endpoint,
        ALIBABA_CLOUD_ENDPOINT_RAM=emulator.endpoint,
        ALIBABA_CLOUD_ACCESS_KEY_ID="test",
        ALIBABA_CLOUD_ACCESS_KEY_SECRET="test",
        ORCH_HOME=str(tmp_path / "orch-home"),
    )
    image = next(i.image_id for i in SYSTEM_IMAGES if "ubuntu_22_04" in i.image_id)
    yield emulator, env, image
    emulator.stop()


def aliyun_box(
    backend, image: str, box: str, expires: str, count: int, *, shared_vswitch=None, cluster=False
) -> dict:
    """A box as the aliyun_gpu module builds it: its own tagged VPC and vSwitch (or a user's
    untagged vSwitch), a security group, a key pair and `count` instances, all tagged; with
    `cluster`, the instances in a LowLatency deployment set (untagged, named orch-BOX).

    Set-up goes straight into the emulator's backend; the sweeper then uses the SDK over HTTP.
    """
    from tests.sim.aliyun.data import zones_of

    labels = {"orch:box": box, "orch:owner": "ci", "orch:expires-at": expires}
    network: dict[str, str] = {}
    vswitch = shared_vswitch
    if vswitch is None:
        vpc = backend.create_vpc(ALIYUN_REGION, "10.0.0.0/16", f"orch-{box}", "", labels)
        zone = zones_of(ALIYUN_REGION)[0]
        vswitch = backend.create_vswitch(
            ALIYUN_REGION, vpc.id, zone, "10.0.1.0/24", f"orch-{box}", "", labels
        )
        network = {"vpc": vpc.id, "vswitch": vswitch.id}
    group = backend.create_security_group(
        ALIYUN_REGION, vswitch.vpc_id, f"orch-{box}", "orch box", "normal", labels
    )
    key = backend.import_key_pair(ALIYUN_REGION, f"orch-{box}", support.ALIYUN_PUBLIC_KEY, labels)
    if not count:
        return {"group": group.id, "key": key.name, "instances": set(), **network}
    if cluster:
        ds = backend.create_deployment_set(
            ALIYUN_REGION, f"orch-{box}", f"orch cluster {box}: {count} nodes", "LowLatency"
        )
        network["deployment_set"] = ds.id
    ids = backend.run_instances(
        region=ALIYUN_REGION,
        instance_type=ALIYUN_TYPE,
        image_id=image,
        vswitch_id=vswitch.id,
        security_group_ids=[group.id],
        key_pair_name=key.name,
        amount=count,
        tags=labels,
        deployment_set_id=network.get("deployment_set", ""),
    )
    return {"group": group.id, "key": key.name, "instances": set(ids), **network}


def test_sweep_aliyun_releases_expired_boxes(aliyun):
    emulator, env, image = aliyun
    backend = emulator.backend
    from tests.sim.aliyun.data import zones_of

    # A user's network, untagged (`--vswitch-id`): boxes in it are swept, the network is not.
    user_vpc = backend.create_vpc(ALIYUN_REGION, "10.9.0.0/16", "team-net", "", {})
    user_vswitch = backend.create_vswitch(
        ALIYUN_REGION, user_vpc.id, zones_of(ALIYUN_REGION)[0], "10.9.1.0/24", "team", "", {}
    )
    old = [aliyun_box(backend, image, f"old-{n}", PAST, 2, cluster=n == 0) for n in range(3)]
    old.append(aliyun_box(backend, image, "old-shared", PAST, 1, shared_vswitch=user_vswitch))
    # The in-guest timer already powered this one off and ECS released it: its network,
    # group and key are what is left.
    old.append(aliyun_box(backend, image, "old-orphan", PAST, 0))
    new = [aliyun_box(backend, image, f"new-{n}", FUTURE, 2 - n, cluster=n == 0) for n in range(2)]
    new.append(aliyun_box(backend, image, "new-shared", FUTURE, 1, shared_vswitch=user_vswitch))
    assert [len(b["instances"]) for b in old + new] == [2, 2, 2, 1, 0, 2, 1, 1]

    dry = orch(env, "sweep", "--cloud", "aliyun", "--region", ALIYUN_REGION, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["counts"] == {"would-destroy": 5, "kept": 3}
    assert {v for b in old if (v := b.get("vpc"))} <= set(backend.vpcs)

    result = orch(env, "sweep", "--cloud", "aliyun", "--region", ALIYUN_REGION, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["counts"] == {"destroyed": 5, "kept": 3}
    swept = {b["box"]: b for b in report["boxes"] if b["action"] == "destroyed"}
    assert [r["kind"] for r in swept["old-0"]["resources"]] == [
        "instance", "instance", "security_group", "deployment_set", "key_pair", "vswitch", "vpc",
    ]  # fmt: skip
    # A cluster's deployment set (untagged, found by name) goes with its expired box only.
    assert set(backend.deployment_sets) == {new[0]["deployment_set"]}

    instances = {i.id for i in backend.list_instances(ALIYUN_REGION)}
    groups = set(backend.security_groups)
    keys = {name for (_, name) in backend.key_pairs}
    vpcs, vswitches = set(backend.vpcs), set(backend.vswitches)
    for box in old:
        assert instances.isdisjoint(box["instances"])
        assert box["group"] not in groups and box["key"] not in keys
        assert box.get("vpc") not in vpcs and box.get("vswitch") not in vswitches
    for box in new:
        assert box["instances"] <= instances
        assert box["group"] in groups and box["key"] in keys
        assert box.get("vpc", user_vpc.id) in vpcs
        assert box.get("vswitch", user_vswitch.id) in vswitches
    # The user's network outlives the expired box that used it; nothing else is left over.
    assert vpcs == {user_vpc.id} | {b["vpc"] for b in new if "vpc" in b}
    assert vswitches == {user_vswitch.id} | {b["vswitch"] for b in new if "vswitch" in b}

    again = orch(env, "sweep", "--cloud", "aliyun", "--region", ALIYUN_REGION, "--json")
    assert json.loads(again.stdout)["counts"] == {"kept": 3}


def test_aliyun_helpers_page_filter_and_wait_out_dependencies(aliyun, monkeypatch):
    """The public helpers the sweeper uses, in-process, against the emulator over HTTP."""
    emulator, env, _ = aliyun
    for key, value in env.items():
        if key.startswith("ALIBABA_CLOUD_"):
            monkeypatch.setenv(key, value)
    from orchestrator.clouds import aliyun as api
    from orchestrator.sweep import retry_while_blocked
    from tests.sim.aliyun.data import zones_of

    backend = emulator.backend
    zone = zones_of(ALIYUN_REGION)[0]
    for n in range(60):  # more than one page (DescribeVpcs returns at most 50)
        labels = {"orch:box": f"b-{n}"}
        vpc = backend.create_vpc(ALIYUN_REGION, "10.0.0.0/16", f"v{n}", "", labels)
        backend.create_vswitch(ALIYUN_REGION, vpc.id, zone, "10.0.1.0/24", f"s{n}", "", labels)
    backend.create_vpc(ALIYUN_REGION, "10.0.0.0/16", "untagged", "", {})
    assert len(api.list_tagged_vpcs(ALIYUN_REGION, {"orch:box": None})) == 60
    (seven,) = api.list_tagged_vpcs(ALIYUN_REGION, {"orch:box": "b-7"})
    assert (seven.kind, seven.name, seven.tags) == ("vpc", "v7", {"orch:box": "b-7"})
    switches = api.list_tagged_vswitches(ALIYUN_REGION, {"orch:box": None})
    assert len(switches) == 60 and {s.vpc_id for s in switches} == {
        v.id for v in backend.vpcs.values() if v.tags
    }
    (switch,) = [s for s in switches if s.vpc_id == seven.id]

    # Blocked for good: the API's error comes back once the retry window has passed.
    with pytest.raises(api.AliyunError) as caught:
        retry_while_blocked(lambda: api.delete_vpc(ALIYUN_REGION, seven.id), 0.5, 0.1)
    assert caught.value.code == "DependencyViolation.VSwitch"
    # Blocked for a while: the retry outlasts the blocker.
    timer = threading.Timer(0.5, backend.delete_vswitch, (ALIYUN_REGION, switch.id))
    timer.start()
    retry_while_blocked(lambda: api.delete_vpc(ALIYUN_REGION, seven.id), 30, 0.2)
    timer.join()
    assert seven.id not in backend.vpcs
    # What is already gone is not an error; other errors are not retried.
    api.delete_vpc(ALIYUN_REGION, seven.id)
    api.delete_vswitch(ALIYUN_REGION, switch.id)
    api.delete_security_group(ALIYUN_REGION, "sg-0000000000000000000")
    started = time.monotonic()
    with pytest.raises(api.AliyunError) as caught:
        retry_while_blocked(lambda: api.list_tagged_vpcs("Not A Region", {}), 30, 0.2)
    # Not retried: a retry would run to its 30 s window (the bound leaves a loaded machine room).
    assert caught.value.code == "InvalidRegionId.NotFound" and time.monotonic() - started < 25
