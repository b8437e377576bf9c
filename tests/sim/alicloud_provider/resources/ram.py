"""alicloud_ram_role, alicloud_ram_policy, alicloud_ram_role_policy_attachment (RAM API
2015-05-01) and alicloud_ecs_ram_role_attachment (ECS 2014-05-26).

Schemas: subsets of alicloud/resource_alicloud_ram_role.go, resource_alicloud_ram_policy.go,
resource_alicloud_ram_role_policy_attachment.go and resource_alicloud_ecs_ram_role_attachment.go
at v1.289.0. Flows, as there:
- role: CreateRole (RoleName, AssumeRolePolicyDocument, Description, MaxSessionDuration, Tag as
  a JSON array), id = the role name; read GetRole + ListTagResources(ResourceType role); delete:
  with `force`, ListPoliciesForRole + DetachPolicyFromRole each, then DeleteRole, retried while
  DeleteConflict.Role.Policy, EntityNotExist.Role meaning gone.
- policy: CreatePolicy (PolicyName, PolicyDocument, Description, Tag), id = the name; read
  GetPolicy(PolicyType Custom) + ListTagResources(policy); delete: with `force`,
  ListEntitiesForPolicy + DetachPolicyFromRole each, then DeletePolicy, retried while
  DeleteConflict.*.
- role policy attachment: AttachPolicyToRole, id `role:POLICY:TYPE:ROLE`; read
  ListPoliciesForRole; delete DetachPolicyFromRole (EntityNotExist.Role[.Policy]: gone).
- ECS RAM role attachment: AttachInstanceRamRole (InstanceIds as a JSON array), id
  `INSTANCE:ROLE`; read DescribeInstanceRamRole; delete DetachInstanceRamRole.
"""

from __future__ import annotations

import json
from typing import Any

from tests.sim.alicloud_provider.client import AliyunClient, ApiError, retry
from tests.sim.alicloud_provider.resources.base import BaseResource, known
from tests.sim.alicloud_provider.schema import Bool, Map, Number, String, attr, schema

_ROLE_GONE = ("EntityNotExist.Role",)
_POLICY_GONE = ("EntityNotExist.Policy", "EntityNotExist")
_CONFLICTS = (
    "DeleteConflict.Policy.Group",
    "DeleteConflict.Policy.User",
    "DeleteConflict.Policy.Version",
    "DeleteConflict.Role.Policy",
)


def _tags_param(tags: dict[str, str] | None) -> str | None:
    """The provider's convertListMapToJsonString(ConvertTags(tags))."""
    return json.dumps([{"Key": k, "Value": v} for k, v in tags.items()]) if tags else None


def _value(planned: dict[str, Any], name: str) -> Any:
    value = planned.get(name)
    return value if known(value) else None


def _detach(client: AliyunClient, role: str, policy: dict[str, Any]) -> None:
    """DetachPolicyFromRole; EntityNotExist.* means it is already detached."""
    request = {
        "RoleName": role,
        "PolicyName": policy["PolicyName"],
        "PolicyType": policy["PolicyType"],
    }
    try:
        client.rpc("ram", "DetachPolicyFromRole", request)
    except ApiError as exc:
        if not exc.code.startswith("EntityNotExist"):
            raise


class _RamResource(BaseResource):
    KIND = ""  # ListTagResources ResourceType

    def _tags(self, name: str) -> dict[str, str] | None:
        body = self.client.rpc(
            "ram",
            "ListTagResources",
            {"ResourceType": self.KIND, "ResourceNames": json.dumps([name])},
        )
        rows = body.get("TagResources") or []
        return {row["TagKey"]: row.get("TagValue", "") for row in rows} or None

    def read(self, ctx, current):
        try:
            return self._read(current["id"], current)  # type: ignore[attr-defined]
        except ApiError as exc:
            self.api_error(ctx.diagnostics, f"reading alicloud_ram_{self.KIND}", exc)
            return current


class RamRole(_RamResource):
    # resource_alicloud_ram_role.go (v1.289.0): role_name O+C+ForceNew (ConflictsWith name);
    # assume_role_policy_document O+C (StringIsJSON); description O; max_session_duration O+C;
    # tags O; force O; arn, role_id, create_time C.
    KIND = "role"

    @classmethod
    def get_name(cls) -> str:
        return "ram_role"

    @classmethod
    def get_schema(cls):
        return schema(
            attr("role_name", String(), optional=True, computed=True, force_new=True),
            attr("assume_role_policy_document", String(), optional=True, computed=True),
            attr("description", String(), optional=True),
            attr("max_session_duration", Number(), optional=True, computed=True),
            attr("tags", Map(String()), optional=True),
            attr("force", Bool(), optional=True),
            attr("arn", String(), computed=True),
            attr("role_id", String(), computed=True),
            attr("create_time", String(), computed=True),
        )

    def validate(self, diags, type_name, config):
        super().validate(diags, type_name, config)
        document = config.get("assume_role_policy_document")
        if known(document):
            try:
                json.loads(document)
            except ValueError:
                diags.add_error('"assume_role_policy_document" contains an invalid JSON')

    def _read(self, name: str, prior: dict[str, Any]) -> dict[str, Any] | None:
        try:
            role = self.client.rpc("ram", "GetRole", {"RoleName": name})["Role"]
        except ApiError as exc:
            if exc.code in _ROLE_GONE:
                return None
            raise
        return {
            **prior,
            "id": role["RoleName"],
            "role_name": role["RoleName"],
            "assume_role_policy_document": role["AssumeRolePolicyDocument"],
            "description": role.get("Description") or prior.get("description"),
            "max_session_duration": role.get("MaxSessionDuration"),
            "tags": self._tags(name),
            "arn": role["Arn"],
            "role_id": role["RoleId"],
            "create_time": role.get("CreateDate", ""),
        }

    def create(self, ctx, planned):
        name = _value(planned, "role_name")
        document = _value(planned, "assume_role_policy_document")
        if not name or not document:
            ctx.diagnostics.add_error("the test provider needs role_name and the trust document")
            return None
        request = {
            "RoleName": name,
            "AssumeRolePolicyDocument": document,
            "Description": _value(planned, "description"),
            "MaxSessionDuration": _value(planned, "max_session_duration"),
            "Tag": _tags_param(_value(planned, "tags")),
        }
        try:
            body = self.client.rpc("ram", "CreateRole", request)
            return self._read(body["Role"]["RoleName"], planned)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "creating alicloud_ram_role", exc)
            return None

    def delete(self, ctx, current):
        name = current["id"]
        try:
            if current.get("force"):
                body = self.client.rpc("ram", "ListPoliciesForRole", {"RoleName": name})
                for policy in (body.get("Policies") or {}).get("Policy") or []:
                    _detach(self.client, name, policy)
            retry(
                lambda: self.client.rpc("ram", "DeleteRole", {"RoleName": name}),
                codes=("DeleteConflict.Role.Policy",),
                timeout_s=60,
            )
        except ApiError as exc:
            if exc.code not in _ROLE_GONE:
                self.api_error(ctx.diagnostics, "deleting alicloud_ram_role", exc)
                return current
        return None


class RamPolicy(_RamResource):
    # resource_alicloud_ram_policy.go (v1.289.0): policy_name O+C+ForceNew; policy_document
    # O+C (StringIsJSON); description O; tags O; force O; type, attachment_count, version_id,
    # default_version, create_time C.
    KIND = "policy"

    @classmethod
    def get_name(cls) -> str:
        return "ram_policy"

    @classmethod
    def get_schema(cls):
        return schema(
            attr("policy_name", String(), optional=True, computed=True, force_new=True),
            attr("policy_document", String(), optional=True, computed=True),
            attr("description", String(), optional=True),
            attr("tags", Map(String()), optional=True),
            attr("force", Bool(), optional=True),
            attr("type", String(), computed=True),
            attr("attachment_count", Number(), computed=True),
            attr("version_id", String(), computed=True),
            attr("default_version", String(), computed=True),
            attr("create_time", String(), computed=True),
        )

    def _read(self, name: str, prior: dict[str, Any]) -> dict[str, Any] | None:
        try:
            body = self.client.rpc("ram", "GetPolicy", {"PolicyName": name, "PolicyType": "Custom"})
        except ApiError as exc:
            if exc.code in _POLICY_GONE:
                return None
            raise
        policy, version = body["Policy"], body.get("DefaultPolicyVersion") or {}
        return {
            **prior,
            "id": policy["PolicyName"],
            "policy_name": policy["PolicyName"],
            "policy_document": version.get("PolicyDocument"),
            "description": policy.get("Description") or prior.get("description"),
            "tags": self._tags(name),
            "type": policy.get("PolicyType", ""),
            "attachment_count": policy.get("AttachmentCount", 0),
            "version_id": version.get("VersionId", ""),
            "default_version": policy.get("DefaultVersion", ""),
            "create_time": policy.get("CreateDate", ""),
        }

    def create(self, ctx, planned):
        name, document = _value(planned, "policy_name"), _value(planned, "policy_document")
        if not name or not document:
            ctx.diagnostics.add_error("the test provider needs policy_name and policy_document")
            return None
        request = {
            "PolicyName": name,
            "PolicyDocument": document,
            "Description": _value(planned, "description"),
            "Tag": _tags_param(_value(planned, "tags")),
        }
        try:
            body = self.client.rpc("ram", "CreatePolicy", request)
            return self._read(body["Policy"]["PolicyName"], planned)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "creating alicloud_ram_policy", exc)
            return None

    def delete(self, ctx, current):
        name = current["id"]
        try:
            if current.get("force"):
                body = self.client.rpc(
                    "ram", "ListEntitiesForPolicy", {"PolicyName": name, "PolicyType": "Custom"}
                )
                for role in (body.get("Roles") or {}).get("Role") or []:
                    _detach(
                        self.client, role["RoleName"], {"PolicyName": name, "PolicyType": "Custom"}
                    )
            retry(
                lambda: self.client.rpc("ram", "DeletePolicy", {"PolicyName": name}),
                codes=_CONFLICTS,
                timeout_s=60,
            )
        except ApiError as exc:
            if exc.code not in _POLICY_GONE:
                self.api_error(ctx.diagnostics, "deleting alicloud_ram_policy", exc)
                return current
        return None


class RamRolePolicyAttachment(BaseResource):
    # resource_alicloud_ram_role_policy_attachment.go (v1.289.0): policy_name, policy_type
    # (System | Custom), role_name: all Required + ForceNew.

    @classmethod
    def get_name(cls) -> str:
        return "ram_role_policy_attachment"

    @classmethod
    def get_schema(cls):
        return schema(
            attr("policy_name", String(), required=True, force_new=True),
            attr("policy_type", String(), required=True, force_new=True),
            attr("role_name", String(), required=True, force_new=True),
        )

    def validate(self, diags, type_name, config):
        super().validate(diags, type_name, config)
        self.check_in(diags, config, "policy_type", ("System", "Custom"))

    def _read(self, attachment_id: str, prior: dict[str, Any]) -> dict[str, Any] | None:
        _, policy, kind, role = attachment_id.split(":")
        try:
            body = self.client.rpc("ram", "ListPoliciesForRole", {"RoleName": role})
        except ApiError as exc:
            if exc.code in _ROLE_GONE:
                return None
            raise
        for item in (body.get("Policies") or {}).get("Policy") or []:
            if item["PolicyName"] == policy and item["PolicyType"] == kind:
                return {
                    **prior,
                    "id": attachment_id,
                    "policy_name": policy,
                    "policy_type": kind,
                    "role_name": role,
                }
        return None

    def create(self, ctx, planned):
        request = {
            "PolicyType": planned["policy_type"],
            "PolicyName": planned["policy_name"],
            "RoleName": planned["role_name"],
        }
        try:
            self.client.rpc("ram", "AttachPolicyToRole", request)
            attachment_id = (
                f"role:{request['PolicyName']}:{request['PolicyType']}:{request['RoleName']}"
            )
            return self._read(attachment_id, planned)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "creating alicloud_ram_role_policy_attachment", exc)
            return None

    def read(self, ctx, current):
        try:
            return self._read(current["id"], current)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "reading alicloud_ram_role_policy_attachment", exc)
            return current

    def delete(self, ctx, current):
        request = {
            "PolicyType": current["policy_type"],
            "PolicyName": current["policy_name"],
            "RoleName": current["role_name"],
        }
        try:
            self.client.rpc("ram", "DetachPolicyFromRole", request)
        except ApiError as exc:
            if exc.code not in ("EntityNotExist.Role", "EntityNotExist.Role.Policy"):
                self.api_error(ctx.diagnostics, "deleting alicloud_ram_role_policy_attachment", exc)
                return current
        return None


class EcsRamRoleAttachment(BaseResource):
    # resource_alicloud_ecs_ram_role_attachment.go (v1.289.0): instance_id, ram_role_name
    # Required + ForceNew; policy O.

    @classmethod
    def get_name(cls) -> str:
        return "ecs_ram_role_attachment"

    @classmethod
    def get_schema(cls):
        return schema(
            attr("instance_id", String(), required=True, force_new=True),
            attr("ram_role_name", String(), required=True, force_new=True),
            attr("policy", String(), optional=True),
        )

    def _read(self, attachment_id: str, prior: dict[str, Any]) -> dict[str, Any] | None:
        instance, role = attachment_id.split(":")
        try:
            body = self.client.ecs(
                "DescribeInstanceRamRole",
                {"InstanceIds": json.dumps([instance]), "RamRoleName": role},
            )
        except ApiError as exc:
            if exc.code == "InvalidRamRole.NotFound":
                return None
            raise
        rows = (body.get("InstanceRamRoleSets") or {}).get("InstanceRamRoleSet") or []
        if not rows or not rows[0].get("RamRoleName"):
            return None
        return {
            **prior,
            "id": attachment_id,
            "instance_id": rows[0]["InstanceId"],
            "ram_role_name": rows[0]["RamRoleName"],
        }

    def create(self, ctx, planned):
        request = {
            "RamRoleName": planned["ram_role_name"],
            "InstanceIds": json.dumps([planned["instance_id"]]),
            "Policy": _value(planned, "policy"),
        }
        try:
            body = self.client.ecs("AttachInstanceRamRole", request)
            results = (body.get("AttachInstanceRamRoleResults") or {}).get(
                "AttachInstanceRamRoleResult"
            ) or [{}]
            state = self._read(f"{results[0].get('InstanceId')}:{body.get('RamRoleName')}", planned)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "creating alicloud_ecs_ram_role_attachment", exc)
            return None
        if state is None:  # the provider reads back at once: a failed attach is "not found"
            ctx.diagnostics.add_error(
                "creating alicloud_ecs_ram_role_attachment failed",
                f"the role is not on the instance: {results[0]}",
            )
        return state

    def read(self, ctx, current):
        try:
            return self._read(current["id"], current)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "reading alicloud_ecs_ram_role_attachment", exc)
            return current

    def delete(self, ctx, current):
        instance, role = current["id"].split(":")
        try:
            self.client.ecs(
                "DetachInstanceRamRole",
                {"RamRoleName": role, "InstanceIds": json.dumps([instance])},
            )
        except ApiError as exc:
            if exc.code not in ("InvalidRamRole.NotFound", "InvalidInstanceId.NotFound"):
                self.api_error(ctx.diagnostics, "deleting alicloud_ecs_ram_role_attachment", exc)
                return current
        return None
