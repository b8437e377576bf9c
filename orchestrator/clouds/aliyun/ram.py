"""Aliyun: the instance RAM roles and policies orch created for boxes, found and deleted by tag.

RAM (API 2015-05-01) is global, with one endpoint (ram.aliyuncs.com; ALIBABA_CLOUD_ENDPOINT_RAM
overrides it, as for the alicloud provider). orch tags each role and policy it creates like the
box plus `orch:region`, so each region's sweep claims only its own boxes' identities.
ListTagResources (ResourceType role | policy, a Tag filter) lists them with their tags
(https://www.alibabacloud.com/help/en/ram/developer-reference/api-ram-2015-05-01-listtagresources).
Deleting follows RAM's order: DeleteRole refuses a role with attached policies
(409 DeleteConflict.Role.Policy, https://alibabacloud.com/help/en/resource-management/api-deleterole)
and DeletePolicy an attached policy
(https://alibabacloud.com/help/en/resource-management/api-deletepolicy): ListPoliciesForRole,
DetachPolicyFromRole each, DeleteRole; then DeletePolicy. EntityNotExist.* means already gone.
A role orch did not create (`--instance-profile NAME`) carries no orch tags, so it is never
touched. The instance holding a role is released before its role is deleted.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.clouds.aliyun.client import ram_client, rpc
from orchestrator.clouds.aliyun.errors import AliyunError
from orchestrator.clouds.base import BOX_TAG
from orchestrator.clouds.values import TaggedResource

RAM_API_VERSION = "2015-05-01"
REGION_TAG = "orch:region"
KINDS = {"role": "ram_role", "policy": "ram_policy"}
# What RAM answers a caller without the right (STS and RAM: NoPermission; Forbidden.RAM).
DENIED = ("NoPermission", "Forbidden")


def ram_rpc(region: str, action: str, query: dict[str, Any]) -> dict[str, Any]:
    """One RAM API call with flat parameters; the response body as a dict."""
    return rpc(ram_client(region), RAM_API_VERSION, action, query)


def _gone(exc: AliyunError) -> bool:
    return exc.code.startswith("EntityNotExist")


def list_tagged(region: str, tags: dict[str, str | None]) -> list[TaggedResource]:
    """orch's roles and policies of `region` carrying every given tag (None: any value).

    Credentials without RAM rights (a RAM user with ECS and VPC permissions only, as before
    boxes had roles) list none: such credentials cannot have created a role either, since
    `terraform apply` fails at CreateRole first."""
    found: list[TaggedResource] = []
    for kind, resource_kind in KINDS.items():
        try:
            by_name = _tags_by_name(region, kind)
        except AliyunError as exc:
            if exc.code.startswith(DENIED):
                return []
            raise
        for name, have in sorted(by_name.items()):
            if have.get(REGION_TAG) == region and have.get(BOX_TAG) and _matches(have, tags):
                found.append(TaggedResource(resource_kind, name, name, have, region=region))
    return found


def _tags_by_name(region: str, kind: str) -> dict[str, dict[str, str]]:
    """{resource name: its tags} of the `kind` resources tagged with `region`, all pages."""
    wanted = json.dumps([{"Key": REGION_TAG, "Value": region}])
    by_name: dict[str, dict[str, str]] = {}
    token = None
    while True:
        body = ram_rpc(
            region, "ListTagResources", {"ResourceType": kind, "Tag": wanted, "NextToken": token}
        )
        for row in body.get("TagResources") or []:
            by_name.setdefault(row["ResourceName"], {})[row["TagKey"]] = row.get("TagValue", "")
        token = body.get("NextToken") or None
        if not body.get("IsTruncated") or not token:
            return by_name


def _matches(have: dict[str, str], tags: dict[str, str | None]) -> bool:
    return all(key in have and (value is None or have[key] == value) for key, value in tags.items())


def _ignore_gone(region: str, action: str, query: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return ram_rpc(region, action, query)
    except AliyunError as exc:
        if _gone(exc):
            return None
        raise


def delete_role(region: str, name: str) -> None:
    """Detach the role's policies, then delete it; a missing role is not an error."""
    attached = _ignore_gone(region, "ListPoliciesForRole", {"RoleName": name})
    if attached is None:
        return
    for policy in (attached.get("Policies") or {}).get("Policy") or []:
        _ignore_gone(
            region,
            "DetachPolicyFromRole",
            {
                "RoleName": name,
                "PolicyName": policy["PolicyName"],
                "PolicyType": policy["PolicyType"],
            },
        )
    _ignore_gone(region, "DeleteRole", {"RoleName": name})


def delete_policy(region: str, name: str) -> None:
    """Detach the custom policy from its roles, then delete it; a missing one is no error."""
    entities = _ignore_gone(
        region, "ListEntitiesForPolicy", {"PolicyName": name, "PolicyType": "Custom"}
    )
    if entities is None:
        return
    for role in (entities.get("Roles") or {}).get("Role") or []:
        _ignore_gone(
            region,
            "DetachPolicyFromRole",
            {"RoleName": role["RoleName"], "PolicyName": name, "PolicyType": "Custom"},
        )
    _ignore_gone(region, "DeletePolicy", {"PolicyName": name})
