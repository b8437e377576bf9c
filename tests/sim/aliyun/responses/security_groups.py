"""ECS security groups: create, describe, authorize, revoke, delete."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from tests.sim.aliyun.models import (
    AliyunBackend,
    Rule,
    SecurityGroup,
    SimError,
    fmt_time,
    invalid,
)
from tests.sim.aliyun.responses.params import (
    Handler,
    Params,
    ecs_tags,
    indexed,
    indexed_objects,
    json_list,
    matches_tags,
    paginate,
    region_of,
    tags_of,
)


def security_group_shape(group: SecurityGroup, instance_count: int) -> dict[str, Any]:
    return {
        "SecurityGroupId": group.id,
        "SecurityGroupName": group.name,
        "Description": group.description,
        "SecurityGroupType": group.type,
        "VpcId": group.vpc_id,
        "CreationTime": fmt_time(group.created_at),
        "ResourceGroupId": group.resource_group_id,
        "EcsCount": instance_count,
        "RuleCount": len(group.rules),
        "ServiceManaged": False,
        "Tags": ecs_tags(group.tags),
    }


def create_security_group(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    group = backend.create_security_group(
        region_of(params),
        params.get("VpcId"),
        params.get("SecurityGroupName", ""),
        params.get("Description", ""),
        params.get("SecurityGroupType") or "normal",
        tags_of(params),
    )
    return {"SecurityGroupId": group.id}


def describe_security_groups(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = backend.check_region(region_of(params))
    with backend.lock:
        groups = sorted(
            (g for g in backend.security_groups.values() if g.region == region),
            key=lambda g: (g.created_at, g.id),
        )
        counts = {
            g.id: sum(g.id in i.security_group_ids for i in backend.instances.values())
            for g in groups
        }
    ids = json_list(params, "SecurityGroupIds")
    if ids is not None:
        groups = [g for g in groups if g.id in ids]
    if params.get("SecurityGroupId"):
        groups = [g for g in groups if g.id == params["SecurityGroupId"]]
    if params.get("VpcId"):
        groups = [g for g in groups if g.vpc_id == params["VpcId"]]
    if params.get("SecurityGroupName"):
        groups = [g for g in groups if g.name == params["SecurityGroupName"]]
    wanted_tags = indexed_objects(params, "Tag")
    if wanted_tags:
        groups = [g for g in groups if matches_tags(g.tags, wanted_tags)]
    page, meta = paginate(groups, params, max_size=100)
    return {
        **meta,
        "RegionId": region,
        "SecurityGroups": {"SecurityGroup": [security_group_shape(g, counts[g.id]) for g in page]},
    }


def describe_security_group_attribute(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = region_of(params)
    group = backend.security_group(region, params.get("SecurityGroupId"))
    direction = params.get("Direction") or "all"
    rules = [r for r in group.rules if direction == "all" or r.direction == direction]
    permissions = []
    for rule in rules:
        ingress = rule.direction == "ingress"
        permissions.append(
            {
                "SecurityGroupRuleId": rule.id,
                "Direction": rule.direction,
                "IpProtocol": rule.ip_protocol.upper(),
                "PortRange": rule.port_range,
                "SourceCidrIp": rule.cidr if ingress else "",
                "DestCidrIp": "" if ingress else rule.cidr,
                "Ipv6SourceCidrIp": "",
                "Ipv6DestCidrIp": "",
                "SourceGroupId": "",
                "DestGroupId": "",
                "SourcePortRange": "",
                "Policy": rule.policy.capitalize(),
                "Priority": str(rule.priority),
                "NicType": rule.nic_type,
                "Description": rule.description,
                "CreateTime": fmt_time(rule.created_at),
            }
        )
    return {
        "RegionId": region,
        "SecurityGroupId": group.id,
        "SecurityGroupName": group.name,
        "Description": group.description,
        "VpcId": group.vpc_id,
        "InnerAccessPolicy": group.inner_access_policy,
        "Permissions": {"Permission": permissions},
    }


def rule_of(backend: AliyunBackend, direction: str, raw: dict[str, str]) -> Rule:
    """One Permissions.N entry -> a Rule, with AuthorizeSecurityGroup's format checks."""
    protocol = (raw.get("IpProtocol") or "").lower()
    if protocol not in ("tcp", "udp", "icmp", "icmpv6", "gre", "all"):
        raise invalid("The specified IpProtocol is not valid.", "InvalidIpProtocol.Malformed")
    port_range = raw.get("PortRange") or ("-1/-1" if protocol not in ("tcp", "udp") else "")
    match = re.fullmatch(r"(-?\d+)/(-?\d+)", port_range)
    if not match:
        raise invalid("The specified PortRange is not valid.", "InvalidIpPortRange.Malformed")
    low, high = int(match.group(1)), int(match.group(2))
    if protocol in ("tcp", "udp"):
        if not (1 <= low <= high <= 65535):
            raise invalid("The specified PortRange is not valid.", "InvalidIpPortRange.Malformed")
    elif (low, high) != (-1, -1):
        raise invalid(
            f"Protocol {protocol} only accepts the port range -1/-1.",
            "InvalidIpPortRange.Malformed",
        )
    key = "SourceCidrIp" if direction == "ingress" else "DestCidrIp"
    cidr = raw.get(key) or ""
    if not cidr:
        raise SimError("MissingParameter", f"The input parameter {key} is mandatory.")
    try:
        cidr = str(ipaddress.ip_network(cidr, strict=False))
    except ValueError:
        raise invalid(f"The specified {key} is not valid.", "InvalidParam.CidrIp") from None
    policy = (raw.get("Policy") or "accept").lower()
    if policy not in ("accept", "drop"):
        raise invalid("The specified Policy is not valid.", "InvalidPolicy.Malformed")
    try:
        priority = int(raw.get("Priority") or 1)
    except ValueError:
        priority = 0
    if not 1 <= priority <= 100:
        raise invalid("The specified Priority is not valid.", "InvalidPriority.Malformed")
    return backend.new_rule(
        direction=direction,
        ip_protocol=protocol,
        port_range=port_range,
        cidr=cidr,
        policy=policy,
        priority=priority,
        nic_type=raw.get("NicType") or "intranet",
        description=raw.get("Description") or "",
    )


def _rules_from(backend: AliyunBackend, params: Params, direction: str) -> list[Rule]:
    raws = indexed_objects(params, "Permissions")
    if not raws and params.get("IpProtocol"):  # the older, single-rule parameter style
        raws = [
            {
                k: params[k]
                for k in (
                    "IpProtocol",
                    "PortRange",
                    "SourceCidrIp",
                    "DestCidrIp",
                    "Policy",
                    "Priority",
                    "NicType",
                    "Description",
                )
                if k in params
            }
        ]
    return [rule_of(backend, direction, raw) for raw in raws]


def _authorize(direction: str) -> Handler:
    def handler(backend: AliyunBackend, params: Params) -> dict[str, Any]:
        rules = _rules_from(backend, params, direction)
        if not rules:
            raise SimError("MissingParameter", "The input parameter Permissions is mandatory.")
        backend.authorize(region_of(params), params.get("SecurityGroupId", ""), rules)
        return {}

    return handler


def _revoke(direction: str) -> Handler:
    def handler(backend: AliyunBackend, params: Params) -> dict[str, Any]:
        rule_ids = indexed(params, "SecurityGroupRuleId")
        rules = _rules_from(backend, params, direction) if not rule_ids else []
        if not rule_ids and not rules:
            raise SimError("MissingParameter", "The input parameter Permissions is mandatory.")
        backend.revoke(
            region_of(params), params.get("SecurityGroupId", ""), direction, rules, rule_ids
        )
        return {}

    return handler


def delete_security_group(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    backend.delete_security_group(region_of(params), params.get("SecurityGroupId", ""))
    return {}
