"""ECS deployment sets (CreateDeploymentSet, DescribeDeploymentSets, DeleteDeploymentSet) and
DescribeAccountAttributes' vCPU quotas. Rules and sources: models/deployment_sets.py; the
response shapes are alibabacloud_ecs20140526's DescribeDeploymentSetsResponseBody and
DescribeAccountAttributesResponseBody."""

from __future__ import annotations

from typing import Any

from tests.sim.aliyun.models import AliyunBackend, SimError, fmt_time, invalid
from tests.sim.aliyun.models.deployment_sets import STRATEGIES, VCPU_ATTRIBUTES
from tests.sim.aliyun.responses.params import (
    Params,
    indexed,
    integer,
    json_list,
    paginate,
    region_of,
)


def create_deployment_set(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    group_count = params.get("GroupCount")
    ds = backend.create_deployment_set(
        region_of(params),
        name=params.get("DeploymentSetName") or "",
        description=params.get("Description") or "",
        strategy=params.get("Strategy") or "",
        group_count=integer(params, "GroupCount", 3) if group_count else None,
        on_unable_to_redeploy=params.get("OnUnableToRedeployFailedInstance") or "",
    )
    return {"DeploymentSetId": ds.id}


def describe_deployment_sets(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = backend.check_region(region_of(params))
    ids = json_list(params, "DeploymentSetIds")
    if ids is not None and len(ids) > 100:  # "A maximum of 100 deployment set IDs"
        raise invalid("The specified parameter DeploymentSetIds is not valid.")
    strategy = params.get("Strategy")
    if strategy and strategy not in STRATEGIES:
        raise invalid("The specified parameter Strategy is not valid", "InvalidParameter.Strategy")
    with backend.lock:
        sets = sorted(
            (d for d in backend.deployment_sets.values() if d.region == region),
            key=lambda d: d.created_at,
        )
        if ids is not None:
            sets = [d for d in sets if d.id in ids]
        if params.get("DeploymentSetName"):
            sets = [d for d in sets if d.name == params["DeploymentSetName"]]
        if strategy:
            sets = [d for d in sets if d.strategy == strategy]
        page, meta = paginate(sets, params, max_size=50)
        items = [_shape(backend, d) for d in page]
    return {**meta, "RegionId": region, "DeploymentSets": {"DeploymentSet": items}}


def _shape(backend: AliyunBackend, ds: Any) -> dict[str, Any]:
    members = backend.deployment_set_members(ds.id)
    return {
        "DeploymentSetId": ds.id,
        "DeploymentSetName": ds.name,
        "DeploymentSetDescription": ds.description,
        "Strategy": ds.strategy,
        "DeploymentStrategy": ds.strategy,
        "GroupCount": ds.group_count,
        "InstanceAmount": len(members),
        "InstanceIds": {"InstanceId": members},
        "CreationTime": fmt_time(ds.created_at),
        "Domain": "Default",
        "Granularity": "Host",
    }


def delete_deployment_set(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    backend.delete_deployment_set(region_of(params), params.get("DeploymentSetId") or "")
    return {}


def describe_account_attributes(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    """The vCPU attributes only (the ones orch reads); an unknown name is refused rather than
    answered with a made-up value."""
    region = backend.check_region(region_of(params))
    names = indexed(params, "AttributeName") or list(VCPU_ATTRIBUTES)
    if len(names) > 8:  # "Valid values of N: 1 to 8"
        raise invalid("The specified parameter AttributeName is not valid.")
    items = []
    for name in names:
        if name not in VCPU_ATTRIBUTES:
            raise SimError(
                "InvalidParameter",
                f"the emulator answers only {', '.join(VCPU_ATTRIBUTES)} (asked {name})",
            )
        charge = "PostPaid"
        value = backend.account_vcpus(region, name)
        items.append(
            {
                "AttributeName": name,
                "AttributeValues": {
                    "ValueItem": [{"Value": str(value), "Count": 1, "InstanceChargeType": charge}]
                },
            }
        )
    return {"AccountAttributeItems": {"AccountAttributeItem": items}}
