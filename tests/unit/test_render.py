"""Rendering a box root module: fixed HCL (golden files) + every value in tfvars JSON.

Regenerate the golden files after an intended template change with
    UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_render.py
and review the diff.
"""

from __future__ import annotations

import json
import os
import re
from functools import partial
from pathlib import Path

import pytest

from orchestrator.clouds import registry as cloud_registry
from orchestrator.clouds.aws.terraform import tfvars
from orchestrator.errors import OrchError, UsageError
from orchestrator.provision import render
from orchestrator.provision.render import RenderRequest, render_box, render_hcl
from orchestrator.resources import resource_path
from tests import support

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHj2d4Qe1xq7v0H8t8m5sYJ2m7G6mW1s3gk1qv0QH0aB orch-x"
HOSTILE = [
    '${jsonencode("x")}',
    "%{ if true }y%{ endif }",
    'say "hi"',
    "back\\slash",
    "two\nlines",
    '"\n}\nresource "null_resource" "x" {}\n#',
]


# The shared factory, with this file's region, image and memory (the golden files hold them).
candidate = partial(
    support.candidate,
    region="eu-west-1",
    memory_per_gpu_bytes=1,
    image={"ssm_parameter": "/aws/service/deeplearning/ami/x86_64/pytorch/latest/ami-id"},
)


def request(**changes: object) -> RenderRequest:
    values: dict[str, object] = dict(
        name="exp1",
        owner="me@host",
        candidate=candidate(),
        ssh_public_key=KEY,
        ssh_ingress_cidrs=["203.0.113.7/32"],
        user_data="#!/bin/sh\necho hi\n",
        expires_at="2026-12-02T21:00:00Z",
    )
    values.update(changes)
    return RenderRequest(**values)  # type: ignore[arg-type]


# One golden root module per cloud; main.tf holds BACKEND_MARK where each backend kind's block
# (golden/<cloud>/backends/<kind>.tf) goes.
BACKEND_MARK = "@BACKEND@\n"
BACKEND_BLOCK = re.compile(r'(?m)^(  #[^\n]*\n)?  backend "[a-z0-9]+" \{\n(    [^\n]*\n)*  \}\n')


def golden_files(cloud: str, backend: str) -> dict[str, Path]:
    """Rendered file name -> its golden file (main.tf: the shared one, backend block apart)."""
    folder = GOLDEN / cloud
    return {n: folder / n for n in ("main.tf", "variables.tf", "outputs.tf")} | {
        "backend": folder / "backends" / f"{backend}.tf"
    }


def golden_text(cloud: str, backend: str, name: str) -> str:
    files = golden_files(cloud, backend)
    text = files[name].read_text()
    if name == "main.tf":
        text = text.replace(BACKEND_MARK, files["backend"].read_text())
    return text


def update_golden(cloud: str, backend: str, rendered: dict[str, str]) -> None:
    files = golden_files(cloud, backend)
    for name, text in rendered.items():
        if name == "main.tf":
            block = BACKEND_BLOCK.search(text)
            assert block, "main.tf has no backend block"
            files["backend"].parent.mkdir(parents=True, exist_ok=True)
            files["backend"].write_text(block.group(0))
            text = text[: block.start()] + BACKEND_MARK + text[block.end() :]
        files[name].parent.mkdir(parents=True, exist_ok=True)
        files[name].write_text(text)


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_rendered_hcl_matches_golden_files(backend):
    rendered = render_hcl("aws", backend)
    if os.environ.get("UPDATE_GOLDEN"):
        update_golden("aws", backend, rendered)
    for name, text in rendered.items():
        golden = golden_files("aws", backend)[name]
        expected = golden_text("aws", backend, name)
        assert text == expected, f"{golden} differs (UPDATE_GOLDEN=1 to refresh)"


def test_backend_blocks():
    local = render_hcl("aws", "local")["main.tf"]
    remote = render_hcl("aws", "s3")["main.tf"]
    assert 'backend "local"' in local and 'backend "s3"' not in local
    assert 'backend "s3"' in remote and "use_lockfile = true" in remote
    assert 'source = "./modules/aws_gpu"' in local


def test_every_module_input_is_wired():
    """Each module variable is passed from root variables (renamed inputs map old root names)."""
    module_vars = Path(resource_path("terraform/modules/aws_gpu")) / "variables.tf"
    names = re.findall(r'^variable "([^"]+)"', module_vars.read_text(), flags=re.M)
    main = render_hcl("aws", "local")["main.tf"]
    variables = render_hcl("aws", "local")["variables.tf"]
    root_vars = set(re.findall(r'^variable "([^"]+)"', variables, flags=re.M))
    block = main.split('module "box" {', 1)[1]
    arguments = dict(re.findall(r"^  (\w+)\s+= (.+)$", block, flags=re.M))
    arguments.pop("source")
    # Knobs orch leaves at the module's (secure) default: gp3, encrypted.
    assert set(names) - set(arguments) == {
        "root_volume_type",
        "root_volume_iops",
        "root_volume_encrypted",
    }
    assert set(arguments) <= set(names)
    referenced = set(re.findall(r"\bvar\.(\w+)", " ".join(arguments.values())))
    assert referenced <= root_vars
    # The provider takes the rest; every tfvars key still reaches Terraform.
    assert root_vars - referenced == {"region", "aws_skip_checks", "default_tags"}
    assert set(tfvars(request())) <= root_vars


def test_tfvars_for_an_ssm_image_on_demand():
    values = tfvars(request())
    assert values["region"] == "eu-west-1"
    assert values["instance_type"] == "g5.xlarge"
    assert values["image_source"] == "ssm_parameter"
    assert values["ami_ssm_parameter"].endswith("/ami-id")
    assert values["root_volume_gib"] == 150
    assert values["market"] == "on-demand" and "spot_max_price" not in values
    assert values["ssh_ingress_cidrs"] == ["203.0.113.7/32"]
    assert values["allow_world_ssh"] is False
    assert values["default_tags"] == {
        "orch:box": "exp1",
        "orch:owner": "me@host",
        "orch:expires-at": "2026-12-02T21:00:00Z",
        "orch:managed-by": "orch",
    }


def test_tfvars_for_spot_with_a_bid_and_an_ami_id():
    values = tfvars(
        request(
            candidate=candidate(market="spot", image={"id": "ami-0123456789abcdef0"}),
            spot_max_price=3.5,
            subnet_id="subnet-0abc1234",
        )
    )
    assert values["market"] == "spot" and values["spot_max_price"] == "3.5"
    assert values["image_source"] == "id" and values["ami_id"] == "ami-0123456789abcdef0"
    assert values["subnet_id"] == "subnet-0abc1234"


def test_tfvars_for_a_name_filter_image():
    image = {"name_regex": "^Deep Learning.*PyTorch", "owners": "amazon, 123456789012"}
    values = tfvars(request(candidate=candidate(image=image)))
    assert values["image_source"] == "name_filter"
    assert values["ami_name_regex"] == "^Deep Learning.*PyTorch"
    assert values["ami_owners"] == ["amazon", "123456789012"]


def test_an_image_without_a_query_is_a_usage_error():
    with pytest.raises(UsageError, match="names no AMI"):
        tfvars(request(candidate=candidate(image={"owners": "amazon"})))


def test_render_box_writes_a_self_contained_module(tmp_path):
    written = render_box(tmp_path / "box", request())
    box = tmp_path / "box"
    assert set(written) == {
        "main.tf",
        "variables.tf",
        "outputs.tf",
        "terraform.tfvars.json",
        "modules",
    }
    for name in ("main.tf", "variables.tf", "outputs.tf", "versions.tf"):
        assert (box / "modules" / "aws_gpu" / name).is_file()
    assert json.loads((box / "terraform.tfvars.json").read_text()) == tfvars(request())


def test_rerender_replaces_the_module_copy(tmp_path):
    box = tmp_path / "box"
    render_box(box, request())
    stale = box / "modules" / "aws_gpu" / "stale.tf"
    stale.write_text("# from an older orch")
    (box / "terraform.tfstate").write_text("{}")
    render_box(box, request())
    assert not stale.exists()
    assert (box / "terraform.tfstate").exists()  # Terraform's data is left alone


def test_user_values_never_reach_hcl(tmp_path):
    tags = {f"k{i}": value for i, value in enumerate(HOSTILE)}
    req = request(owner=HOSTILE[0], tags=tags, user_data=HOSTILE[5])
    render_box(tmp_path / "box", req)
    hcl = "".join(p.read_text() for p in (tmp_path / "box").glob("*.tf"))
    for value in HOSTILE:
        assert value not in hcl
    stored = json.loads((tmp_path / "box" / "terraform.tfvars.json").read_text())
    assert stored["tags"] == tags  # verbatim after the JSON round trip
    assert stored["owner"] == HOSTILE[0]
    assert stored["user_data"] == HOSTILE[5]


def test_unknown_cloud():
    with pytest.raises(UsageError, match="unknown cloud"):
        render_hcl("gcp", "local")


def test_a_cloud_without_its_mapping_module_is_a_clear_error(monkeypatch):
    """Each cloud's variables come from its own package (Aliyun: clouds/aliyun/terraform.py),
    found through the registry."""
    assert type(cloud_registry.get("aliyun")).__module__ == "orchestrator.clouds.aliyun.cloud"
    monkeypatch.setitem(cloud_registry._entries, "aliyun", "orchestrator.provision.nope:Cloud")
    monkeypatch.delitem(cloud_registry._loaded, "aliyun")
    with pytest.raises(OrchError, match="cannot provision aliyun boxes yet"):
        render.cloud_tfvars(request(candidate=candidate(cloud="aliyun")))


def test_runtime_env_follows_aws_endpoint_url(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    assert render.cloud_runtime_env("aws") == {}
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:5000")
    assert render.cloud_runtime_env("aws") == {"TF_VAR_aws_skip_checks": "true"}


def test_tags_iam_refuses_are_usage_errors_when_the_box_gets_its_own_role():
    # The module's role and instance profile carry the box's tags (aws_gpu/iam.tf), and IAM tags
    # allow only letters, digits, spaces and _ . : / = + - @ (IAM API Reference, Tag): refused
    # here, before the record, the key and Terraform, not by CreateRole mid-apply.
    from orchestrator.clouds.identity import BoxIdentity

    role = BoxIdentity(agent=True)
    with pytest.raises(UsageError, match="--tag 'team'.*IAM"):
        tfvars(request(tags={"team": "R&D"}, identity=role))
    with pytest.raises(UsageError, match="--tag 'a,b'"):
        tfvars(request(tags={"a,b": "x"}, identity=role))
    with pytest.raises(UsageError, match="ORCH_OWNER 'ci#42'"):
        tfvars(request(owner="ci#42", identity=role))
    fine = {"Équipe": "Forschung und Entwicklung: ÄÖÜ/42 +=@_.-"}
    assert tfvars(request(tags=fine, identity=role))["tags"] == fine
    # No role of its own (none, or an existing profile): EC2 takes any character.
    assert tfvars(request(tags={"team": "R&D"}))["tags"] == {"team": "R&D"}
    existing = BoxIdentity(existing="my-profile")
    assert tfvars(request(tags={"team": "R&D"}, identity=existing))["tags"] == {"team": "R&D"}
