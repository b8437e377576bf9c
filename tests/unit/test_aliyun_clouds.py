"""orchestrator.clouds.aliyun against the ECS emulator, through the real SDK over HTTP."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.sim.aliyun.server import RunningEmulator
from tests.support import ALIYUN_PUBLIC_KEY, require_module

require_module("alibabacloud_ecs20140526")

from orchestrator.clouds import aliyun  # noqa: E402
from orchestrator.errors import UsageError  # noqa: E402

REGION = "cn-hangzhou"


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    with RunningEmulator() as running:
        yield running


@pytest.fixture
def sim(emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch) -> RunningEmulator:
    emulator.backend.reset()
    emulator.backend.settings.launch_delay_s = 0.0
    emulator.backend.settings.command_delay_s = 0.2
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "AKID")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "secret")
    monkeypatch.setenv("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true")
    monkeypatch.setenv(aliyun.ENDPOINT_ENV, emulator.endpoint)
    return emulator


def launch(sim: RunningEmulator, instance_type: str, amount: int = 1, **tags: str) -> list[str]:
    backend = sim.backend
    vpc = backend.create_vpc(REGION, "10.0.0.0/16", "v", "", {})
    vswitch = backend.create_vswitch(REGION, vpc.id, "cn-hangzhou-k", "10.0.0.0/24", "s", "", {})
    group = backend.create_security_group(REGION, vpc.id, "g", "", "normal", {})
    return backend.run_instances(
        region=REGION,
        instance_type=instance_type,
        image_id="ubuntu_22_04_x64_20G_alibase_20241120.vhd",
        vswitch_id=vswitch.id,
        security_group_ids=[group.id],
        amount=amount,
        tags=tags,
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", None),
        ("ecs.cn-hangzhou.aliyuncs.com", ("ecs.cn-hangzhou.aliyuncs.com", "HTTPS")),
        ("http://127.0.0.1:8950", ("127.0.0.1:8950", "HTTP")),
        ("https://ecs-proxy.example.com/", ("ecs-proxy.example.com", "HTTPS")),
    ],
)
def test_endpoint_override(monkeypatch, raw, expected):
    monkeypatch.setenv(aliyun.ENDPOINT_ENV, raw)
    assert aliyun.endpoint_config() == expected


def test_bad_endpoint_is_a_usage_error(monkeypatch):
    monkeypatch.setenv(aliyun.ENDPOINT_ENV, "ftp://x y")
    with pytest.raises(UsageError):
        aliyun.endpoint_config()


def test_find_image_picks_the_newest_match(sim):
    image = aliyun.find_image(REGION, r"^ubuntu_22_04_x64")
    assert image.id == "ubuntu_22_04_x64_20G_alibase_20241120.vhd"
    with pytest.raises(aliyun.OrchError, match="no system image"):
        aliyun.find_image(REGION, r"^windows_2099")


def test_check_stock_lists_zones_and_raises_capacity_error(sim):
    instance_type = "ecs.gn6i-c4g1.xlarge"
    sim.backend.set_stock(REGION, instance_type, "WithoutStock", zone="cn-hangzhou-h")
    sim.backend.set_stock(REGION, instance_type, "ClosedWithStock", zone="cn-hangzhou-i")
    zones = aliyun.check_stock(REGION, instance_type, spot=False)
    # Open zones first, then "closed but with stock left"; the sold-out zone is left out.
    assert zones == ["cn-hangzhou-j", "cn-hangzhou-k", "cn-hangzhou-i"]
    sim.backend.set_stock(REGION, instance_type, "WithoutStock", market="spot")
    with pytest.raises(aliyun.CapacityError) as caught:
        aliyun.check_stock(REGION, instance_type, spot=True)
    assert caught.value.code == "OperationDenied.NoStock"


def test_describe_price_and_refresh_prices(sim):
    sim.backend.set_price(REGION, "ecs.gn7i-c8g1.2xlarge", on_demand=1.91, spot=0.44)
    assert aliyun.describe_price(REGION, "ecs.gn7i-c8g1.2xlarge", spot=False) == 1.91
    assert aliyun.describe_price(REGION, "ecs.gn7i-c8g1.2xlarge", spot=True) == 0.44
    table = aliyun.refresh_prices([REGION], ["ecs.gn7i-c8g1.2xlarge", "ecs.gn99-unknown.large"])
    assert table == {
        "ecs.gn7i-c8g1.2xlarge": {REGION: {"on_demand": 1.91, "spot": 0.44}},
        "ecs.gn99-unknown.large": {REGION: {"on_demand": None, "spot": None}},
    }


def test_list_tagged_instances_reads_every_page(sim):
    mine = launch(sim, "ecs.gn6i-c4g1.xlarge", amount=100, **{"orch:owner": "me"})
    mine += launch(sim, "ecs.gn6i-c4g1.xlarge", amount=5, **{"orch:owner": "me", "orch:box": "b"})
    launch(sim, "ecs.gn6i-c4g1.xlarge", amount=3, **{"orch:owner": "someone-else"})
    found = aliyun.list_tagged_instances(REGION, {"orch:owner": "me"})
    assert sorted(i.id for i in found) == sorted(mine)
    boxes = aliyun.list_tagged_instances(REGION, {"orch:box": None})
    assert len(boxes) == 5 and all(i.tags["orch:box"] == "b" for i in boxes)


def test_list_tagged_key_pairs_reads_every_page(sim):
    """DescribeKeyPairs pages by number (50 a page): 120 pairs take three pages."""
    mine = {f"orch-kp-{n:03d}" for n in range(120)}
    for name in mine:
        sim.backend.import_key_pair(REGION, name, ALIYUN_PUBLIC_KEY, {"orch:owner": "me"})
    sim.backend.import_key_pair(REGION, "other-kp", ALIYUN_PUBLIC_KEY, {"orch:owner": "you"})
    found = aliyun.list_tagged_key_pairs(REGION, {"orch:owner": "me"})
    assert sorted(k.id for k in found) == sorted(mine)
    assert all(k.kind == "key_pair" and k.tags == {"orch:owner": "me"} for k in found)


def test_release_instance_is_idempotent(sim):
    [instance_id] = launch(sim, "ecs.gn6i-c4g1.xlarge")
    aliyun.release_instance(REGION, instance_id)
    aliyun.release_instance(REGION, instance_id)  # already gone: not an error
    assert not sim.backend.instances


def test_run_command_polls_and_decodes_output(sim):
    [instance_id] = launch(sim, "ecs.gn6i-c4g1.xlarge")
    result = aliyun.run_command(
        REGION,
        instance_id,
        "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits",
        poll_s=0.1,
    )
    assert (result.exit_code, result.output, result.status) == (0, "Tesla T4, 15360\n", "Success")
    missing = aliyun.run_command
    with pytest.raises(aliyun.AliyunError) as caught:
        missing(REGION, "i-nothere", "true", poll_s=0.1)
    assert caught.value.code == "InvalidInstanceId.NotFound"


def test_run_command_returns_a_failing_commands_exit_code_without_waiting_out_the_timeout(sim):
    """A non-zero exit ends the invocation as InvokeRecordStatus Failed: its exit code and
    output are the answer (a failing GPU check), not a timeout half a minute later."""
    [instance_id] = launch(sim, "ecs.gn6i-c4g1.xlarge")
    sim.backend.add_command_output("gpu-self-test", "GPU 0: fell off the bus\n", exit_code=3)
    result = aliyun.run_command(REGION, instance_id, "gpu-self-test", timeout_s=1, poll_s=0.05)
    assert (result.exit_code, result.output, result.status) == (
        3,
        "GPU 0: fell off the bus\n",
        "Failed",
    )


def test_a_command_the_agent_never_got_is_unreachable_with_the_clouds_reason(sim):
    """Aborted (ClientNotRunning: the agent is not up yet) is a box not answering yet, which
    callers retry, and it is told at once rather than after the timeout."""
    from orchestrator.clouds.aliyun.agent import CloudAssistantTransport
    from orchestrator.clouds.base import Unreachable

    [instance_id] = launch(sim, "ecs.gn6i-c4g1.xlarge")
    sim.backend.add_command_output("nvidia-smi", "", delivery_error="ClientNotRunning")
    transport = CloudAssistantTransport(instance_id, REGION)
    with pytest.raises(Unreachable) as caught:
        transport.run("nvidia-smi -L", timeout=1)
    message = caught.value.one_line()
    assert "Aborted" in message and "ClientNotRunning" in message
    assert "not running on the instance" in message


def test_unreachable_endpoint_is_an_orch_error(monkeypatch):
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "AKID")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "secret")
    monkeypatch.setenv(aliyun.ENDPOINT_ENV, "http://127.0.0.1:9")  # discard port: refused
    with pytest.raises(aliyun.AliyunError) as caught:
        aliyun.describe_price(REGION, "ecs.gn6i-c4g1.xlarge", spot=False)
    assert "DescribePrice failed" in caught.value.one_line()


def test_importing_the_module_does_not_load_the_sdk():
    code = (
        "import sys, orchestrator.clouds.aliyun; "
        "print(any(m.startswith('alibabacloud') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_deployment_sets_are_found_by_name_with_their_box_tags_and_deleted_after_nodes(
    sim, monkeypatch
):
    """Deployment sets carry no tags: orch's (orch-<box>, "orch cluster ..." description) are
    listed under their box with the tags of the box's other resources; a user's set is not."""
    from orchestrator.clouds.aliyun.cleanup import delete_tagged
    from orchestrator.clouds.aliyun.tags import list_tagged_resources

    monkeypatch.setenv("ALIBABA_CLOUD_ENDPOINT_VPC", sim.endpoint)
    monkeypatch.setenv("ALIBABA_CLOUD_ENDPOINT_RAM", sim.endpoint)
    backend = sim.backend
    mine = backend.create_deployment_set(
        REGION, "orch-b1", "orch cluster b1: 2 nodes", "LowLatency"
    )
    backend.create_deployment_set(REGION, "orch-b2", "someone's own set", "LowLatency")
    backend.create_deployment_set(REGION, "mine", "orch cluster mine", "Availability")
    tags = {"orch:box": "b1", "orch:expires-at": "2026-12-05T10:00:00Z"}
    vpc = backend.create_vpc(REGION, "10.0.0.0/16", "v", "", {})
    vswitch = backend.create_vswitch(REGION, vpc.id, "cn-hangzhou-k", "10.0.0.0/24", "s", "", {})
    group = backend.create_security_group(REGION, vpc.id, "g", "", "normal", tags)
    backend.run_instances(
        region=REGION,
        instance_type="ecs.gn6i-c4g1.xlarge",
        image_id="ubuntu_22_04_x64_20G_alibase_20241120.vhd",
        vswitch_id=vswitch.id,
        security_group_ids=[group.id],
        amount=2,
        tags=tags,
        deployment_set_id=mine.id,
    )

    everything = list_tagged_resources(REGION, {"orch:box": None})
    (found,) = [r for r in everything if r.kind == "deployment_set"]
    assert (found.id, found.box, found.tags["orch:expires-at"]) == (
        mine.id,
        "b1",
        "2026-12-05T10:00:00Z",
    )
    assert [r.kind for r in list_tagged_resources(REGION, {"orch:box": "b2"})] == []

    # Nodes first, then the set (ECS refuses to delete a set that still holds instances).
    box = list_tagged_resources(REGION, {"orch:box": "b1"})
    delete_tagged(REGION, [r for r in box if r.kind in ("deployment_set", "instance")])
    assert mine.id not in backend.deployment_sets and not backend.instances
    assert len(backend.deployment_sets) == 2  # the others are not orch's


def test_an_instance_still_being_created_is_released_once_ecs_lets_it_go(sim, monkeypatch):
    """DeleteInstance refuses an instance in its first moments (IncorrectInstanceStatus.
    Initializing, as the emulator answers for a Pending one): `down` and `sweep` of a box whose
    `up` was cut short wait for it, as the provider's own delete does, instead of failing with
    the instance left running. Each pause between tries moves the emulated clock on."""
    import orchestrator.clouds.base as base
    from orchestrator.clouds.aliyun.cleanup import delete_tagged
    from orchestrator.clouds.aliyun.tags import list_tagged_instances

    backend = sim.backend
    backend.freeze_clock()
    backend.settings.launch_delay_s = 30.0  # Pending for 30 emulated seconds
    launch(sim, "ecs.gn6i-c4g1.xlarge", **{"orch:box": "b1"})
    found = list_tagged_instances(REGION, {"orch:box": "b1"})
    assert [i.state for i in found] == ["Pending"]
    paused: list[float] = []

    class Clock:  # base.retry_while's `time`: pausing moves the emulator's clock instead
        monotonic = staticmethod(lambda: sum(paused))

        @staticmethod
        def sleep(seconds: float) -> None:
            paused.append(seconds)
            backend.advance_clock(seconds)

    monkeypatch.setattr(base, "time", Clock)

    delete_tagged(REGION, found)

    assert not backend.instances
    assert 30 <= sum(paused) < 60
