"""RAM (2015-05-01) roles and custom policies, and the STS credentials a role hands out.

RAM is global: one `RamState` per account (AliyunBackend.ram), not per region. The rules are the
API reference's (https://www.alibabacloud.com/help/en/ram/developer-reference/api-ram-2015-05-01-dir):
- CreateRole: RoleName 1-64 letters, digits, "." and "-" (InvalidParameter.RoleName.InvalidChars
  / .Length, 400), AssumeRolePolicyDocument required and a JSON policy (MalformedPolicyDocument),
  MaxSessionDuration 3600-43200 (default 3600), a taken name is 409 EntityAlreadyExists.Role
  (https://www.alibabacloud.com/help/en/ram/developer-reference/api-ram-2015-05-01-createrole).
- DeleteRole: 404 EntityNotExist.Role; 409 DeleteConflict.Role.Policy while a policy is
  attached (https://alibabacloud.com/help/en/resource-management/api-deleterole).
- CreatePolicy / DeletePolicy: PolicyName 1-128 letters, digits and "-"
  (InvalidParameter.PolicyName.InvalidChars / .Length), 404 EntityNotExist.Policy, 409
  EntityAlreadyExists.Policy; a policy still attached cannot be deleted ("make sure that the
  policy is not attached to RAM users, RAM user groups, or RAM roles",
  https://alibabacloud.com/help/en/resource-management/api-deletepolicy). For an attached role
  the code is DeleteConflict.Role.Policy, the one the alicloud provider's DeletePolicy retries on
  (resource_alicloud_ram_policy.go@v1.289.0).
- AttachPolicyToRole / DetachPolicyFromRole: PolicyType System or Custom; 404
  EntityNotExist.Role / EntityNotExist.Policy; attaching twice is 409
  EntityAlreadyExists.Role.Policy; detaching what is not attached is 404
  EntityNotExist.Role.Policy (the codes resource_alicloud_ram_role_policy_attachment.go@v1.289.0
  treats as "already gone").
- Tags on roles and policies (Tag on CreateRole / CreatePolicy, ListTagResources with
  ResourceType role|policy): https://www.alibabacloud.com/help/en/ram/developer-reference/api-ram-2015-05-01-listtagresources
STS AssumeRole (2015-04-01) returns {"Credentials": {AccessKeyId, AccessKeySecret,
SecurityToken, Expiration}, "AssumedRoleUser": {Arn, AssumedRoleId}}; the caller must be a
principal the role's trust policy names, else 403 NoPermission
(https://www.alibabacloud.com/help/en/ram/developer-reference/api-sts-2015-04-01-assumerole).
An ECS instance RAM role is assumed by the ECS service (principal `ecs.aliyuncs.com`), and the
instance metadata serves those credentials at ram/security-credentials/ROLE.
"""

from __future__ import annotations

import json
import random
import re
import string
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tests.sim.aliyun.models import SimError, fmt_time, invalid, not_found

ACCOUNT_ID = "1234567890123456"
ECS_SERVICE = "ecs.aliyuncs.com"
ROLE_NAME = re.compile(r"[A-Za-z0-9.-]+")
POLICY_NAME = re.compile(r"[A-Za-z0-9-]+")
# Policies the account always has (PolicyType System); orch attaches none, tests may.
SYSTEM_POLICIES = ("AliyunOSSReadOnlyAccess", "AliyunOSSFullAccess", "AliyunECSReadOnlyAccess")


def _random(k: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(random.choices(alphabet, k=k))


@dataclass
class Role:
    name: str
    role_id: str
    document: str
    description: str
    max_session: int
    created: datetime
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def arn(self) -> str:
        return f"acs:ram::{ACCOUNT_ID}:role/{self.name.lower()}"

    def trusts_service(self, service: str) -> bool:
        for statement in json.loads(self.document).get("Statement", []):
            principal = statement.get("Principal", {}).get("Service", [])
            services = [principal] if isinstance(principal, str) else list(principal)
            if statement.get("Effect") == "Allow" and service in services:
                return True
        return False


@dataclass
class Policy:
    name: str
    document: str
    description: str
    created: datetime
    policy_type: str = "Custom"
    tags: dict[str, str] = field(default_factory=dict)


def check_role_name(name: str | None) -> str:
    if not name:
        raise SimError("MissingParameter", "RoleName is mandatory for this action.")
    if len(name) > 64:
        raise invalid(
            "The maximum length of the role name is exceeded.", "InvalidParameter.RoleName.Length"
        )
    if not ROLE_NAME.fullmatch(name):
        raise invalid(
            "The specified role name contains invalid characters.",
            "InvalidParameter.RoleName.InvalidChars",
        )
    return name


def check_policy_name(name: str | None) -> str:
    if not name:
        raise SimError("MissingParameter", "PolicyName is mandatory for this action.")
    if len(name) > 128:
        raise invalid(
            "The length of the policy name is invalid. It must be 1 to 128 characters in length.",
            "InvalidParameter.PolicyName.Length",
        )
    if not POLICY_NAME.fullmatch(name):
        raise invalid(
            "The policy name contains invalid characters. It must only contain upper or lower"
            " case letters, numbers, and dash (-).",
            "InvalidParameter.PolicyName.InvalidChars",
        )
    return name


def check_document(text: str | None, what: str) -> str:
    """A policy document: JSON with Version "1" and a Statement list."""
    if not text:
        raise SimError("MissingParameter", f"{what} is mandatory for this action.")
    try:
        document = json.loads(text)
    except ValueError:
        raise invalid(f"{what} is not valid JSON.", "MalformedPolicyDocument") from None
    statements = document.get("Statement") if isinstance(document, dict) else None
    if not isinstance(statements, list) or not statements or document.get("Version") != "1":
        raise invalid(f'{what} needs Version "1" and a Statement list.', "MalformedPolicyDocument")
    for statement in statements:
        if not isinstance(statement, dict) or statement.get("Effect") not in ("Allow", "Deny"):
            raise invalid(
                f"{what}: every statement needs Effect Allow or Deny.", "MalformedPolicyDocument"
            )
    return text


class RamState:
    """The account's roles, custom policies and role-policy attachments."""

    def __init__(self) -> None:
        self.roles: dict[str, Role] = {}  # by lower-case name: RAM names are case-insensitive
        self.policies: dict[str, Policy] = {}
        self.attachments: set[tuple[str, str, str]] = set()  # (role key, policy type, policy)
        self.issued: list[tuple[str, str]] = []  # (role name, session name) per AssumeRole

    # ------------------------------------------------------------------ roles

    def create_role(
        self,
        name: str,
        document: str,
        description: str,
        max_session: int,
        now: datetime,
        tags: dict[str, str],
    ) -> Role:
        check_role_name(name)
        check_document(document, "AssumeRolePolicyDocument")
        if not 3600 <= max_session <= 43200:
            raise invalid(
                "MaxSessionDuration must be 3600 to 43200.", "InvalidParameter.MaxSessionDuration"
            )
        if len(description) > 1024:
            raise invalid("The description is too long.", "InvalidParameter.Description.Length")
        if name.lower() in self.roles:
            raise SimError("EntityAlreadyExists.Role", "The role does already EXIST.", 409)
        role = Role(name, _random(16, string.digits), document, description, max_session, now, tags)
        self.roles[name.lower()] = role
        return role

    def role(self, name: str | None) -> Role:
        found = self.roles.get(check_role_name(name).lower())
        if found is None:
            raise SimError("EntityNotExist.Role", "The role does not exist.", 404)
        return found

    def delete_role(self, name: str) -> None:
        role = self.role(name)
        if any(key == role.name.lower() for key, _, _ in self.attachments):
            raise SimError(
                "DeleteConflict.Role.Policy",
                "The role cannot have any attached policies when you delete it.",
                409,
            )
        del self.roles[role.name.lower()]

    # ------------------------------------------------------------------ policies

    def create_policy(
        self, name: str, document: str, description: str, now: datetime, tags: dict[str, str]
    ) -> Policy:
        check_policy_name(name)
        check_document(document, "PolicyDocument")
        if name.lower() in self.policies or name in SYSTEM_POLICIES:
            raise SimError("EntityAlreadyExists.Policy", "The policy does already EXIST.", 409)
        policy = Policy(name, document, description, now, tags=tags)
        self.policies[name.lower()] = policy
        return policy

    def policy(self, name: str | None, policy_type: str = "Custom") -> Policy:
        check_policy_name(name)
        if policy_type not in ("System", "Custom"):
            raise invalid("PolicyType must be System or Custom.", "InvalidParameter.PolicyType")
        if policy_type == "System" and name in SYSTEM_POLICIES:
            return Policy(
                name, '{"Version":"1","Statement":[]}', name, datetime(2015, 1, 1), "System"
            )
        found = self.policies.get(str(name).lower()) if policy_type == "Custom" else None
        if found is None:
            raise SimError("EntityNotExist.Policy", "The policy does not exist.", 404)
        return found

    def policy_roles(self, name: str) -> list[Role]:
        return [
            self.roles[r] for r, t, p in self.attachments if t == "Custom" and p == name.lower()
        ]

    def delete_policy(self, name: str) -> None:
        policy = self.policy(name)
        if self.policy_roles(policy.name):
            raise SimError(
                "DeleteConflict.Role.Policy",
                "The policy cannot be attached to any role when you delete it.",
                409,
            )
        del self.policies[policy.name.lower()]

    # ------------------------------------------------------------------ attachments

    def attach(self, role_name: str, policy_type: str, policy_name: str) -> None:
        role, policy = self.role(role_name), self.policy(policy_name, policy_type)
        key = (role.name.lower(), policy.policy_type, policy.name.lower())
        if key in self.attachments:
            raise SimError(
                "EntityAlreadyExists.Role.Policy",
                "The policy is already attached to the role.",
                409,
            )
        self.attachments.add(key)

    def detach(self, role_name: str, policy_type: str, policy_name: str) -> None:
        role, policy = self.role(role_name), self.policy(policy_name, policy_type)
        key = (role.name.lower(), policy.policy_type, policy.name.lower())
        if key not in self.attachments:
            raise not_found("EntityNotExist.Role.Policy", "policy attachment")
        self.attachments.discard(key)

    def role_policies(self, role_name: str) -> list[Policy]:
        role = self.role(role_name)
        return [
            self.policy(p, t) if t == "Custom" else self.policy(p, "System")
            for r, t, p in sorted(self.attachments)
            if r == role.name.lower()
        ]

    # ------------------------------------------------------------------ STS

    def assume_role(
        self, role: Role, session: str, duration_s: int, now: datetime
    ) -> dict[str, Any]:
        """STS AssumeRole's answer (the caller's right to it is checked by the caller)."""
        if not 900 <= duration_s <= role.max_session:
            raise invalid(
                f"DurationSeconds must be 900 to {role.max_session}.",
                "InvalidParameter.DurationSeconds",
            )
        self.issued.append((role.name, session))
        role_id = f"{role.role_id}:{session}"
        return {
            "Credentials": {
                "AccessKeyId": "STS." + _random(24),
                "AccessKeySecret": _random(40),
                "SecurityToken": "CAIS" + _random(120),
                "Expiration": fmt_time(now + timedelta(seconds=duration_s)),
            },
            "AssumedRoleUser": {
                "Arn": f"acs:ram::{ACCOUNT_ID}:role/{role.name.lower()}/{session}",
                "AssumedRoleId": role_id,
            },
        }

    def summary(self) -> dict[str, Any]:
        return {
            "roles": sorted(r.name for r in self.roles.values()),
            "policies": sorted(p.name for p in self.policies.values()),
            "attachments": sorted(f"{r}:{t}:{p}" for r, t, p in self.attachments),
        }
