"""alicloud_security_group, alicloud_security_group_rule and alicloud_ecs_key_pair (ECS API).

Schemas: subsets of alicloud/resource_alicloud_security_group.go,
resource_alicloud_security_group_rule.go and resource_alicloud_ecs_key_pair.go at v1.289.0.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from tests.sim.alicloud_provider.client import ApiError, retry, tags_from, tags_param
from tests.sim.alicloud_provider.resources.base import BaseResource, known
from tests.sim.alicloud_provider.schema import Map, Number, String, attr, schema

_SG_GONE = ("InvalidSecurityGroupId.NotFound",)


class SecurityGroup(BaseResource):
    # resource_alicloud_security_group.go (v1.289.0): security_group_name O+C; description O;
    # vpc_id O+C+ForceNew; security_group_type O+C+ForceNew ("normal"|"enterprise");
    # inner_access_policy O+C ("Accept"|"Drop"); resource_group_id O+C; tags O; create_time C.
    TAGS = ("ecs", "securitygroup")

    @classmethod
    def get_name(cls) -> str:
        return "security_group"

    @classmethod
    def get_schema(cls):
        return schema(
            attr("security_group_name", String(), optional=True, computed=True),
            attr("description", String(), optional=True),
            attr("vpc_id", String(), optional=True, computed=True, force_new=True),
            attr("security_group_type", String(), optional=True, computed=True, force_new=True),
            attr("inner_access_policy", String(), optional=True, computed=True),
            attr("resource_group_id", String(), optional=True, computed=True),
            attr("tags", Map(String()), optional=True),
            attr("create_time", String(), computed=True),
        )

    def validate(self, diags, type_name, config):
        super().validate(diags, type_name, config)
        self.check_in(diags, config, "security_group_type", ["normal", "enterprise"])
        self.check_in(diags, config, "inner_access_policy", ["Accept", "Drop"])

    def _read(self, group_id: str, prior: dict[str, Any]) -> dict[str, Any] | None:
        body = self.client.ecs(
            "DescribeSecurityGroups", {"SecurityGroupIds": json.dumps([group_id]), "PageSize": 10}
        )
        groups = (body.get("SecurityGroups") or {}).get("SecurityGroup") or []
        if not groups:
            return None
        group = groups[0]
        attribute = self.client.ecs("DescribeSecurityGroupAttribute", {"SecurityGroupId": group_id})
        return {
            **prior,
            "id": group["SecurityGroupId"],
            "security_group_name": group.get("SecurityGroupName", ""),
            "description": group.get("Description") or prior.get("description"),
            "vpc_id": group.get("VpcId", ""),
            "security_group_type": group.get("SecurityGroupType", "normal"),
            "inner_access_policy": attribute.get("InnerAccessPolicy", "Accept"),
            "resource_group_id": group.get("ResourceGroupId", ""),
            "tags": tags_from(group.get("Tags")) or prior.get("tags"),
            "create_time": group.get("CreationTime", ""),
        }

    def create(self, ctx, planned):
        request = {
            "VpcId": planned.get("vpc_id") if known(planned.get("vpc_id")) else None,
            "SecurityGroupName": planned.get("security_group_name")
            if known(planned.get("security_group_name"))
            else None,
            "SecurityGroupType": planned.get("security_group_type")
            if known(planned.get("security_group_type"))
            else None,
            "Description": planned.get("description"),
            "Tag": tags_param(planned.get("tags")),
        }
        try:
            group_id = self.client.ecs("CreateSecurityGroup", request)["SecurityGroupId"]
            return self._read(group_id, planned)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "creating alicloud_security_group", exc)
            return None

    def read(self, ctx, current):
        try:
            return self._read(current["id"], current)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "reading alicloud_security_group", exc)
            return current

    def delete(self, ctx, current):
        # The real provider retries DependencyViolation while instances are being released.
        try:
            retry(
                lambda: self.client.ecs("DeleteSecurityGroup", {"SecurityGroupId": current["id"]}),
                codes=("DependencyViolation",),
                timeout_s=120,
            )
        except ApiError as exc:
            if exc.code not in _SG_GONE:
                self.api_error(ctx.diagnostics, "deleting alicloud_security_group", exc)
                return current
        return None


class SecurityGroupRule(BaseResource):
    # resource_alicloud_security_group_rule.go (v1.289.0): security_group_id R+ForceNew;
    # type R+ForceNew ("ingress"|"egress"); ip_protocol R+ForceNew; policy O+ForceNew
    # (Default "accept"); priority O+ForceNew (Default 1, 1..100); cidr_ip O+ForceNew;
    # port_range O+ForceNew (Default "-1/-1"); nic_type O+C+ForceNew; description O;
    # security_group_rule_id C. The SDK's Defaults are not planned here (the `tf` package plans
    # unset optional attributes as null), so the orch module sets policy, priority and
    # port_range explicitly.
    @classmethod
    def get_name(cls) -> str:
        return "security_group_rule"

    def refresh(self, state):
        found = self._find(state)
        return (
            None
            if found is None
            else {**state, "security_group_rule_id": found["SecurityGroupRuleId"]}
        )

    @classmethod
    def get_schema(cls):
        return schema(
            attr("security_group_id", String(), required=True, force_new=True),
            attr("type", String(), required=True, force_new=True),
            attr("ip_protocol", String(), required=True, force_new=True),
            attr("policy", String(), optional=True, force_new=True),
            attr("priority", Number(), optional=True, force_new=True),
            attr("cidr_ip", String(), optional=True, force_new=True),
            attr("port_range", String(), optional=True, force_new=True),
            attr("nic_type", String(), optional=True, computed=True, force_new=True),
            attr("description", String(), optional=True),
            attr("security_group_rule_id", String(), computed=True),
        )

    def validate(self, diags, type_name, config):
        super().validate(diags, type_name, config)
        self.check_in(diags, config, "type", ["ingress", "egress"])
        self.check_in(diags, config, "ip_protocol", ["tcp", "udp", "icmp", "icmpv6", "gre", "all"])
        self.check_in(diags, config, "policy", ["accept", "drop"])
        self.check_in(diags, config, "nic_type", ["internet", "intranet"])
        self.check_range(diags, config, "priority", 1, 100)
        if config.get("cidr_ip") is None:
            diags.add_error(
                '"cidr_ip": one of `cidr_ip,ipv6_cidr_ip,prefix_list_id,source_security_group_id`'
                " must be specified"
            )
        cidr = config.get("cidr_ip")
        if known(cidr):
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                diags.add_error(
                    f"invalid value for cidr_ip ({cidr!r} is not a CIDR)", path=["cidr_ip"]
                )

    @staticmethod
    def _permission(state: dict[str, Any]) -> dict[str, Any]:
        direction = state["type"]
        return {
            "IpProtocol": state["ip_protocol"],
            "PortRange": state.get("port_range") or "-1/-1",
            "SourceCidrIp" if direction == "ingress" else "DestCidrIp": state["cidr_ip"],
            "Policy": state.get("policy") or "accept",
            "Priority": str(int(state.get("priority") or 1)),
            "NicType": state.get("nic_type") if known(state.get("nic_type")) else "intranet",
            "Description": state.get("description"),
        }

    def _find(self, state: dict[str, Any]) -> dict[str, Any] | None:
        body = self.client.ecs(
            "DescribeSecurityGroupAttribute",
            {"SecurityGroupId": state["security_group_id"], "Direction": state["type"]},
        )
        want = self._permission(state)
        key = "SourceCidrIp" if state["type"] == "ingress" else "DestCidrIp"
        for permission in (body.get("Permissions") or {}).get("Permission") or []:
            if (
                permission.get("IpProtocol", "").lower() == want["IpProtocol"]
                and permission.get("PortRange") == want["PortRange"]
                and permission.get(key) == str(ipaddress.ip_network(want[key], strict=False))
                and permission.get("Policy", "").lower() == want["Policy"]
                and str(permission.get("Priority")) == want["Priority"]
            ):
                return permission
        return None

    def create(self, ctx, planned):
        permission = self._permission(planned)
        action = (
            "AuthorizeSecurityGroup"
            if planned["type"] == "ingress"
            else "AuthorizeSecurityGroupEgress"
        )
        try:
            self.client.ecs(
                action,
                {"SecurityGroupId": planned["security_group_id"], "Permissions": [permission]},
            )
            found = self._find(planned)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "creating alicloud_security_group_rule", exc)
            return None
        if found is None:
            ctx.diagnostics.add_error(
                "creating alicloud_security_group_rule: rule not found after create"
            )
            return None
        # The real provider's id: sg:direction:protocol:ports:nic:cidr:policy:priority
        rule_id = ":".join(
            str(x)
            for x in (
                planned["security_group_id"],
                planned["type"],
                permission["IpProtocol"],
                permission["PortRange"],
                permission["NicType"],
                planned["cidr_ip"],
                permission["Policy"],
                permission["Priority"],
            )
        )
        return {
            **planned,
            "id": rule_id,
            "nic_type": found.get("NicType") or permission["NicType"],
            "security_group_rule_id": found.get("SecurityGroupRuleId", ""),
        }

    def read(self, ctx, current):
        try:
            found = self._find(current)
        except ApiError as exc:
            if exc.code in _SG_GONE:
                return None
            self.api_error(ctx.diagnostics, "reading alicloud_security_group_rule", exc)
            return current
        if found is None:
            return None
        return {**current, "security_group_rule_id": found.get("SecurityGroupRuleId", "")}

    def delete(self, ctx, current):
        action = (
            "RevokeSecurityGroup" if current["type"] == "ingress" else "RevokeSecurityGroupEgress"
        )
        try:
            self.client.ecs(
                action,
                {
                    "SecurityGroupId": current["security_group_id"],
                    "Permissions": [self._permission(current)],
                },
            )
        except ApiError as exc:
            if exc.code not in _SG_GONE:
                self.api_error(ctx.diagnostics, "deleting alicloud_security_group_rule", exc)
                return current
        return None


class EcsKeyPair(BaseResource):
    # resource_alicloud_ecs_key_pair.go (v1.289.0): key_pair_name O+C+ForceNew (2..128);
    # public_key O (StateFunc: TrimSpace); resource_group_id O+C; tags O; finger_print C;
    # create_time C.
    TAGS = ("ecs", "keypair")

    @classmethod
    def get_name(cls) -> str:
        return "ecs_key_pair"

    @classmethod
    def get_schema(cls):
        return schema(
            attr("key_pair_name", String(), optional=True, computed=True, force_new=True),
            attr("public_key", String(), optional=True),
            attr("resource_group_id", String(), optional=True, computed=True),
            attr("tags", Map(String()), optional=True),
            attr("finger_print", String(), computed=True),
            attr("create_time", String(), computed=True),
        )

    def validate(self, diags, type_name, config):
        super().validate(diags, type_name, config)
        self.check_len(diags, config, "key_pair_name", 2, 128)

    def _read(self, name: str, prior: dict[str, Any]) -> dict[str, Any] | None:
        body = self.client.ecs("DescribeKeyPairs", {"KeyPairName": name, "PageSize": 50})
        pairs = [
            p for p in (body.get("KeyPairs") or {}).get("KeyPair") or [] if p["KeyPairName"] == name
        ]
        if not pairs:
            return None
        pair = pairs[0]
        return {
            **prior,
            "id": name,
            "key_pair_name": name,
            "resource_group_id": pair.get("ResourceGroupId", ""),
            "tags": tags_from(pair.get("Tags")) or prior.get("tags"),
            "finger_print": pair.get("KeyPairFingerPrint", ""),
            "create_time": pair.get("CreationTime", ""),
        }

    def create(self, ctx, planned):
        name = planned.get("key_pair_name")
        if not known(name):
            ctx.diagnostics.add_error("the test provider needs key_pair_name (no generated names)")
            return None
        try:
            self.client.ecs(
                "ImportKeyPair",
                {
                    "KeyPairName": name,
                    "PublicKeyBody": (planned.get("public_key") or "").strip(),
                    "Tag": tags_param(planned.get("tags")),
                },
            )
            return self._read(name, planned)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "creating alicloud_ecs_key_pair", exc)
            return None

    def read(self, ctx, current):
        try:
            return self._read(current["id"], current)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "reading alicloud_ecs_key_pair", exc)
            return current

    def delete(self, ctx, current):
        try:
            self.client.ecs("DeleteKeyPairs", {"KeyPairNames": json.dumps([current["id"]])})
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "deleting alicloud_ecs_key_pair", exc)
            return current
        return None
