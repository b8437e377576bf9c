"""User strings reach Terraform verbatim through terraform.tfvars.json, never as HCL.

Renders a real box module with hostile tag values and owner, runs `terraform validate` and
`terraform plan` (real core, real hashicorp/aws provider, moto for the data sources) and
reads the planned values back with `terraform show -json`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.plan import Candidate
from orchestrator.provision.render import RenderRequest, render_box
from orchestrator.provision.terraform import Terraform
from tests.support import candidate

pytestmark = pytest.mark.e2e

HOSTILE = [
    '${jsonencode("interpolated")}',
    "%{ if true }directive%{ endif }",
    'a "quoted" value',
    "back\\slash \\n not a newline",
    "two\nlines",
    '"\n}\nresource "null_resource" "x" {}\n#',
    "$${already-escaped}",
    "unicode: ü ✓",
]
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHj2d4Qe1xq7v0H8t8m5sYJ2m7G6mW1s3gk1qv0QH0aB t"


def _candidate(moto_ami: str) -> Candidate:
    return candidate(
        "g4dn.xlarge",
        price_per_hour=0.526,
        samples_per_s=1.0,
        hours=1.0,
        cost=0.53,
        memory_per_gpu_bytes=1,
        memory_fraction=0.5,
        image={"id": moto_ami},
        root_volume_gib=100,
    )


@pytest.fixture
def terraform_env(aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for key in [k for k in list(os.environ) if k.startswith(("AWS_", "TF_"))]:
        monkeypatch.delenv(key)
    for key, value in aws_env.items():
        monkeypatch.setenv(key, value)
    return aws_env


def _planned(terraform: Terraform, directory: Path) -> dict[str, Any]:
    result = terraform.run(["plan", "-input=false", "-no-color", "-out=tfplan"])
    assert result.returncode == 0, result.stdout + result.stderr
    shown = terraform.run(["show", "-json", "tfplan"])
    assert shown.returncode == 0, shown.stderr
    plan = json.loads(shown.stdout)
    resources = plan["planned_values"]["root_module"]["child_modules"][0]["resources"]
    return {r["address"].removeprefix("module.box."): r["values"] for r in resources}


def test_hostile_values_arrive_verbatim(terraform_env, moto_ami, tmp_path):
    tags = {f"k{i}": value for i, value in enumerate(HOSTILE)}
    owner = HOSTILE[0] + HOSTILE[4]
    request = RenderRequest(
        name="inject",
        owner=owner,
        candidate=_candidate(moto_ami),
        ssh_public_key=PUBLIC_KEY,
        ssh_ingress_cidrs=["192.0.2.1/32"],
        user_data="#!/bin/sh\necho '${not_a_reference}' %{ nor a directive }\n",
        expires_at="2026-12-02T21:00:00Z",
        tags=tags,
    )
    directory = tmp_path / "box"
    render_box(directory, request)
    hcl = "".join((directory / f).read_text() for f in ("main.tf", "variables.tf", "outputs.tf"))
    for value in [*HOSTILE, owner]:
        assert value not in hcl

    terraform = Terraform(directory, env={"TF_VAR_aws_skip_checks": "true"})
    terraform.init()
    validated = terraform.run(["validate", "-no-color"])
    assert validated.returncode == 0, validated.stdout + validated.stderr

    planned = _planned(terraform, directory)
    expected = {
        **tags,
        "Name": "inject",
        "orch:box": "inject",
        "orch:owner": owner,
        "orch:expires-at": "2026-12-02T21:00:00Z",
    }
    assert planned["aws_instance.this[0]"]["tags"] == expected
    assert planned["aws_instance.this[0]"]["tags_all"] == {**expected, "orch:managed-by": "orch"}
    assert planned["aws_key_pair.this"]["tags"] == expected
    assert planned["aws_security_group.this"]["tags"] == expected
    assert planned["aws_instance.this[0]"]["root_block_device"][0]["tags"] == expected
    assert planned["aws_security_group.this"]["ingress"][0]["cidr_blocks"] == ["192.0.2.1/32"]


def test_module_refuses_world_ssh_even_if_orch_were_bypassed(terraform_env, moto_ami, tmp_path):
    """Defence in depth: the module's own validation rejects 0.0.0.0/0 without the opt-in."""
    request = RenderRequest(
        name="world",
        owner="t",
        candidate=_candidate(moto_ami),
        ssh_public_key=PUBLIC_KEY,
        ssh_ingress_cidrs=["0.0.0.0/0"],
    )
    directory = tmp_path / "box"
    render_box(directory, request)
    terraform = Terraform(directory, env={"TF_VAR_aws_skip_checks": "true"})
    terraform.init()
    result = terraform.run(["plan", "-input=false", "-no-color"])
    assert result.returncode != 0
    assert "allow_world_ssh" in result.stdout + result.stderr
