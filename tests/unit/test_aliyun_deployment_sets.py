"""The emulator's deployment sets and vCPU quotas (tests/sim/aliyun/models/deployment_sets.py),
driven over HTTP by the real alibabacloud SDK: what ECS refuses, the emulator refuses."""

# The emulator fixtures (emulator, sim, ecs) are shared with test_aliyun_emulator.py, by import.
# ruff: noqa: F811

from __future__ import annotations

import json

import pytest

from tests.support import require_module
from tests.unit.test_aliyun_emulator import (  # noqa: F401 (fixtures)
    REGION,
    describe,
    ecs,
    emulator,
    error_of,
    network,
    run,
    sim,
)

models = require_module("alibabacloud_ecs20140526.models")


def create(ecs, **values):
    request = models.CreateDeploymentSetRequest(region_id=REGION, **values)
    return ecs.create_deployment_set(request).body.deployment_set_id


def sets(ecs, **filters):
    request = models.DescribeDeploymentSetsRequest(region_id=REGION, **filters)
    return ecs.describe_deployment_sets(request).body


def test_a_low_latency_set_holds_instances_and_refuses_deletion_until_empty(ecs, sim):
    ds = create(ecs, deployment_set_name="orch-c1", strategy="LowLatency")
    assert ds.startswith("ds-")
    _, vswitch, group = network(ecs)
    ids = run(ecs, vswitch, group, deployment_set_id=ds, amount=2)

    [item] = sets(ecs, deployment_set_ids=json.dumps([ds])).deployment_sets.deployment_set
    assert (item.deployment_set_name, item.strategy, item.instance_amount) == (
        "orch-c1",
        "LowLatency",
        2,
    )
    assert sorted(item.instance_ids.instance_id) == sorted(ids)
    listed = describe(ecs, instance_ids=json.dumps(ids)).instances.instance
    assert {i.deployment_set_id for i in listed} == {ds}

    busy = error_of(
        lambda: ecs.delete_deployment_set(
            models.DeleteDeploymentSetRequest(region_id=REGION, deployment_set_id=ds)
        )
    )
    assert (busy.code, busy.status_code) == ("DependencyViolation.NotEmpty", 403)
    for instance_id in ids:
        ecs.delete_instance(models.DeleteInstanceRequest(instance_id=instance_id, force=True))
    ecs.delete_deployment_set(
        models.DeleteDeploymentSetRequest(region_id=REGION, deployment_set_id=ds)
    )
    assert sets(ecs).total_count == 0


@pytest.mark.parametrize(
    ("values", "code"),
    [
        ({"strategy": "Cluster"}, "InvalidParameter.Strategy"),
        ({"deployment_set_name": "1starts-with-a-digit"}, "InvalidDeploymentSetName.Malformed"),
        ({"deployment_set_name": "x"}, "InvalidDeploymentSetName.Malformed"),
        ({"description": "https://example.com"}, "InvalidDescription.Malformed"),
    ],
)
def test_create_deployment_set_refuses_what_ecs_refuses(ecs, values, code):
    error = error_of(lambda: create(ecs, **values))
    assert (error.code, error.status_code) == (code, 400)


def test_default_strategy_is_availability(ecs):
    ds = create(ecs, deployment_set_name="plain")
    [item] = sets(ecs, deployment_set_ids=json.dumps([ds])).deployment_sets.deployment_set
    assert item.strategy == "Availability"


def test_run_instances_checks_the_set_exists_and_has_room(ecs, sim):
    _, vswitch, group = network(ecs)
    missing = error_of(lambda: run(ecs, vswitch, group, deployment_set_id="ds-bp1nothere"))
    assert (missing.code, missing.status_code) == ("InvalidDeploymentSetId.NotFound", 404)

    ds = create(ecs, strategy="LowLatency")
    run(ecs, vswitch, group, deployment_set_id=ds, amount=20)  # 20 per zone: full
    full = error_of(lambda: run(ecs, vswitch, group, deployment_set_id=ds))
    assert (full.code, full.status_code) == ("DeploymentSet.InstanceLimitExceeded", 403)
    assert len(sim.backend.instances) == 20  # nothing launched by the refused call


def test_delete_unknown_or_missing_deployment_set(ecs):
    unknown = error_of(
        lambda: ecs.delete_deployment_set(
            models.DeleteDeploymentSetRequest(region_id=REGION, deployment_set_id="ds-bp1none")
        )
    )
    assert (unknown.code, unknown.status_code) == ("InvalidDeploymentSetId.NotFound", 404)


def test_account_attributes_report_vcpu_quota_and_use(ecs, sim):
    sim.backend.set_vcpu_quota(REGION, spot=False, limit=12)
    _, vswitch, group = network(ecs)
    run(ecs, vswitch, group)  # 4 vCPUs pay-as-you-go
    body = ecs.describe_account_attributes(
        models.DescribeAccountAttributesRequest(
            region_id=REGION,
            attribute_name=[
                "max-postpaid-instance-vcpu-count",
                "used-postpaid-instance-vcpu-count",
            ],
        )
    ).body
    values = {
        item.attribute_name: item.attribute_values.value_item[0].value
        for item in body.account_attribute_items.account_attribute_item
    }
    assert values == {
        "max-postpaid-instance-vcpu-count": "12",
        "used-postpaid-instance-vcpu-count": "4",
    }


def used(ecs) -> dict[str, str]:
    """The two used-* counts of DescribeAccountAttributes, as the emulator answers them."""
    request = models.DescribeAccountAttributesRequest(
        region_id=REGION,
        attribute_name=["used-postpaid-instance-vcpu-count", "used-spot-instance-vcpu-count"],
    )
    body = ecs.describe_account_attributes(request).body
    return {
        item.attribute_name: item.attribute_values.value_item[0].value
        for item in body.account_attribute_items.account_attribute_item
    }


def test_used_vcpus_count_the_market_of_each_instance_until_it_is_released(ecs, sim):
    _, vswitch, group = network(ecs)
    [kept] = run(ecs, vswitch, group)  # 4 vCPUs pay-as-you-go
    [gone] = run(ecs, vswitch, group, amount=1)
    run(ecs, vswitch, group, spot_strategy="SpotAsPriceGo")  # 4 vCPUs spot
    assert used(ecs) == {
        "used-postpaid-instance-vcpu-count": "8",
        "used-spot-instance-vcpu-count": "4",
    }
    ecs.delete_instance(models.DeleteInstanceRequest(instance_id=gone, force=True))
    assert used(ecs)["used-postpaid-instance-vcpu-count"] == "4"
    assert kept in sim.backend.instances


def test_account_attributes_take_one_to_eight_names(ecs, sim):
    def ask(names: list[str]) -> object:
        request = models.DescribeAccountAttributesRequest(region_id=REGION, attribute_name=names)
        return ecs.describe_account_attributes(request)

    # "AttributeName.N ... Valid values of N: 1 to 8" (the API reference): orch asks for 2.
    too_many = error_of(lambda: ask(["used-spot-instance-vcpu-count"] * 9))
    assert too_many.code == "InvalidParameter" and too_many.status_code == 400
    assert ask(["max-postpaid-instance-vcpu-count", "used-postpaid-instance-vcpu-count"])
