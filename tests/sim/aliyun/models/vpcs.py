"""VPCs, vSwitches and security groups (VPC 2016-04-28 and the ECS security-group calls)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from datetime import datetime

from tests.sim.aliyun.models.core import SimError, invalid, new_id, not_found


@dataclass
class Vpc:
    id: str
    region: str
    cidr_block: str
    name: str
    description: str
    created_at: datetime
    vrouter_id: str
    route_table_id: str
    resource_group_id: str
    tags: dict[str, str] = field(default_factory=dict)
    status: str = "Available"


@dataclass
class VSwitch:
    id: str
    region: str
    vpc_id: str
    zone_id: str
    cidr_block: str
    name: str
    description: str
    created_at: datetime
    tags: dict[str, str] = field(default_factory=dict)
    status: str = "Available"
    next_host: int = 253  # private addresses are handed out from the top of the range down


@dataclass
class Rule:
    id: str
    direction: str  # "ingress" | "egress"
    ip_protocol: str  # lower case: tcp, udp, icmp, gre, all, icmpv6
    port_range: str
    cidr: str  # source for ingress, destination for egress
    policy: str  # "accept" | "drop"
    priority: int
    nic_type: str
    description: str
    created_at: datetime

    def same_as(self, other: Rule) -> bool:
        fields_ = (
            "direction",
            "ip_protocol",
            "port_range",
            "cidr",
            "policy",
            "priority",
            "nic_type",
        )
        return all(getattr(self, f) == getattr(other, f) for f in fields_)


@dataclass
class SecurityGroup:
    id: str
    region: str
    vpc_id: str
    name: str
    description: str
    type: str
    created_at: datetime
    resource_group_id: str
    inner_access_policy: str = "Accept"
    tags: dict[str, str] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)


class VpcBackend:
    """AliyunBackend's VPC, vSwitch and security-group calls."""

    def create_vpc(
        self, region: str, cidr_block: str | None, name: str, description: str, tags: dict
    ) -> Vpc:
        region = self.check_region(region)
        cidr = cidr_block or "172.16.0.0/12"
        try:
            network = ipaddress.ip_network(cidr)
        except ValueError:
            raise invalid(
                "The specified CidrBlock is invalid.", "InvalidCidrBlock.Malformed"
            ) from None
        if network.version != 4 or not 8 <= network.prefixlen <= 28:
            raise invalid("The specified CidrBlock is invalid.", "InvalidCidrBlock.Malformed")
        with self.lock:
            vpc = Vpc(
                id=new_id("vpc", region),
                region=region,
                cidr_block=str(network),
                name=name,
                description=description,
                created_at=self.now(),
                vrouter_id=new_id("vrt", region),
                route_table_id=new_id("vtb", region),
                resource_group_id="rg-acfmdefault",
                tags=dict(tags),
            )
            self.vpcs[vpc.id] = vpc
            return vpc

    def vpc(self, region: str, vpc_id: str | None) -> Vpc:
        vpc = self.vpcs.get(vpc_id or "")
        if vpc is None or vpc.region != region:
            raise not_found("InvalidVpcID.NotFound", "VPC")
        return vpc

    def delete_vpc(self, region: str, vpc_id: str) -> None:
        with self.lock:
            vpc = self.vpc(region, vpc_id)
            if any(v.vpc_id == vpc.id for v in self.vswitches.values()):
                raise SimError(
                    "DependencyViolation.VSwitch",
                    "The specified VPC has vSwitches that must be deleted first.",
                    400,
                )
            if any(g.vpc_id == vpc.id for g in self.security_groups.values()):
                raise SimError(
                    "DependencyViolation.SecurityGroup",
                    "The specified VPC has security groups that must be deleted first.",
                    400,
                )
            del self.vpcs[vpc.id]

    def create_vswitch(
        self,
        region: str,
        vpc_id: str,
        zone_id: str | None,
        cidr_block: str | None,
        name: str,
        description: str,
        tags: dict,
    ) -> VSwitch:
        region = self.check_region(region)
        with self.lock:
            vpc = self.vpc(region, vpc_id)
            if not zone_id:
                raise SimError("MissingParameter", "The input parameter ZoneId is mandatory.")
            self.check_zone(region, zone_id)
            if not cidr_block:
                raise SimError("MissingParameter", "The input parameter CidrBlock is mandatory.")
            try:
                network = ipaddress.ip_network(cidr_block)
            except ValueError:
                raise invalid(
                    "The specified CidrBlock is invalid.", "InvalidCidrBlock.Malformed"
                ) from None
            if not network.subnet_of(ipaddress.ip_network(vpc.cidr_block)):  # type: ignore[arg-type]
                raise invalid(
                    "The vSwitch CIDR block must be within the VPC CIDR block.",
                    "InvalidCidrBlock.Malformed",
                )
            if not 16 <= network.prefixlen <= 29:
                raise invalid("The specified CidrBlock is invalid.", "InvalidCidrBlock.Malformed")
            for other in self.vswitches.values():
                if other.vpc_id == vpc.id and network.overlaps(
                    ipaddress.ip_network(other.cidr_block)
                ):
                    raise invalid(
                        "The specified CIDR block overlaps with another vSwitch.",
                        "InvalidCidrBlock.Overlapped",
                    )
            vswitch = VSwitch(
                id=new_id("vsw", region),
                region=region,
                vpc_id=vpc.id,
                zone_id=zone_id,
                cidr_block=str(network),
                name=name,
                description=description,
                created_at=self.now(),
                tags=dict(tags),
                next_host=network.num_addresses - 3,
            )
            self.vswitches[vswitch.id] = vswitch
            return vswitch

    def vswitch(self, region: str, vswitch_id: str | None) -> VSwitch:
        vswitch = self.vswitches.get(vswitch_id or "")
        if vswitch is None or vswitch.region != region:
            raise not_found("InvalidVSwitchId.NotFound", "vSwitch")
        return vswitch

    def delete_vswitch(self, region: str, vswitch_id: str) -> None:
        with self.lock:
            vswitch = self.vswitch(region, vswitch_id)
            if any(i.vswitch_id == vswitch.id for i in self.instances.values()):
                raise SimError(
                    "DependencyViolation",
                    "The specified vSwitch still has instances attached to it.",
                    400,
                )
            del self.vswitches[vswitch.id]

    # ------------------------------------------------------------------ security groups

    def create_security_group(
        self,
        region: str,
        vpc_id: str | None,
        name: str,
        description: str,
        group_type: str,
        tags: dict,
    ) -> SecurityGroup:
        region = self.check_region(region)
        if group_type not in ("normal", "enterprise"):
            raise invalid("The specified SecurityGroupType is not valid.")
        with self.lock:
            if not vpc_id:
                raise SimError(
                    "MissingParameter",
                    "The input parameter VpcId is mandatory (classic network is retired).",
                )
            vpc = self.vpc(region, vpc_id)
            group = SecurityGroup(
                id=new_id("sg", region),
                region=region,
                vpc_id=vpc.id,
                name=name,
                description=description,
                type=group_type,
                created_at=self.now(),
                resource_group_id="rg-acfmdefault",
                tags=dict(tags),
            )
            self.security_groups[group.id] = group
            return group

    def security_group(self, region: str, group_id: str | None) -> SecurityGroup:
        group = self.security_groups.get(group_id or "")
        if group is None or group.region != region:
            raise not_found("InvalidSecurityGroupId.NotFound", "SecurityGroupId")
        return group

    def delete_security_group(self, region: str, group_id: str) -> None:
        with self.lock:
            group = self.security_group(region, group_id)
            if any(group.id in i.security_group_ids for i in self.instances.values()):
                raise SimError(
                    "DependencyViolation",
                    "There is still instance(s) in the specified security group.",
                    403,
                )
            del self.security_groups[group.id]

    def new_rule(
        self,
        *,
        direction: str,
        ip_protocol: str,
        port_range: str,
        cidr: str,
        policy: str = "accept",
        priority: int = 1,
        nic_type: str = "intranet",
        description: str = "",
    ) -> Rule:
        """A rule from parsed values (responses.rule_of checks their formats)."""
        return Rule(
            id=new_id("sgr", "rule"),
            direction=direction,
            ip_protocol=ip_protocol,
            port_range=port_range,
            cidr=cidr,
            policy=policy,
            priority=priority,
            nic_type=nic_type,
            description=description,
            created_at=self.now(),
        )

    def authorize(self, region: str, group_id: str, rules: list[Rule]) -> list[str]:
        with self.lock:
            group = self.security_group(region, group_id)
            ids = []
            for rule in rules:
                existing = next((r for r in group.rules if r.same_as(rule)), None)
                if existing is None:  # authorising an existing rule again is a no-op
                    group.rules.append(rule)
                    existing = rule
                ids.append(existing.id)
            return ids

    def revoke(
        self, region: str, group_id: str, direction: str, rules: list[Rule], rule_ids: list[str]
    ) -> None:
        with self.lock:
            group = self.security_group(region, group_id)
            unknown = [rid for rid in rule_ids if not any(r.id == rid for r in group.rules)]
            if unknown:
                raise not_found("InvalidSecurityGroupRuleId.NotFound", "security group rule")
            group.rules = [
                r
                for r in group.rules
                if r.id not in rule_ids
                and not (r.direction == direction and any(r.same_as(x) for x in rules))
            ]
