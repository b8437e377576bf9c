"""AliyunCloud.instance_state: DescribeInstances -> InstanceState, through the real SDK against
the ECS emulator (tests/sim/aliyun), spot reclaim included."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.sim.aliyun.models import MarketRequest
from tests.sim.aliyun.server import RunningEmulator
from tests.support import require_module

require_module("alibabacloud_ecs20140526")

from alibabacloud_ecs20140526 import models  # noqa: E402

from orchestrator import clouds  # noqa: E402
from orchestrator.clouds.aliyun import state  # noqa: E402
from orchestrator.clouds.aliyun.client import ENDPOINT_ENV  # noqa: E402
from orchestrator.clouds.aliyun.errors import AliyunError  # noqa: E402
from orchestrator.clouds.registry import instance_state_of  # noqa: E402
from orchestrator.clouds.values import InstanceState  # noqa: E402

REGION = "cn-hangzhou"


# ------------------------------------------------------------------ mapping (SDK models)


def sdk_item(status: str, *locks: str) -> Any:
    """A DescribeInstances instance model, built from the wire shape as the SDK builds it."""
    wire = {
        "InstanceId": "i-bp1x",
        "Status": status,
        "OperationLocks": {"LockReason": [{"LockReason": lock} for lock in locks]},
    }
    return models.DescribeInstancesResponseBodyInstancesInstance().from_map(wire)


@pytest.mark.parametrize(
    ("status", "locks", "expected"),
    [
        ("Pending", (), InstanceState("pending")),
        ("Starting", (), InstanceState("pending")),
        ("Running", (), InstanceState("running")),
        ("Stopping", (), InstanceState("stopping")),
        ("Stopped", (), InstanceState("stopped")),
        ("Stopped", ("Recycling",), InstanceState("stopped", "Recycling", True)),
        # During the notice the instance may still run: reclaimed all the same.
        ("Running", ("Recycling",), InstanceState("running", "Recycling", True)),
        ("Running", ("recycling",), InstanceState("running", "recycling", True)),
        # Locked for another reason: said, but not a spot reclaim.
        ("Stopped", ("financial",), InstanceState("stopped", "financial", False)),
        ("Stopped", ("security", "Recycling"), InstanceState("stopped", "Recycling", True)),
    ],
)
def test_ecs_statuses_and_locks_map(status, locks, expected):
    assert state.state_of(sdk_item(status, *locks)) == expected


def test_an_answer_without_operation_locks_is_unlocked():
    item = models.DescribeInstancesResponseBodyInstancesInstance().from_map({"Status": "Running"})
    assert state.state_of(item) == InstanceState("running")


def test_an_unknown_status_is_an_error_not_a_guess():
    with pytest.raises(AliyunError, match="unknown instance status 'Deleted'"):
        state.state_of(sdk_item("Deleted"))


# ------------------------------------------------------------------ against the emulator


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    with RunningEmulator() as running:
        yield running


@pytest.fixture
def sim(emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch) -> RunningEmulator:
    emulator.backend.reset()
    emulator.backend.settings.launch_delay_s = 0.0
    emulator.backend.freeze_clock()  # the release happens when the test moves the clock
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "AKID")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "secret")
    monkeypatch.setenv("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true")
    monkeypatch.setenv(ENDPOINT_ENV, emulator.endpoint)
    return emulator


def launch(sim: RunningEmulator, spot: bool) -> str:
    backend = sim.backend
    vpc = backend.create_vpc(REGION, "10.0.0.0/16", "v", "", {})
    vswitch = backend.create_vswitch(REGION, vpc.id, "cn-hangzhou-k", "10.0.0.0/24", "s", "", {})
    group = backend.create_security_group(REGION, vpc.id, "g", "", "normal", {})
    [instance_id] = backend.run_instances(
        region=REGION,
        instance_type="ecs.gn6i-c4g1.xlarge",
        image_id="ubuntu_22_04_x64_20G_alibase_20241120.vhd",
        vswitch_id=vswitch.id,
        security_group_ids=[group.id],
        market=MarketRequest(spot_strategy="SpotAsPriceGo" if spot else "NoSpot"),
    )
    return instance_id


def test_a_reclaimed_spot_instance_is_stopped_recycling_then_missing(sim):
    instance_id = launch(sim, spot=True)
    aliyun = clouds.get("aliyun")

    assert instance_state_of(aliyun, REGION, instance_id) == InstanceState("running")

    sim.backend.reclaim_spot(instance_id)
    reclaimed = instance_state_of(aliyun, REGION, instance_id)
    assert reclaimed == InstanceState("stopped", "Recycling", True)
    assert reclaimed.lost

    sim.backend.advance_clock(sim.backend.settings.spot_release_delay_s - 1)
    assert instance_state_of(aliyun, REGION, instance_id).state == "stopped"
    sim.backend.advance_clock(2)
    assert instance_state_of(aliyun, REGION, instance_id) == InstanceState("missing")
    assert sim.backend.released == [instance_id]


def test_an_unknown_id_is_missing_and_a_neighbour_is_not_taken_for_it(sim):
    launch(sim, spot=False)
    assert state.instance_state(REGION, "i-bp1nothere000000000") == InstanceState("missing")


def test_api_errors_raise_the_cloud_s_errors(sim):
    sim.backend.inject_fault("DescribeInstances", "Throttling")
    with pytest.raises(AliyunError) as caught:
        state.instance_state(REGION, launch(sim, spot=False))
    assert caught.value.code == "Throttling"
