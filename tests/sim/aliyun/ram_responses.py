"""RAM (2015-05-01), STS (2015-04-01) and the ECS instance RAM role actions: parameters in,
response shapes as the API references and the alicloud provider's readers expect them.

tests/sim/aliyun/ram.py holds the rules and cites the RAM and STS references. The ECS actions:
- AttachInstanceRamRole (RegionId, RamRoleName, InstanceIds as a JSON array): one instance RAM
  role per instance ("If an ECS instance already has an instance RAM role, an error is
  returned"); the answer lists a result per instance (AttachInstanceRamRoleResults.
  AttachInstanceRamRoleResult[]: InstanceId, Code "200" or an error code, Success, Message) with
  TotalCount and FailCount
  (https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-attachinstanceramrole).
  A role ECS may not assume (its trust policy does not name ecs.aliyuncs.com) is refused.
- DetachInstanceRamRole: the same shape (DetachInstanceRamRoleResults).
- DescribeInstanceRamRole (InstanceIds and/or RamRoleName): InstanceRamRoleSets.
  InstanceRamRoleSet[] {InstanceId, RamRoleName}; an unknown RamRoleName is
  InvalidRamRole.NotFound, the code the provider's DescribeEcsRamRoleAttachment maps to "gone"
  (service_alicloud_ecs_v2.go@v1.289.0)
  (https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-describeinstanceramrole).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.sim.aliyun.models import AliyunBackend, SimError, fmt_time, invalid
from tests.sim.aliyun.ram import ECS_SERVICE, Policy, Role
from tests.sim.aliyun.responses import indexed_objects, integer, json_list

Params = dict[str, str]
Handler = Callable[[AliyunBackend, Params], dict[str, Any]]
RAM_VERSION = "2015-05-01"
STS_VERSION = "2015-04-01"


def ram_tags(params: Params) -> dict[str, str]:
    """`Tag` as the provider sends it (a JSON array of {Key, Value}) or flattened (Tag.N.Key)."""
    raw = params.get("Tag")
    items: Any = indexed_objects(params, "Tag")
    if raw:
        try:
            items = json.loads(raw)
        except ValueError:
            raise invalid(
                "The specified Tag is not a valid JSON array.", "InvalidParameter.Tag"
            ) from None
    if not isinstance(items, list) or not all(isinstance(i, dict) and i.get("Key") for i in items):
        raise invalid("Every Tag needs a Key.", "InvalidParameter.Tag")
    if len(items) > 20:
        raise invalid("A resource takes at most 20 tags.", "InvalidParameter.Tag")
    return {str(i["Key"]): str(i.get("Value", "")) for i in items}


def role_shape(role: Role) -> dict[str, Any]:
    return {
        "RoleName": role.name,
        "RoleId": role.role_id,
        "Arn": role.arn,
        "Description": role.description,
        "AssumeRolePolicyDocument": role.document,
        "MaxSessionDuration": role.max_session,
        "CreateDate": fmt_time(role.created),
        "UpdateDate": fmt_time(role.created),
    }


def policy_shape(policy: Policy, attachments: int = 0) -> dict[str, Any]:
    return {
        "PolicyName": policy.name,
        "PolicyType": policy.policy_type,
        "Description": policy.description,
        "DefaultVersion": "v1",
        "CreateDate": fmt_time(policy.created),
        "UpdateDate": fmt_time(policy.created),
        "AttachmentCount": attachments,
    }


# ------------------------------------------------------------------------ RAM roles


def create_role(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        role = backend.ram.create_role(
            params.get("RoleName") or "",
            params.get("AssumeRolePolicyDocument") or "",
            params.get("Description") or "",
            integer(params, "MaxSessionDuration", 3600),
            backend.now(),
            ram_tags(params),
        )
        return {"Role": role_shape(role)}


def get_role(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        return {"Role": role_shape(backend.ram.role(params.get("RoleName")))}


def delete_role(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        backend.ram.delete_role(params.get("RoleName") or "")
    return {}


def list_roles(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        roles = [role_shape(r) for r in sorted(backend.ram.roles.values(), key=lambda r: r.name)]
    return {"IsTruncated": False, "Roles": {"Role": roles}}


# ------------------------------------------------------------------------ RAM policies


def create_policy(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        policy = backend.ram.create_policy(
            params.get("PolicyName") or "",
            params.get("PolicyDocument") or "",
            params.get("Description") or "",
            backend.now(),
            ram_tags(params),
        )
        return {"Policy": policy_shape(policy)}


def get_policy(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        policy = backend.ram.policy(params.get("PolicyName"), params.get("PolicyType") or "")
        count = len(backend.ram.policy_roles(policy.name)) if policy.policy_type == "Custom" else 0
        return {
            "Policy": policy_shape(policy, count),
            "DefaultPolicyVersion": {
                "VersionId": "v1",
                "IsDefaultVersion": True,
                "PolicyDocument": policy.document,
                "CreateDate": fmt_time(policy.created),
            },
        }


def delete_policy(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        backend.ram.delete_policy(params.get("PolicyName") or "")
    return {}


def list_policy_versions(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        policy = backend.ram.policy(params.get("PolicyName"), params.get("PolicyType") or "")
        version = {
            "VersionId": "v1",
            "IsDefaultVersion": True,
            "CreateDate": fmt_time(policy.created),
        }
    return {"PolicyVersions": {"PolicyVersion": [version]}}


def list_entities_for_policy(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        policy = backend.ram.policy(params.get("PolicyName"), params.get("PolicyType") or "")
        roles = [role_shape(r) for r in backend.ram.policy_roles(policy.name)]
    return {"Users": {"User": []}, "Groups": {"Group": []}, "Roles": {"Role": roles}}


def _attachment(params: Params) -> tuple[str, str, str]:
    return (
        params.get("RoleName") or "",
        params.get("PolicyType") or "",
        params.get("PolicyName") or "",
    )


def attach_policy_to_role(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        backend.ram.attach(*_attachment(params))
    return {}


def detach_policy_from_role(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        backend.ram.detach(*_attachment(params))
    return {}


def list_policies_for_role(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        policies = [
            {**policy_shape(p), "AttachDate": fmt_time(p.created)}
            for p in backend.ram.role_policies(params.get("RoleName") or "")
        ]
    return {"Policies": {"Policy": policies}}


def list_tag_resources(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    """RAM's ListTagResources: ResourceType role|policy, ResourceNames (JSON), Tag filters.

    TagResources is a list of {ResourceName, ResourceType, TagKey, TagValue}: the provider's
    readers hand it straight to tagsToMap (DescribeRoleListTagResources, v1.289.0)."""
    resource_type = params.get("ResourceType") or ""
    if resource_type not in ("role", "policy"):
        raise invalid("ResourceType must be role or policy.", "InvalidParameter.ResourceType")
    names = json_list(params, "ResourceNames")
    wanted = ram_tags(params) if params.get("Tag") or "Tag.1.Key" in params else {}
    with backend.lock:
        pool = backend.ram.roles if resource_type == "role" else backend.ram.policies
        rows = [
            {"ResourceName": item.name, "ResourceType": resource_type, "TagKey": k, "TagValue": v}
            for item in sorted(pool.values(), key=lambda i: i.name)
            if (names is None or item.name in names)
            and all(item.tags.get(k) == v for k, v in wanted.items())
            for k, v in item.tags.items()
        ]
    return {"IsTruncated": False, "NextToken": "", "TagResources": rows}


# ------------------------------------------------------------------------ STS


def assume_role(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    """A caller with keys of this account may assume a role that trusts the account (RAM
    principal `acs:ram::ACCOUNT:root`); a role trusting only a service (ECS) refuses it."""
    arn = params.get("RoleArn") or ""
    session = params.get("RoleSessionName") or ""
    if not arn.startswith("acs:ram::") or "/role/" not in arn.replace(":role/", "/role/"):
        raise invalid("The parameter RoleArn is wrongly formed.", "InvalidParameter.RoleArn")
    if not 2 <= len(session) <= 64:
        raise invalid("RoleSessionName is 2 to 64 characters.", "InvalidParameter.RoleSessionName")
    with backend.lock:
        role = backend.ram.role(arn.rsplit("/", 1)[1])
        if not _trusts_account(role):
            raise SimError(
                "NoPermission", "You are not authorized to do this action. (trust policy)", 403
            )
        return backend.ram.assume_role(
            role, session, integer(params, "DurationSeconds", 3600), backend.now()
        )


def _trusts_account(role: Role) -> bool:
    for statement in json.loads(role.document).get("Statement", []):
        principal = statement.get("Principal", {}).get("RAM", [])
        if statement.get("Effect") == "Allow" and principal:
            return True
    return False


def instance_credentials(backend: AliyunBackend, instance_id: str) -> tuple[str, dict] | None:
    """What ECS's metadata serves at ram/security-credentials/ROLE for `instance_id`: STS
    credentials of the instance's RAM role, assumed by the ECS service; None without a role."""
    with backend.lock:
        instance = backend.instances.get(instance_id)
        if instance is None or not instance.ram_role_name:
            return None
        role = backend.ram.roles.get(instance.ram_role_name.lower())
        if role is None or not role.trusts_service(ECS_SERVICE):
            return None
        issued = backend.ram.assume_role(role, instance_id, 3600, backend.now())
        return role.name, issued["Credentials"]


# ------------------------------------------------------------------------ ECS instance roles


def _role_for_instances(backend: AliyunBackend, params: Params) -> tuple[Role, list[str]]:
    ids = json_list(params, "InstanceIds") or []
    if not ids or not params.get("RamRoleName"):
        raise SimError("MissingParameter", "RamRoleName and InstanceIds are mandatory.")
    role = backend.ram.roles.get(params["RamRoleName"].lower())
    if role is None:
        raise SimError("InvalidRamRole.NotFound", "The specified RAM role does not exist.", 404)
    return role, ids


def _results(name: str, role: Role, results: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        f"{name}Results": {f"{name}Result": results},
        "RamRoleName": role.name,
        "TotalCount": len(results),
        "FailCount": sum(1 for r in results if not r["Success"]),
    }


def _result(instance_id: str, code: str = "200", message: str = "success") -> dict[str, Any]:
    return {"InstanceId": instance_id, "Code": code, "Success": code == "200", "Message": message}


def attach_instance_ram_role(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        role, ids = _role_for_instances(backend, params)
        if not role.trusts_service(ECS_SERVICE):
            raise SimError(
                "InvalidRamRole.NotEcsRole",
                "The specified RAM role is not authorized for ECS; check its trust policy.",
                400,
            )
        results = []
        for instance_id in ids:
            instance = backend.instances.get(instance_id)
            if instance is None or instance.region != params.get("RegionId"):
                results.append(_result(instance_id, "InvalidInstanceId.NotFound", "not found"))
            elif instance.ram_role_name:  # the reference names no code for this; ours
                results.append(
                    _result(instance_id, "InvalidInstance.RamRoleAttached", "has a RAM role")
                )
            else:
                instance.ram_role_name = role.name
                results.append(_result(instance_id))
        return _results("AttachInstanceRamRole", role, results)


def detach_instance_ram_role(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        role, ids = _role_for_instances(backend, params)
        results = []
        for instance_id in ids:
            instance = backend.instances.get(instance_id)
            if instance is None or instance.ram_role_name.lower() != role.name.lower():
                results.append(_result(instance_id, "InvalidInstanceId.NotFound", "not attached"))
            else:
                instance.ram_role_name = ""
                results.append(_result(instance_id))
        return _results("DetachInstanceRamRole", role, results)


def describe_instance_ram_role(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    ids = json_list(params, "InstanceIds")
    name = params.get("RamRoleName") or ""
    with backend.lock:
        if name and name.lower() not in backend.ram.roles:
            raise SimError("InvalidRamRole.NotFound", "The specified RAM role does not exist.", 404)
        rows = [
            {"InstanceId": i.id, "RamRoleName": i.ram_role_name}
            for i in backend.list_instances(params.get("RegionId") or "")
            if i.ram_role_name
            and (ids is None or i.id in ids)
            and (not name or i.ram_role_name.lower() == name.lower())
        ]
    return {
        "RegionId": params.get("RegionId") or "",
        "TotalCount": len(rows),
        "InstanceRamRoleSets": {"InstanceRamRoleSet": rows},
    }


ECS_ACTIONS: dict[str, Handler] = {
    "AttachInstanceRamRole": attach_instance_ram_role,
    "DetachInstanceRamRole": detach_instance_ram_role,
    "DescribeInstanceRamRole": describe_instance_ram_role,
}

RAM_ACTIONS: dict[str, Handler] = {
    "CreateRole": create_role,
    "GetRole": get_role,
    "DeleteRole": delete_role,
    "ListRoles": list_roles,
    "CreatePolicy": create_policy,
    "GetPolicy": get_policy,
    "DeletePolicy": delete_policy,
    "ListPolicyVersions": list_policy_versions,
    "ListEntitiesForPolicy": list_entities_for_policy,
    "AttachPolicyToRole": attach_policy_to_role,
    "DetachPolicyFromRole": detach_policy_from_role,
    "ListPoliciesForRole": list_policies_for_role,
    "ListTagResources": list_tag_resources,
}

STS_ACTIONS: dict[str, Handler] = {"AssumeRole": assume_role}
