"""Aliyun rendering: RenderRequest -> tfvars (aliyun_vars) and the templates/module wiring."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest

from orchestrator.clouds.aliyun import terraform as aliyun_vars
from orchestrator.errors import UsageError
from orchestrator.provision.render import RenderRequest, render_box, render_hcl
from orchestrator.resources import resource_path
from tests import support

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHj2d4Qe1xq7v0H8t8m5sYJ2m7G6mW1s3gk1qv0QH0aB orch-x"
NOW = datetime(2026, 12, 2, 19, 0, 0, tzinfo=UTC)
# Two hours from the real clock, on a whole minute: tfvars() measures against the real clock.
EXPIRES = (datetime.now(UTC) + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:00Z")


candidate = partial(support.candidate, cloud="aliyun")  # the shared factory, Aliyun defaults


def request(**changes: object) -> RenderRequest:
    values: dict[str, object] = dict(
        name="exp1",
        owner="me@host",
        candidate=candidate(),
        ssh_public_key=KEY,
        ssh_ingress_cidrs=["203.0.113.7/32"],
        user_data="#!/bin/sh\necho hi\n",
        expires_at=EXPIRES,
    )
    values.update(changes)
    return RenderRequest(**values)  # type: ignore[arg-type]


def test_on_demand_box_variables():
    values = aliyun_vars.tfvars(request())
    assert values["region"] == "cn-hangzhou"
    assert values["instance_type"] == "ecs.gn6i-c4g1.xlarge"
    assert values["image_name_regex"] == "^ubuntu_22_04_x64" and values["image_owners"] == "system"
    assert "image_id" not in values
    assert (values["system_disk_category"], values["system_disk_size"]) == ("cloud_essd", 90)
    assert (values["spot_strategy"], values["spot_price_limit"]) == ("NoSpot", None)
    assert values["ssh_user"] == "root"
    assert values["ssh_ingress_cidrs"] == ["203.0.113.7/32"]
    assert values["expires_at"] == EXPIRES
    assert values["auto_release_time"] == EXPIRES  # already on a whole minute, 2 h ahead
    assert values["tags"]["orch:box"] == "exp1" and values["tags"]["orch:managed-by"] == "orch"


@pytest.mark.parametrize(
    ("market", "bid", "strategy", "limit"),
    [
        ("spot", None, "SpotAsPriceGo", None),
        ("spot", 0.61234, "SpotWithPriceLimit", 0.612),  # SpotPriceLimit: 3 decimals
        ("on-demand", 9.0, "NoSpot", None),  # a bid means nothing to an on-demand box
    ],
)
def test_spot_strategy(market, bid, strategy, limit):
    values = aliyun_vars.tfvars(request(candidate=candidate(market=market), spot_max_price=bid))
    assert (values["spot_strategy"], values["spot_price_limit"]) == (strategy, limit)


# 0.0004: SpotPriceLimit has three decimals, so it rounds to 0 (at four it was sent as 0.0004).
@pytest.mark.parametrize("bid", [0.0, -1.0, 0.00001, 0.0004, float("nan"), float("inf")])
def test_a_bid_terraform_would_refuse_is_a_usage_error(bid):
    with pytest.raises(UsageError, match="--max-price"):
        aliyun_vars.tfvars(request(candidate=candidate(market="spot"), spot_max_price=bid))


def test_image_by_id_and_disk_bounds():
    values = aliyun_vars.tfvars(
        request(candidate=candidate(image={"id": "m-bp1abc"}, root_volume_gib=8.5))
    )
    assert values["image_id"] == "m-bp1abc" and "image_name_regex" not in values
    assert values["system_disk_size"] == 20  # ECS minimum
    with pytest.raises(UsageError, match="2048 GiB"):
        aliyun_vars.tfvars(request(candidate=candidate(root_volume_gib=4096)))


@pytest.mark.parametrize(
    ("expires_at", "release"),
    [
        (None, None),
        ("2026-12-02T21:00:00Z", "2026-12-02T21:00:00Z"),  # already on a minute
        ("2026-12-02T21:00:01Z", "2026-12-02T21:01:00Z"),  # rounded up, never earlier
        ("2026-12-02T19:10:00Z", "2026-12-02T19:40:00Z"),  # ECS needs 30+ minutes ahead
        ("2026-12-02T22:00:00+01:00", "2026-12-02T21:00:00Z"),  # any zone in, UTC out
    ],
)
def test_auto_release_time(expires_at, release):
    assert aliyun_vars.auto_release_time(expires_at, now=NOW) == release


def test_auto_release_time_limits():
    with pytest.raises(UsageError, match="3 years"):
        aliyun_vars.auto_release_time("2030-12-02T21:00:00Z", now=NOW)
    with pytest.raises(UsageError, match="time zone"):
        aliyun_vars.auto_release_time("2026-12-02T21:00:00", now=NOW)


def test_subnet_is_refused_for_aliyun():
    with pytest.raises(UsageError, match="--subnet-id"):
        aliyun_vars.tfvars(request(subnet_id="vsw-bp1xyz"))


# ------------------------------------------------------------------ templates and module


def _declared(text: str) -> set[str]:
    return set(re.findall(r'^variable "([^"]+)"', text, flags=re.M))


def test_every_value_is_declared_and_every_wire_reaches_the_module():
    module = resource_path("terraform/modules/aliyun_gpu")
    module_vars = _declared((module / "variables.tf").read_text())
    hcl = render_hcl("aliyun", "local")
    root_vars = _declared(hcl["variables.tf"])
    module_block = hcl["main.tf"].split('module "box" {', 1)[1]
    # argument -> expression; renamed module inputs map the unchanged root variables.
    wired = dict(re.findall(r"^  (\w+)\s+= (.+)$", module_block, flags=re.M))
    wired.pop("source")
    referenced = set(re.findall(r"\bvar\.(\w+)", " ".join(wired.values())))
    assert set(aliyun_vars.tfvars(request())) <= root_vars
    assert set(aliyun_vars.tfvars(request(candidate=candidate(image={"id": "m-1"})))) <= root_vars
    assert set(wired) <= module_vars
    assert referenced <= root_vars
    # Every root variable reaches the module (region too: it tags the box's RAM role).
    assert root_vars - referenced == set()
    outputs = set(re.findall(r'^output "([^"]+)"', (module / "outputs.tf").read_text(), re.M))
    assert set(aliyun_vars.OUTPUTS) <= outputs


def test_module_and_root_pin_the_same_provider_version():
    from tests.sim.alicloud_provider import VERSION

    versions = resource_path("terraform/modules/aliyun_gpu/versions.tf").read_text()
    main = render_hcl("aliyun", "local")["main.tf"]
    for text in (versions, main):
        assert re.search(rf'version\s+=\s+"{re.escape(VERSION)}"', text)
        assert 'source = "aliyun/alicloud"' in text or 'source  = "aliyun/alicloud"' in text


def test_render_box_for_aliyun(tmp_path: Path):
    hostile = '${file("/etc/passwd")}\n"}'
    box = tmp_path / "box"
    render_box(box, request(tags={"note": hostile}, owner=hostile))
    assert (box / "modules" / "aliyun_gpu" / "main.tf").is_file()
    hcl = "".join(p.read_text() for p in box.glob("*.tf"))
    assert hostile not in hcl and 'backend "local"' in hcl
    stored = json.loads((box / "terraform.tfvars.json").read_text())
    assert stored["tags"]["note"] == hostile and stored["owner"] == hostile
    assert 'backend "s3"' in render_hcl("aliyun", "s3")["main.tf"]


# ---------------------------------------------------------------------------- clusters


def test_a_cluster_row_becomes_node_count_and_one_box_stays_as_it_was():
    assert "node_count" not in aliyun_vars.tfvars(request())
    values = aliyun_vars.tfvars(request(candidate=candidate(nodes=2)))
    assert values["node_count"] == 2
    assert {"nodes", "deployment_set_id"} <= set(aliyun_vars.OUTPUTS)


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"nodes": 21}, "at most 20 nodes"),
        ({"nodes": 2, "market": "spot"}, "spot instances in a deployment set"),
    ],
)
def test_clusters_ecs_cannot_make_are_refused_before_rendering(changes, why):
    with pytest.raises(UsageError, match=why):
        aliyun_vars.tfvars(request(candidate=candidate(**changes)))
