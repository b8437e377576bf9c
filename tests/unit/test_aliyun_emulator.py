"""The ECS/VPC emulator (tests/sim/aliyun), driven over HTTP by the real alibabacloud SDK."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from tests.sim.aliyun.server import RunningEmulator
from tests.support import ALIYUN_PUBLIC_KEY, require_module

alibaba = require_module("alibabacloud_ecs20140526")

from alibabacloud_ecs20140526 import models  # noqa: E402
from alibabacloud_ecs20140526.client import Client  # noqa: E402
from alibabacloud_tea_openapi.exceptions import ClientException  # noqa: E402
from alibabacloud_tea_openapi.models import Config  # noqa: E402

REGION = "cn-hangzhou"
KEY = ALIYUN_PUBLIC_KEY  # ImportKeyPair takes RSA, DSA and ECDSA keys
ED25519_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGcgkGRrl3Ww7XpmZkn0Eg9Ypw1fbSZL3jA2PyQcbgxT test"
)


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    with RunningEmulator() as running:
        yield running


@pytest.fixture
def sim(emulator: RunningEmulator) -> RunningEmulator:
    emulator.backend.reset()
    emulator.backend.settings.launch_delay_s = 0.0
    emulator.backend.settings.command_delay_s = 0.0
    return emulator


@pytest.fixture
def ecs(sim: RunningEmulator) -> Client:
    config = Config(
        access_key_id="AKID",
        access_key_secret="secret",
        region_id=REGION,
        endpoint=sim.endpoint.removeprefix("http://"),
        protocol="HTTP",
    )
    return Client(config)


def error_of(call: Any) -> ClientException:
    with pytest.raises(ClientException) as caught:
        call()
    return caught.value


def network(ecs: Client, zone: str = "cn-hangzhou-i") -> tuple[str, str, str]:
    """A VPC, a vSwitch in `zone` and a security group: (vpc, vswitch, group)."""
    vpc = ecs.create_vpc(
        models.CreateVpcRequest(region_id=REGION, cidr_block="10.0.0.0/16", vpc_name="t")
    ).body.vpc_id
    vswitch = ecs.create_vswitch(
        models.CreateVSwitchRequest(
            region_id=REGION, vpc_id=vpc, zone_id=zone, cidr_block="10.0.1.0/24"
        )
    ).body.v_switch_id
    group = ecs.create_security_group(
        models.CreateSecurityGroupRequest(region_id=REGION, vpc_id=vpc, security_group_name="g")
    ).body.security_group_id
    return vpc, vswitch, group


def run(ecs: Client, vswitch: str, group: str, **changes: Any) -> list[str]:
    values: dict[str, Any] = dict(
        region_id=REGION,
        instance_type="ecs.gn6i-c4g1.xlarge",
        image_id="ubuntu_22_04_x64_20G_alibase_20241120.vhd",
        v_switch_id=vswitch,
        security_group_ids=[group],
        system_disk=models.RunInstancesRequestSystemDisk(category="cloud_essd", size=100),
        internet_max_bandwidth_out=10,
        tag=[models.RunInstancesRequestTag(key="orch:box", value="b1")],
    )
    values.update(changes)
    body = ecs.run_instances(models.RunInstancesRequest(**values)).body
    return body.instance_id_sets.instance_id_set


def describe(ecs: Client, **filters: Any) -> Any:
    return ecs.describe_instances(models.DescribeInstancesRequest(region_id=REGION, **filters)).body


# ---------------------------------------------------------------------------- instances


def test_run_describe_and_delete_an_instance(ecs, sim):
    sim.backend.settings.launch_delay_s = 0.4
    sim.backend.freeze_clock()  # Pending until the test moves the clock, however slow it runs
    _, vswitch, group = network(ecs)
    [instance_id] = run(ecs, vswitch, group)

    item = describe(ecs, instance_ids=json.dumps([instance_id])).instances.instance[0]
    assert item.status == "Pending"
    assert item.instance_type == "ecs.gn6i-c4g1.xlarge"
    assert (item.cpu, item.memory, item.gpuamount) == (4, 15 * 1024, 1)
    assert item.zone_id == "cn-hangzhou-i"  # the vSwitch's zone
    assert item.security_group_ids.security_group_id == [group]
    assert item.public_ip_address.ip_address  # bandwidth > 0: a public address
    assert {t.tag_key: t.tag_value for t in item.tags.tag} == {"orch:box": "b1"}

    disk = ecs.describe_disks(
        models.DescribeDisksRequest(region_id=REGION, instance_id=instance_id, disk_type="system")
    ).body.disks.disk[0]
    assert (disk.category, disk.size, disk.type) == ("cloud_essd", 100, "system")

    # Still Pending: ECS refuses to release an instance that is being created.
    pending = error_of(
        lambda: ecs.delete_instance(
            models.DeleteInstanceRequest(instance_id=instance_id, force=True)
        )
    )
    assert (pending.code, pending.status_code) == ("IncorrectInstanceStatus.Initializing", 403)
    sim.backend.advance_clock(0.5)
    assert describe(ecs, instance_ids=json.dumps([instance_id])).instances.instance[0].status == (
        "Running"
    )
    running = error_of(
        lambda: ecs.delete_instance(models.DeleteInstanceRequest(instance_id=instance_id))
    )
    assert running.code == "IncorrectInstanceStatus"  # Running needs Force=true
    ecs.delete_instance(models.DeleteInstanceRequest(instance_id=instance_id, force=True))
    assert describe(ecs).total_count == 0
    assert not sim.backend.disks  # the system disk went with it


def test_describe_instances_filters_by_tag_and_pages(ecs):
    _, vswitch, group = network(ecs)
    ids = run(ecs, vswitch, group, amount=12)
    other = run(ecs, vswitch, group, tag=[models.RunInstancesRequestTag(key="orch:box", value="x")])

    tagged = describe(
        ecs,
        tag=[models.DescribeInstancesRequestTag(key="orch:box", value="x")],
    )
    assert [i.instance_id for i in tagged.instances.instance] == other
    any_value = describe(
        ecs, tag=[models.DescribeInstancesRequestTag(key="orch:box")], page_size=50
    )
    assert any_value.total_count == 13

    first = describe(ecs, page_number=1, page_size=5)
    third = describe(ecs, page_number=3, page_size=5)
    assert (first.total_count, len(first.instances.instance), len(third.instances.instance)) == (
        13,
        5,
        3,
    )
    seen, token = [], None
    while True:
        page = describe(ecs, max_results=5, next_token=token)
        seen += [i.instance_id for i in page.instances.instance]
        token = page.next_token
        if not token:
            break
    assert sorted(seen) == sorted(ids + other)


@pytest.mark.parametrize(
    ("changes", "code", "status"),
    [
        ({"instance_type": "ecs.nope.large"}, "InvalidInstanceType.NotFound", 404),
        ({"image_id": "centos_1_x64.vhd"}, "InvalidImageId.NotFound", 404),
        ({"security_group_ids": ["sg-missing"]}, "InvalidSecurityGroupId.NotFound", 404),
        ({"v_switch_id": "vsw-missing"}, "InvalidVSwitchId.NotFound", 404),
        ({"key_pair_name": "nokey"}, "InvalidKeyPair.NotFound", 404),
        (
            {"system_disk": models.RunInstancesRequestSystemDisk(category="fast_disk")},
            "InvalidSystemDiskCategory.ValueNotSupported",
            400,
        ),
        ({"spot_strategy": "SpotWithPriceLimit"}, "MissingParameter", 400),
        (
            {"spot_strategy": "SpotWithPriceLimit", "spot_price_limit": 0.01},
            "InvalidSpotPriceLimit.LowerThanPublicPrice",
            400,
        ),
        ({"auto_release_time": "2026-12-02 21:00"}, "InvalidAutoReleaseTime.Malformed", 400),
        ({"user_data": "#!/bin/sh not base64"}, "InvalidUserData.Base64FormatInvalid", 400),
    ],
)
def test_run_instances_rejects_what_ecs_rejects(ecs, sim, changes, code, status):
    _, vswitch, group = network(ecs)
    error = error_of(lambda: run(ecs, vswitch, group, **changes))
    assert (error.code, error.status_code) == (code, status)
    assert error.request_id  # every error carries a RequestId
    assert not sim.backend.instances


def test_no_stock_is_operation_denied_and_per_market(ecs, sim):
    _, vswitch, group = network(ecs)
    sim.backend.set_stock(REGION, "ecs.gn6i-c4g1.xlarge", "WithoutStock", market="spot")
    error = error_of(lambda: run(ecs, vswitch, group, spot_strategy="SpotAsPriceGo"))
    assert (error.code, error.status_code) == ("OperationDenied.NoStock", 403)
    assert run(ecs, vswitch, group, spot_strategy="NoSpot")  # on-demand still sells


def test_auto_release_time_is_enforced_by_the_cloud(ecs, sim):
    _, vswitch, group = network(ecs)
    now = sim.backend.now()
    too_soon = (now.replace(microsecond=0) + timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert error_of(lambda: run(ecs, vswitch, group, auto_release_time=too_soon)).code == (
        "InvalidAutoReleaseTime.Malformed"
    )
    [instance_id] = run(ecs, vswitch, group)
    later = (now + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:00Z")
    ecs.modify_instance_auto_release_time(
        models.ModifyInstanceAutoReleaseTimeRequest(
            region_id=REGION, instance_id=instance_id, auto_release_time=later
        )
    )
    assert describe(ecs).instances.instance[0].auto_release_time == later
    sim.backend.advance_clock(3 * 3600)
    assert describe(ecs).total_count == 0
    assert sim.backend.released == [instance_id]


# ---------------------------------------------------------------------------- network, groups


def test_security_group_rules_and_dependencies(ecs):
    vpc, vswitch, group = network(ecs)
    permission = models.AuthorizeSecurityGroupRequestPermissions(
        ip_protocol="tcp", port_range="22/22", source_cidr_ip="203.0.113.7/32", priority="1"
    )
    for _ in range(2):  # authorising the same rule twice keeps one rule
        ecs.authorize_security_group(
            models.AuthorizeSecurityGroupRequest(
                region_id=REGION, security_group_id=group, permissions=[permission]
            )
        )
    rules = ecs.describe_security_group_attribute(
        models.DescribeSecurityGroupAttributeRequest(region_id=REGION, security_group_id=group)
    ).body.permissions.permission
    assert [(r.direction, r.ip_protocol, r.port_range, r.source_cidr_ip) for r in rules] == [
        ("ingress", "TCP", "22/22", "203.0.113.7/32")
    ]
    bad = models.AuthorizeSecurityGroupRequestPermissions(
        ip_protocol="tcp", port_range="0/70000", source_cidr_ip="10.0.0.0/8"
    )
    error = error_of(
        lambda: ecs.authorize_security_group(
            models.AuthorizeSecurityGroupRequest(
                region_id=REGION, security_group_id=group, permissions=[bad]
            )
        )
    )
    assert error.code == "InvalidIpPortRange.Malformed"

    [instance_id] = run(ecs, vswitch, group)
    in_use = error_of(
        lambda: ecs.delete_security_group(
            models.DeleteSecurityGroupRequest(region_id=REGION, security_group_id=group)
        )
    )
    assert (in_use.code, in_use.status_code) == ("DependencyViolation", 403)
    has_switch = error_of(
        lambda: ecs.delete_vpc(models.DeleteVpcRequest(region_id=REGION, vpc_id=vpc))
    )
    assert has_switch.code == "DependencyViolation.VSwitch"

    ecs.delete_instance(models.DeleteInstanceRequest(instance_id=instance_id, force=True))
    ecs.revoke_security_group(
        models.RevokeSecurityGroupRequest(
            region_id=REGION,
            security_group_id=group,
            permissions=[
                models.RevokeSecurityGroupRequestPermissions(
                    ip_protocol="tcp",
                    port_range="22/22",
                    source_cidr_ip="203.0.113.7/32",
                    priority="1",
                )
            ],
        )
    )
    ecs.delete_security_group(
        models.DeleteSecurityGroupRequest(region_id=REGION, security_group_id=group)
    )
    ecs.delete_vswitch(models.DeleteVSwitchRequest(region_id=REGION, v_switch_id=vswitch))
    ecs.delete_vpc(models.DeleteVpcRequest(region_id=REGION, vpc_id=vpc))
    gone = error_of(
        lambda: ecs.describe_security_group_attribute(
            models.DescribeSecurityGroupAttributeRequest(region_id=REGION, security_group_id=group)
        )
    )
    assert (gone.code, gone.status_code) == ("InvalidSecurityGroupId.NotFound", 404)


def test_key_pairs(ecs):
    body = ecs.import_key_pair(
        models.ImportKeyPairRequest(region_id=REGION, key_pair_name="k1", public_key_body=KEY)
    ).body
    assert len(body.key_pair_finger_print) == 32
    again = error_of(
        lambda: ecs.import_key_pair(
            models.ImportKeyPairRequest(region_id=REGION, key_pair_name="k1", public_key_body=KEY)
        )
    )
    assert again.code == "KeyPair.AlreadyExist"
    junk = error_of(
        lambda: ecs.import_key_pair(
            models.ImportKeyPairRequest(region_id=REGION, key_pair_name="k2", public_key_body="hi")
        )
    )
    assert junk.code == "InvalidPublicKeyBody.Malformed"
    listed = ecs.describe_key_pairs(models.DescribeKeyPairsRequest(region_id=REGION)).body
    assert [p.key_pair_name for p in listed.key_pairs.key_pair] == ["k1"]
    ecs.delete_key_pairs(models.DeleteKeyPairsRequest(region_id=REGION, key_pair_names='["k1"]'))
    assert (
        ecs.describe_key_pairs(models.DescribeKeyPairsRequest(region_id=REGION)).body.total_count
        == 0
    )


# ---------------------------------------------------------------------------- catalogue


def test_images_zones_stock_and_prices(ecs, sim):
    images = ecs.describe_images(
        models.DescribeImagesRequest(region_id=REGION, image_owner_alias="system", page_size=100)
    ).body.images.image
    ubuntu = [i for i in images if i.image_name.startswith("ubuntu_22_04_x64")]
    assert len(ubuntu) == 2 and ubuntu[0].creation_time > ubuntu[1].creation_time  # newest first
    own = ecs.describe_images(
        models.DescribeImagesRequest(region_id=REGION, image_owner_alias="self")
    ).body
    assert own.total_count == 0

    sim.backend.set_stock(REGION, "ecs.gn7i-c8g1.2xlarge", "WithoutStock", zone="cn-hangzhou-h")
    zones = ecs.describe_zones(models.DescribeZonesRequest(region_id=REGION)).body.zones.zone
    sells = {
        z.zone_id: "ecs.gn7i-c8g1.2xlarge" in z.available_instance_types.instance_types
        for z in zones
    }
    # DescribeZones lists what a zone offers whatever its stock (issue 9): only
    # DescribeAvailableResource and RunInstances tell that zone h is sold out.
    assert sells == {
        "cn-hangzhou-h": True,
        "cn-hangzhou-i": True,
        "cn-hangzhou-j": True,
        "cn-hangzhou-k": True,
    }
    available = ecs.describe_available_resource(
        models.DescribeAvailableResourceRequest(
            region_id=REGION,
            destination_resource="InstanceType",
            instance_type="ecs.gn7i-c8g1.2xlarge",
        )
    ).body.available_zones.available_zone
    status = {
        z.zone_id: z.available_resources.available_resource[0]
        .supported_resources.supported_resource[0]
        .status_category
        for z in available
    }
    assert status["cn-hangzhou-h"] == "WithoutStock" and status["cn-hangzhou-i"] == "WithStock"

    sim.backend.set_price(REGION, "ecs.gn7i-c8g1.2xlarge", on_demand=2.5, spot=0.75)
    price = ecs.describe_price(
        models.DescribePriceRequest(
            region_id=REGION,
            resource_type="instance",
            instance_type="ecs.gn7i-c8g1.2xlarge",
            spot_strategy="SpotAsPriceGo",
            system_disk=models.DescribePriceRequestSystemDisk(category="cloud_essd", size=100),
        )
    ).body.price_info.price
    lines = {d.resource: d.trade_price for d in price.detail_infos.detail_info}
    assert lines["instanceType"] == 0.75
    assert price.trade_price == pytest.approx(0.75 + lines["systemDisk"])
    assert price.currency == "USD"


# ---------------------------------------------------------------------------- cloud assistant


def finished_result(ecs: Any, sim: Any, instance_id: str, content: str) -> Any:
    """RunCommand `content` on `instance_id`, let the emulator's clock pass its run, and
    return its one DescribeInvocationResults entry."""
    invoke_id = ecs.run_command(
        models.RunCommandRequest(
            region_id=REGION,
            type="RunShellScript",
            command_content=content,
            instance_id=[instance_id],
        )
    ).body.invoke_id
    sim.backend.advance_clock(0.4)
    body = ecs.describe_invocation_results(
        models.DescribeInvocationResultsRequest(region_id=REGION, invoke_id=invoke_id)
    ).body
    return body.invocation.invocation_results.invocation_result[0]


def test_run_command_reports_base64_output_after_it_finishes(ecs, sim):
    sim.backend.settings.command_delay_s = 0.3
    sim.backend.freeze_clock()
    _, vswitch, group = network(ecs)
    [instance_id] = run(ecs, vswitch, group, instance_type="ecs.gn7i-c8g1.2xlarge")
    invoke_id = ecs.run_command(
        models.RunCommandRequest(
            region_id=REGION,
            type="RunShellScript",
            command_content=(
                "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits"
            ),
            instance_id=[instance_id],
        )
    ).body.invoke_id

    def result() -> Any:
        body = ecs.describe_invocation_results(
            models.DescribeInvocationResultsRequest(region_id=REGION, invoke_id=invoke_id)
        ).body
        return body.invocation.invocation_results.invocation_result[0]

    assert result().invoke_record_status == "Running"
    sim.backend.advance_clock(0.4)
    done = result()
    assert (done.invoke_record_status, done.invocation_status, done.exit_code) == (
        "Finished",
        "Success",
        0,
    )
    assert base64.b64decode(done.output).decode() == "NVIDIA A10, 23028\n"

    item = finished_result(ecs, sim, instance_id, "rm -rf /")
    assert (item.invoke_record_status, item.invocation_status) == ("Failed", "Failed")
    assert (item.exit_code, item.error_code) == (127, "ExitCodeNonzero")

    sim.backend.add_command_output("systemctl", "", delivery_error="ClientNotRunning")
    item = finished_result(ecs, sim, instance_id, "systemctl is-active sshd")
    assert (item.invoke_record_status, item.invocation_status) == ("Failed", "Aborted")
    assert (item.exit_code, item.error_code, item.output) == (None, "ClientNotRunning", "")


# ---------------------------------------------------------------------------- clock


def test_a_frozen_clock_keeps_an_instance_pending_until_it_is_advanced(ecs, sim):
    sim.backend.settings.launch_delay_s = 30.0
    status, body = raw(f"{sim.endpoint}/_sim/clock", data=json.dumps({"freeze": True}).encode())
    assert status == 200
    frozen = body["now"]
    _, vswitch, group = network(ecs)
    [instance_id] = run(ecs, vswitch, group)
    assert describe(ecs).instances.instance[0].status == "Pending"
    assert sim.backend.summary()["now"] == frozen  # time stands still while requests go on

    status, body = raw(
        f"{sim.endpoint}/_sim/clock", data=json.dumps({"advance_seconds": 30}).encode()
    )
    assert status == 200 and body["now"] > frozen
    advanced = body["now"]
    assert describe(ecs).instances.instance[0].status == "Running"
    ecs.delete_instance(models.DeleteInstanceRequest(instance_id=instance_id, force=True))

    for bad in ({"advance_seconds": -1}, {"freeze": "yes"}, {"rewind": 3}, {}):
        status, body = raw(f"{sim.endpoint}/_sim/clock", data=json.dumps(bad).encode())
        assert (status, body["Code"]) == (400, "InvalidParameter"), bad

    raw(f"{sim.endpoint}/_sim/clock", data=json.dumps({"freeze": False}).encode())
    assert sim.backend.frozen_at is None
    # Thawed, time runs on from where the test left it, not back at the real clock.
    assert sim.backend.now().strftime("%Y-%m-%dT%H:%M:%SZ") >= advanced


def test_wait_for_wakes_up_on_the_api_call_that_makes_it_true(ecs, sim):
    _, vswitch, group = network(ecs)
    assert sim.backend.wait_for(lambda: sim.backend.instances, timeout=0.05) is False
    seen: list[bool] = []
    waiter = threading.Thread(
        target=lambda: seen.append(sim.backend.wait_for(lambda: sim.backend.instances, 30))
    )
    waiter.start()
    run(ecs, vswitch, group)
    waiter.join(timeout=30)
    assert seen == [True]


# ---------------------------------------------------------------------------- spot reclaim


def locks_of(item: Any) -> list[str]:
    return [lock.lock_reason for lock in item.operation_locks.lock_reason]


def test_a_reclaimed_spot_instance_is_locked_stopped_then_released(ecs, sim):
    sim.backend.freeze_clock()
    _, vswitch, group = network(ecs)
    [instance_id] = run(ecs, vswitch, group, spot_strategy="SpotAsPriceGo")
    [neighbour] = run(ecs, vswitch, group, spot_strategy="SpotAsPriceGo")
    item = describe(ecs, instance_ids=json.dumps([instance_id])).instances.instance[0]
    assert (item.status, locks_of(item)) == ("Running", [])

    termination = sim.backend.reclaim_spot(instance_id)
    assert termination == sim.backend.now() + timedelta(seconds=300)  # the 5-minute notice
    item = describe(ecs, instance_ids=json.dumps([instance_id])).instances.instance[0]
    assert (item.status, locks_of(item)) == ("Stopped", ["Recycling"])
    assert [i.instance_id for i in describe(ecs, status="Stopped").instances.instance] == [
        instance_id
    ]
    [seen] = [i for i in sim.backend.summary()["instances"] if i["id"] == instance_id]
    assert seen["lock_reasons"] == ["Recycling"]
    assert seen["spot_termination_time"] == termination.strftime("%Y-%m-%dT%H:%M:%SZ")
    error = error_of(  # a stopped instance runs no command
        lambda: ecs.run_command(
            models.RunCommandRequest(
                region_id=REGION,
                type="RunShellScript",
                command_content="true",
                instance_id=[instance_id],
            )
        )
    )
    assert (error.code, error.status_code) == ("IncorrectInstanceStatus", 403)

    sim.backend.advance_clock(299)
    assert describe(ecs, instance_ids=json.dumps([instance_id])).total_count == 1
    sim.backend.advance_clock(1)
    assert describe(ecs, instance_ids=json.dumps([instance_id])).total_count == 0
    assert sim.backend.released == [instance_id]
    assert not any(d.instance_id == instance_id for d in sim.backend.disks.values())
    item = describe(ecs, instance_ids=json.dumps([neighbour])).instances.instance[0]
    assert (item.status, locks_of(item)) == ("Running", [])  # only the one reclaimed


def test_the_recycling_lock_does_not_refuse_delete_instance(ecs, sim):
    """A reclaimed (Stopped, Recycling-locked) instance is released by DeleteInstance without
    Force, as any Stopped one; no reference names a lock error (models.delete_instance)."""
    sim.backend.freeze_clock()
    _, vswitch, group = network(ecs)
    [instance_id] = run(ecs, vswitch, group, spot_strategy="SpotAsPriceGo")
    sim.backend.reclaim_spot(instance_id)
    ecs.delete_instance(models.DeleteInstanceRequest(instance_id=instance_id))
    assert instance_id not in sim.backend.instances and sim.backend.released == []
    assert not any(d.instance_id == instance_id for d in sim.backend.disks.values())


def test_a_spot_instance_can_stay_running_through_its_notice(ecs, sim):
    """stop_now=False: Running with the Recycling lock until ECS releases it; it still takes
    commands, and DeleteInstance (Force) releases it early, as orch's `down` does."""
    sim.backend.freeze_clock()
    _, vswitch, group = network(ecs)
    [kept, deleted] = [run(ecs, vswitch, group, spot_strategy="SpotAsPriceGo")[0] for _ in "ab"]
    for instance_id in (kept, deleted):
        sim.backend.reclaim_spot(instance_id, stop_now=False)
        item = describe(ecs, instance_ids=json.dumps([instance_id])).instances.instance[0]
        assert (item.status, locks_of(item)) == ("Running", ["Recycling"])
    ecs.delete_instance(models.DeleteInstanceRequest(instance_id=deleted, force=True))
    assert deleted not in sim.backend.instances and sim.backend.released == []
    sim.backend.advance_clock(300)
    assert describe(ecs, instance_ids=json.dumps([kept])).total_count == 0
    assert sim.backend.released == [kept]
    url = f"{sim.endpoint}/_sim/reclaim-spot"
    status, body = raw(url, data=json.dumps({"instance_id": kept, "stop_now": "no"}).encode())
    assert (status, body["Code"]) == (400, "InvalidParameter") and "stop_now" in body["Message"]


def test_reclaim_spot_refuses_what_ecs_would_not_reclaim(ecs, sim):
    sim.backend.settings.launch_delay_s = 30.0
    sim.backend.freeze_clock()
    _, vswitch, group = network(ecs)
    [on_demand] = run(ecs, vswitch, group)
    [spot] = run(ecs, vswitch, group, spot_strategy="SpotWithPriceLimit", spot_price_limit=9.0)
    with pytest.raises(ValueError, match="not a spot instance"):
        sim.backend.reclaim_spot(on_demand)
    with pytest.raises(ValueError, match="no instance 'i-nothere'"):
        sim.backend.reclaim_spot("i-nothere")
    with pytest.raises(ValueError, match="is Pending"):
        sim.backend.reclaim_spot(spot)
    sim.backend.advance_clock(30)
    sim.backend.reclaim_spot(spot)
    with pytest.raises(ValueError, match="already being reclaimed"):
        sim.backend.reclaim_spot(spot)
    item = describe(ecs, instance_ids=json.dumps([on_demand])).instances.instance[0]
    assert (item.status, locks_of(item)) == ("Running", [])


def test_a_stopped_instance_is_released_without_force(ecs, sim):
    _, vswitch, group = network(ecs)
    [instance_id] = run(ecs, vswitch, group, spot_strategy="SpotAsPriceGo")
    sim.backend.reclaim_spot(instance_id)
    ecs.delete_instance(models.DeleteInstanceRequest(instance_id=instance_id))
    assert not sim.backend.instances


def test_reclaim_spot_over_the_admin_api(ecs, sim):
    _, vswitch, group = network(ecs)
    [spot] = run(ecs, vswitch, group, spot_strategy="SpotAsPriceGo")
    [on_demand] = run(ecs, vswitch, group)
    url = f"{sim.endpoint}/_sim/reclaim-spot"
    status, body = raw(url, data=json.dumps({"instance_id": spot}).encode())
    assert status == 200 and body["termination_time"]
    item = describe(ecs, instance_ids=json.dumps([spot])).instances.instance[0]
    assert (item.status, locks_of(item)) == ("Stopped", ["Recycling"])
    status, body = raw(url, data=json.dumps({"instance_id": on_demand}).encode())
    assert (status, body["Code"]) == (400, "InvalidParameter")
    assert "not a spot instance" in body["Message"]
    status, body = raw(url, data=b"{}")
    assert (status, body["Code"]) == (400, "InvalidParameter")


# ---------------------------------------------------------------------------- protocol


def raw(
    url: str, data: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_requests_must_name_an_access_key_and_a_known_action(sim):
    status, body = raw(f"{sim.endpoint}/?Action=DescribeRegions")
    assert (status, body["Code"]) == (400, "MissingAccessKeyId")
    assert body["RequestId"] and body["Message"]
    status, body = raw(f"{sim.endpoint}/?Action=DescribeRegions&AccessKeyId=AK")
    assert status == 200 and {"RequestId", "Regions"} <= set(body)
    status, body = raw(
        f"{sim.endpoint}/",
        data=b"RegionId=cn-hangzhou",
        headers={"x-acs-action": "FlyAway", "x-acs-accesskey-id": "AK"},
    )
    assert (status, body["Code"]) == (404, "InvalidAction.NotFound")


def serve_the_emulator_on_a_free_port() -> tuple[subprocess.Popen, int]:
    """`python -m tests.sim aliyun --port N` on a port picked free. Another process may take
    the port between the pick and the emulator's bind (the suite runs two workers): then the
    emulator is not the listener, and it is started again on a new port, five times at most."""
    from tests.ports import free_port, listens
    from tests.sim.mirror import REPO_ROOT

    for _ in range(5):
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.sim", "aliyun", "--port", str(port)],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert process.stdout is not None
        first = process.stdout.readline()  # its address once it listens, or why it stopped
        if f"http://127.0.0.1:{port}" in first and listens(process.pid, port):
            return process, port
        process.terminate()
        process.wait(timeout=10)
    pytest.fail(f"the emulator did not serve on any of 5 free ports (last said: {first!r})")


def test_module_entry_point_serves_on_the_given_port():
    process, port = serve_the_emulator_on_a_free_port()
    try:
        status, body = raw(f"http://127.0.0.1:{port}/?Action=DescribeRegions&AccessKeyId=AK")
        assert status == 200 and any(r["RegionId"] == REGION for r in body["Regions"]["Region"])
    finally:
        process.terminate()
        process.wait(timeout=10)


# ------------------------------------------------------------------------ issue 9: keys, zones


def test_import_key_pair_refuses_key_types_the_api_does_not_take(ecs, sim):
    # ImportKeyPair takes rsa, dsa, ssh-rsa, ssh-dss and ecdsa keys only.
    error = error_of(
        lambda: ecs.import_key_pair(
            models.ImportKeyPairRequest(
                region_id=REGION, key_pair_name="ed", public_key_body=ED25519_KEY
            )
        )
    )
    assert (error.code, error.status_code) == ("InvalidPublicKeyBody.Malformed", 400)
    assert not sim.backend.key_pairs
    body = ecs.import_key_pair(
        models.ImportKeyPairRequest(region_id=REGION, key_pair_name="rsa", public_key_body=KEY)
    ).body
    assert body.key_pair_name == "rsa"


def test_orch_generates_a_key_the_emulator_accepts(ecs, sim, tmp_path):
    from orchestrator import clouds
    from orchestrator.provision.keys import ensure_keypair

    key_type = clouds.ssh_key_type_of(clouds.get("aliyun"))
    public = ensure_keypair(tmp_path / "key", comment="orch-k", key_type=key_type)
    assert public.startswith("ssh-rsa ")
    assert (tmp_path / "key").stat().st_mode & 0o777 == 0o600
    ecs.import_key_pair(
        models.ImportKeyPairRequest(region_id=REGION, key_pair_name="kp", public_key_body=public)
    )
    assert [name for _, name in sim.backend.key_pairs] == ["kp"]


def test_describe_zones_lists_sold_out_types_stock_check_does_not(ecs, sim, monkeypatch):
    sim.backend.set_stock(REGION, "ecs.gn6i-c4g1.xlarge", "WithoutStock", zone="cn-hangzhou-h")
    zones = ecs.describe_zones(models.DescribeZonesRequest(region_id=REGION)).body.zones.zone
    assert all("ecs.gn6i-c4g1.xlarge" in z.available_instance_types.instance_types for z in zones)
    _orch_env(monkeypatch, sim)
    from orchestrator import clouds

    stock = clouds.get("aliyun").zones_with_stock(REGION, "ecs.gn6i-c4g1.xlarge", False)
    assert stock == ["cn-hangzhou-i", "cn-hangzhou-j", "cn-hangzhou-k"]


def _orch_env(monkeypatch: pytest.MonkeyPatch, sim: RunningEmulator) -> None:
    monkeypatch.setenv("ALIBABA_CLOUD_ENDPOINT_ECS", sim.endpoint)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "AKID")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "secret")


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("Zone.NotOnSale", 403, "capacity"),
        ("OperationDenied.NoStock", 403, "capacity"),
        ("QuotaExceed.ElasticQuota", 403, "quota"),
        ("Throttling", 400, "retryable"),
        ("ServiceUnavailable", 503, "retryable"),
    ],
)
def test_injected_faults_have_real_statuses_and_orch_classifies_them(
    ecs, sim, monkeypatch, code, status, kind
):
    _, vswitch, group = network(ecs, zone="cn-hangzhou-j")
    from alibabacloud_tea_openapi.exceptions import AlibabaCloudException

    sim.backend.inject_fault("RunInstances", code, zone="cn-hangzhou-j")
    with pytest.raises(AlibabaCloudException) as raised:  # 5xx: the SDK's ServerException
        run(ecs, vswitch, group)
    error = raised.value
    assert (error.code, error.status_code) == (code, status)
    assert not sim.backend.instances
    assert run(ecs, vswitch, group)  # injected once: the next call goes through

    # The same code reaching orch (its stock check here) is classified by the Cloud.
    from orchestrator import clouds

    _orch_env(monkeypatch, sim)
    cloud = clouds.get("aliyun")
    sim.backend.inject_fault("DescribeAvailableResource", code)
    with pytest.raises(clouds.CloudError) as caught:
        cloud.zones_with_stock(REGION, "ecs.gn6i-c4g1.xlarge", False)
    assert caught.value.code == code
    assert caught.value.kind.value == kind == cloud.error_kind(code).value
    assert (code in cloud.failover_codes()) == (kind in ("capacity", "quota"))


def test_a_fault_in_another_zone_does_not_fire(ecs, sim):
    _, vswitch, group = network(ecs, zone="cn-hangzhou-i")
    sim.backend.inject_fault("RunInstances", "OperationDenied.NoStock", zone="cn-hangzhou-j")
    assert run(ecs, vswitch, group)
    with pytest.raises(Exception, match="cannot inject"):
        sim.backend.inject_fault("RunInstances", "Made.Up")


def test_auto_release_time_seconds_are_cut_not_rounded(ecs, sim):
    _, vswitch, group = network(ecs)
    now = sim.backend.now()
    moment = (now + timedelta(hours=2)).replace(second=50, microsecond=0)
    text = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    [instance_id] = run(ecs, vswitch, group, auto_release_time=text)
    assert sim.backend.instances[instance_id].auto_release_time == moment.replace(second=0)


def test_spot_prices_differ_by_zone(ecs, sim):
    sim.backend.set_price(REGION, "ecs.gn6i-c4g1.xlarge", 1.0, 0.30)
    sim.backend.set_price(REGION, "ecs.gn6i-c4g1.xlarge", 1.0, 0.45, zone="cn-hangzhou-j")

    def spot(zone: str | None) -> float:
        body = ecs.describe_price(
            models.DescribePriceRequest(
                region_id=REGION,
                instance_type="ecs.gn6i-c4g1.xlarge",
                spot_strategy="SpotAsPriceGo",
                zone_id=zone,
            )
        ).body
        details = body.price_info.price.detail_infos.detail_info
        [line] = [d for d in details if d.resource == "instanceType"]
        return line.trade_price

    assert (spot(None), spot("cn-hangzhou-i"), spot("cn-hangzhou-j")) == (0.30, 0.30, 0.45)
    # A limit above zone i's price but below zone j's launches in i only.
    _, vswitch_j, group_j = network(ecs, zone="cn-hangzhou-j")
    limited = dict(spot_strategy="SpotWithPriceLimit", spot_price_limit=0.4)
    assert error_of(lambda: run(ecs, vswitch_j, group_j, **limited)).code == (
        "InvalidSpotPriceLimit.LowerThanPublicPrice"
    )


def test_refresh_prices_spot_in_the_zone_a_box_would_use(sim, monkeypatch):
    """DescribePrice for spot varies by zone: orch prices the first zone with stock."""
    from orchestrator.clouds.aliyun.prices import refresh_prices

    _orch_env(monkeypatch, sim)
    kind = "ecs.gn6i-c4g1.xlarge"
    sim.backend.set_price(REGION, kind, 1.0, 0.30)
    sim.backend.set_price(REGION, kind, 1.0, 0.41, zone="cn-hangzhou-h")
    sim.backend.set_price(REGION, kind, 1.0, 0.52, zone="cn-hangzhou-i")
    assert refresh_prices([REGION], [kind])[kind][REGION] == {"on_demand": 1.0, "spot": 0.41}
    sim.backend.set_stock(REGION, kind, "WithoutStock", zone="cn-hangzhou-h", market="spot")
    assert refresh_prices([REGION], [kind])[kind][REGION]["spot"] == 0.52
