"""AWS: the roles and instance profiles orch created for boxes, found and deleted by tag.

IAM is global: orch puts its roles and profiles under the path /orch/ (ListRoles and
ListInstanceProfiles filter by PathPrefix) and tags them like the box plus `orch:region`, so
each region's sweep claims only its own boxes' identities. ListRoles and ListInstanceProfiles
do not return tags (https://docs.aws.amazon.com/IAM/latest/APIReference/API_ListRoles.html):
ListRoleTags and GetInstanceProfile (its InstanceProfile has Tags) read them. Deleting follows
IAM's order (https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_manage_delete.html): the
role out of its instance profiles, the profile, the role's inline policies, its attached
policies, the role. A role or profile orch did not create (`--instance-profile NAME`) is never
under /orch/ with orch's tags, so it is never touched.
"""

from __future__ import annotations

from typing import Any

from orchestrator.clouds.aws.client import call, client, tags_of
from orchestrator.clouds.aws.errors import AwsError
from orchestrator.clouds.base import BOX_TAG
from orchestrator.clouds.values import TaggedResource

PATH = "/orch/"
REGION_TAG = "orch:region"


def _mine(tags: dict[str, str], region: str, box: str | None) -> bool:
    return (
        tags.get(REGION_TAG) == region
        and bool(tags.get(BOX_TAG))
        and (box is None or tags.get(BOX_TAG) == box)
    )


def _gone(exc: AwsError) -> bool:
    return exc.code == "NoSuchEntity"


def list_tagged_roles(region: str, box: str | None = None) -> list[TaggedResource]:
    iam = client("iam", region)
    found = []
    pages = iam.get_paginator("list_roles").paginate(PathPrefix=PATH)
    for page in call("ListRoles", list, pages):
        for role in page.get("Roles", []):
            name = role["RoleName"]
            try:
                tags = tags_of(call("ListRoleTags", iam.list_role_tags, RoleName=name))
            except AwsError as exc:
                if _gone(exc):
                    continue
                raise
            if _mine(tags, region, box):
                found.append(TaggedResource("iam_role", name, name, tags, region=region))
    return found


def list_tagged_instance_profiles(region: str, box: str | None = None) -> list[TaggedResource]:
    iam = client("iam", region)
    found = []
    pages = iam.get_paginator("list_instance_profiles").paginate(PathPrefix=PATH)
    for page in call("ListInstanceProfiles", list, pages):
        for profile in page.get("InstanceProfiles", []):
            name = profile["InstanceProfileName"]
            answer = _ignore_gone(
                "GetInstanceProfile", iam.get_instance_profile, InstanceProfileName=name
            )
            if answer is None:
                continue
            tags = tags_of(answer["InstanceProfile"])
            if _mine(tags, region, box):
                found.append(TaggedResource("instance_profile", name, name, tags, region=region))
    return found


def _ignore_gone(what: str, fn: Any, **kwargs: Any) -> Any:
    try:
        return call(what, fn, **kwargs)
    except AwsError as exc:
        if not _gone(exc):
            raise
        return None


def delete_instance_profile(region: str, name: str) -> None:
    iam = client("iam", region)
    found = _ignore_gone("GetInstanceProfile", iam.get_instance_profile, InstanceProfileName=name)
    if found is None:
        return
    for role in found["InstanceProfile"].get("Roles", []):
        _ignore_gone(
            "RemoveRoleFromInstanceProfile",
            iam.remove_role_from_instance_profile,
            InstanceProfileName=name,
            RoleName=role["RoleName"],
        )
    _ignore_gone("DeleteInstanceProfile", iam.delete_instance_profile, InstanceProfileName=name)


def delete_role(region: str, name: str) -> None:
    iam = client("iam", region)
    profiles = _ignore_gone(
        "ListInstanceProfilesForRole", iam.list_instance_profiles_for_role, RoleName=name
    )
    if profiles is None:
        return
    for profile in profiles.get("InstanceProfiles", []):
        _ignore_gone(
            "RemoveRoleFromInstanceProfile",
            iam.remove_role_from_instance_profile,
            InstanceProfileName=profile["InstanceProfileName"],
            RoleName=name,
        )
    inline = _ignore_gone("ListRolePolicies", iam.list_role_policies, RoleName=name) or {}
    for policy in inline.get("PolicyNames", []):
        _ignore_gone("DeleteRolePolicy", iam.delete_role_policy, RoleName=name, PolicyName=policy)
    attached = (
        _ignore_gone("ListAttachedRolePolicies", iam.list_attached_role_policies, RoleName=name)
        or {}
    )
    for policy in attached.get("AttachedPolicies", []):
        _ignore_gone(
            "DetachRolePolicy",
            iam.detach_role_policy,
            RoleName=name,
            PolicyArn=policy["PolicyArn"],
        )
    _ignore_gone("DeleteRole", iam.delete_role, RoleName=name)
