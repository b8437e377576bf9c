"""Aliyun: a cluster's deployment set, found and deleted without tags.

CreateDeploymentSet takes no Tag parameter and DescribeDeploymentSets returns none
(alibabacloud_ecs20140526 CreateDeploymentSetRequest / DescribeDeploymentSetsResponseBody), so
`down`, `sweep` and the cloud-truth check find a box's set the way aliyun_gpu names it:
DeploymentSetName "orch-<box>" and a description starting "orch cluster " (cluster.tf). Such a
set gets the tags of the box's other resources (its expiry, owner), so it is swept with them;
a set left alone (free of charge: "使用部署集不会收取服务费用", Deployment sets,
https://www.alibabacloud.com/help/zh/doc-detail/91258.htm) is listed under its box and removed
by `orch down` of that box.
DeleteDeploymentSet refuses a set that still holds instances (403 DependencyViolation.NotEmpty,
https://www.alibabacloud.com/help/doc-detail/91311.htm): it goes after the instances.
"""

from __future__ import annotations

from orchestrator.clouds.aliyun.client import call, ecs_client
from orchestrator.clouds.aliyun.errors import AliyunError
from orchestrator.clouds.base import BOX_TAG
from orchestrator.clouds.values import TaggedResource

NAME_PREFIX = "orch-"
DESCRIPTION_PREFIX = "orch cluster "
PAGE_SIZE = 50  # DescribeDeploymentSets PageSize: at most 50


def list_deployment_sets(region: str, box: str | None) -> list[TaggedResource]:
    """orch's deployment sets in `region` (only box's when given), tagged {orch:box: box}."""
    from alibabacloud_ecs20140526 import models

    client = ecs_client(region)
    found: list[TaggedResource] = []
    page = 1
    while True:
        request = models.DescribeDeploymentSetsRequest(
            region_id=region,
            page_number=page,
            page_size=PAGE_SIZE,
            deployment_set_name=f"{NAME_PREFIX}{box}" if box else None,
        )
        body = call(
            "DescribeDeploymentSets", lambda r=request: client.describe_deployment_sets(r)
        ).body
        sets = (body.deployment_sets.deployment_set if body.deployment_sets else None) or []
        for item in sets:
            name = item.deployment_set_name or ""
            description = item.deployment_set_description or ""
            if not name.startswith(NAME_PREFIX) or not description.startswith(DESCRIPTION_PREFIX):
                continue  # not one of orch's: a set of the user's own
            owner = name[len(NAME_PREFIX) :]
            if box and owner != box:
                continue
            found.append(
                TaggedResource(
                    "deployment_set",
                    item.deployment_set_id,
                    name,
                    {BOX_TAG: owner},
                    region=region,
                    state=str(item.instance_amount or 0),
                )
            )
        if len(sets) < PAGE_SIZE or page * PAGE_SIZE >= int(body.total_count or 0):
            return found
        page += 1


def with_box_tags(sets: list[TaggedResource], tagged: list[TaggedResource]) -> list[TaggedResource]:
    """Each set with the tags of its box's other resources (first found), its own box tag kept."""
    by_box: dict[str, dict[str, str]] = {}
    for resource in tagged:
        if resource.box and resource.box not in by_box:
            by_box[resource.box] = dict(resource.tags)
    return [
        TaggedResource(
            s.kind,
            s.id,
            s.name,
            {**by_box.get(s.box, {}), **s.tags},
            region=s.region,
            state=s.state,
        )
        for s in sets
    ]


def delete_deployment_set(region: str, ds_id: str) -> None:
    """Delete one set; a missing one is not an error. DependencyViolation.NotEmpty (an
    instance still in it) is raised with that code, for the caller to retry."""
    from alibabacloud_ecs20140526 import models

    client = ecs_client(region)
    request = models.DeleteDeploymentSetRequest(region_id=region, deployment_set_id=ds_id)
    try:
        call("DeleteDeploymentSet", lambda: client.delete_deployment_set(request))
    except AliyunError as exc:
        if exc.code != "InvalidDeploymentSetId.NotFound":
            raise
