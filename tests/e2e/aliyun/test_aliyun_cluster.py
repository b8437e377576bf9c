"""A cluster on Alibaba Cloud (issue 24), end to end: orch as a subprocess, real Terraform core,
the aliyun_gpu module and the alicloud stand-in provider against the ECS emulator.

- `orch up` of 2 nodes: one zone, one LowLatency deployment set holding both, each node tagged
  with its rank and reachable at its own address; then `orch down`, through Terraform or, with
  a state Terraform cannot read, through the cloud's listing (every node and the untagged
  deployment set, found by name);
- the vCPU quota (DescribeAccountAttributes): a cluster the account cannot hold is refused
  before any call that creates anything, naming the quota and the number to request.
(The rendered plan of a cluster: tests/e2e/aliyun/test_aliyun_module.py.)
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests import support
from tests.e2e.aliyun.test_aliyun_lifecycle import CIDR, REGION, instances, leftovers
from tests.support import failed_line, ok, plan_file

pytestmark = pytest.mark.e2e

candidate = partial(
    support.candidate,
    "ecs.gn6i-c4g1.xlarge",
    cloud="aliyun",
    region=REGION,
    price_per_hour=1.2,
    samples_per_s=50.0,
    hours=1.0,
    cost=2.4,
    memory_per_gpu_bytes=2**30,
    memory_fraction=0.5,
    root_volume_gib=120,
)


def deployment_sets(ecs: Any) -> list[Any]:
    from alibabacloud_ecs20140526 import models

    request = models.DescribeDeploymentSetsRequest(region_id=REGION, page_size=50)
    body = ecs.describe_deployment_sets(request).body
    return list(body.deployment_sets.deployment_set or [])


@pytest.mark.parametrize("broken_state", [False, True], ids=["terraform", "cloud-truth"])
def test_two_node_cluster_up_then_down_leaves_nothing(aliyun_orch, ecs, tmp_path, broken_state):
    name = "ali-cluster"
    plan = plan_file(tmp_path, candidate(nodes=2))
    up = aliyun_orch(
        "up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--no-check", "--ttl", "2h",
        "--json",
    )  # fmt: skip
    box = json.loads(ok(up).stdout)
    nodes = json.loads((Path(box["box_dir"]) / "box.json").read_text())["outputs"]["nodes"]
    assert [n["index"] for n in nodes] == [0, 1]
    assert box["instance_id"] == nodes[0]["instance_id"]  # the plain outputs are rank 0's
    assert all(n["public_ip"] for n in nodes)  # each node reachable at its own address

    running = {i.instance_id: i for i in instances(ecs, name)}
    assert sorted(running) == sorted(n["instance_id"] for n in nodes)
    assert len({i.zone_id for i in running.values()}) == 1
    (ds,) = deployment_sets(ecs)
    assert (ds.strategy, ds.deployment_set_name, ds.instance_amount) == (
        "LowLatency",
        f"orch-{name}",
        2,
    )
    assert {i.deployment_set_id for i in running.values()} == {ds.deployment_set_id}
    for node in nodes:
        tags = {t.tag_key: t.tag_value for t in running[node["instance_id"]].tags.tag}
        assert (tags["orch:node"], tags["orch:cluster"]) == (str(node["index"]), name)

    if broken_state:  # Terraform cannot destroy: `down` deletes what the cloud lists
        (Path(box["box_dir"]) / "terraform.tfstate").write_text("{ not a state")
    result = ok(aliyun_orch("down", name))
    assert ("deleting by tag" in result.stderr) == broken_state
    assert leftovers(ecs) == {}
    assert deployment_sets(ecs) == []


def test_cluster_beyond_the_vcpu_quota_is_refused_before_anything_exists(
    aliyun, aliyun_orch, ecs, tmp_path
):
    aliyun.backend.set_vcpu_quota(REGION, spot=False, limit=4)  # one gn6i-c4g1.xlarge
    plan = plan_file(tmp_path, candidate(nodes=2))
    result = aliyun_orch(
        "up", "--plan", plan, "--name", "ali-quota", "--ssh-cidr", CIDR, "--no-check"
    )
    line = failed_line(result)
    assert "max-postpaid-instance-vcpu-count" in line and "request 8" in line and "is 4" in line
    assert aliyun.backend.resource_count() == 0
    assert "DescribeAccountAttributes" in aliyun.backend.request_log
    assert not {"RunInstances", "CreateDeploymentSet", "CreateVpc"} & set(
        aliyun.backend.request_log
    )


def test_instances_already_running_make_a_cluster_that_fits_the_bare_quota_refused(
    aliyun, aliyun_orch, ecs, tmp_path
):
    """2 x gn6i-c4g1.xlarge (8 vCPUs) fits the account's 10 pay-as-you-go vCPUs, but one of
    them already runs (4 in use; the spot one counts under the spot quota): refused before any
    call that creates anything, asking for 4 + 8."""
    from tests.unit.test_aliyun_emulator import network, run

    aliyun.backend.set_vcpu_quota(REGION, spot=False, limit=10)
    _, vswitch, group = network(ecs)
    run(ecs, vswitch, group)
    run(ecs, vswitch, group, spot_strategy="SpotAsPriceGo")
    count, asked = aliyun.backend.resource_count(), len(aliyun.backend.request_log)
    plan = plan_file(tmp_path, candidate(nodes=2))
    result = aliyun_orch(
        "up", "--plan", plan, "--name", "ali-quota-in-use", "--ssh-cidr", CIDR, "--no-check"
    )
    line = failed_line(result)
    assert (
        f"2 x ecs.gn6i-c4g1.xlarge on-demand in {REGION} needs 8 vCPUs; ECS pay-as-you-go"
        " instance vCPUs (max-postpaid-instance-vcpu-count) is 10 with 4 in use: request 12 or"
        " more"
    ) in line
    assert aliyun.backend.resource_count() == count
    calls = aliyun.backend.request_log[asked:]
    assert "DescribeAccountAttributes" in calls
    assert not {"RunInstances", "CreateDeploymentSet", "CreateVpc"} & set(calls)
