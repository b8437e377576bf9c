"""alicloud_vpc and alicloud_vswitch (VPC API 2016-04-28).

Schemas: subsets of alicloud/resource_alicloud_vpc.go and alicloud/resource_alicloud_vswitch.go
at v1.289.0. The real provider creates with CreateVpc / CreateVSwitch, waits for Status
"Available", reads with DescribeVpcAttribute / DescribeVSwitchAttributes, and deletes with
DeleteVpc / DeleteVSwitch, retrying while dependents are still being released.
"""

from __future__ import annotations

from typing import Any

from tests.sim.alicloud_provider.client import ApiError, retry, tags_from, tags_param, wait_for
from tests.sim.alicloud_provider.resources.base import BaseResource, known
from tests.sim.alicloud_provider.schema import Bool, Map, Number, String, attr, schema

_VPC_GONE = ("InvalidVpcID.NotFound", "Forbidden.VpcNotFound")
_VSW_GONE = ("InvalidVSwitchId.NotFound",)


class Vpc(BaseResource):
    # resource_alicloud_vpc.go (v1.289.0): cidr_block O+C; vpc_name O+C (ConflictsWith name);
    # description O; tags O (tagsSchema); status, router_id, route_table_id, create_time,
    # region_id C; resource_group_id O+C; enable_ipv6 O+C; is_default O+C+ForceNew.
    TAGS = ("vpc", "VPC")

    @classmethod
    def get_name(cls) -> str:
        return "vpc"

    @classmethod
    def get_schema(cls):
        return schema(
            attr("cidr_block", String(), optional=True, computed=True),
            attr("vpc_name", String(), optional=True, computed=True),
            attr("description", String(), optional=True),
            attr("tags", Map(String()), optional=True),
            attr("resource_group_id", String(), optional=True, computed=True),
            attr("enable_ipv6", Bool(), optional=True, computed=True),
            attr("is_default", Bool(), optional=True, computed=True, force_new=True),
            attr("status", String(), computed=True),
            attr("router_id", String(), computed=True),
            attr("route_table_id", String(), computed=True),
            attr("create_time", String(), computed=True),
            attr("region_id", String(), computed=True),
        )

    def _read(self, vpc_id: str, prior: dict[str, Any]) -> dict[str, Any] | None:
        try:
            body = self.client.vpc("DescribeVpcAttribute", {"VpcId": vpc_id})
        except ApiError as exc:
            if exc.code in _VPC_GONE:
                return None
            raise
        return {
            **prior,
            "id": body["VpcId"],
            "cidr_block": body["CidrBlock"],
            "vpc_name": body.get("VpcName", ""),
            "description": body.get("Description") or prior.get("description"),
            "tags": tags_from(body.get("Tags"), "Key", "Value") or prior.get("tags"),
            "resource_group_id": body.get("ResourceGroupId", ""),
            "enable_ipv6": False,
            "is_default": bool(body.get("IsDefault")),
            "status": body.get("Status", ""),
            "router_id": body.get("VRouterId", ""),
            "route_table_id": prior.get("route_table_id") or "",
            "create_time": body.get("CreationTime", ""),
            "region_id": body.get("RegionId", ""),
        }

    def create(self, ctx, planned):
        request = {
            "CidrBlock": planned.get("cidr_block") if known(planned.get("cidr_block")) else None,
            "VpcName": planned.get("vpc_name") if known(planned.get("vpc_name")) else None,
            "Description": planned.get("description"),
            "Tag": tags_param(planned.get("tags")),
        }
        try:
            body = self.client.vpc("CreateVpc", request)
            vpc_id = body["VpcId"]
            wait_for(
                lambda: self.client.vpc("DescribeVpcAttribute", {"VpcId": vpc_id}),
                lambda b: b.get("Status") == "Available",
                timeout_s=300,
            )
            state = self._read(vpc_id, {**planned, "route_table_id": body.get("RouteTableId", "")})
        except (ApiError, TimeoutError) as exc:
            self.api_error(ctx.diagnostics, "creating alicloud_vpc", exc)
            return None
        return state

    def read(self, ctx, current):
        try:
            return self._read(current["id"], current)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "reading alicloud_vpc", exc)
            return current

    def delete(self, ctx, current):
        try:
            retry(
                lambda: self.client.vpc("DeleteVpc", {"VpcId": current["id"]}),
                codes=("DependencyViolation.VSwitch", "DependencyViolation.SecurityGroup"),
                timeout_s=120,
            )
        except ApiError as exc:
            if exc.code not in _VPC_GONE:
                self.api_error(ctx.diagnostics, "deleting alicloud_vpc", exc)
                return current
        return None


class VSwitch(BaseResource):
    # resource_alicloud_vswitch.go (v1.289.0): vpc_id O+C+ForceNew; cidr_block O+C+ForceNew;
    # zone_id O+C+ForceNew (ExactlyOneOf zone_id/availability_zone); vswitch_name O+C;
    # description O; tags O; status, create_time C; enable_ipv6 O+C.
    TAGS = ("vpc", "VSWITCH")

    @classmethod
    def get_name(cls) -> str:
        return "vswitch"

    @classmethod
    def get_schema(cls):
        return schema(
            attr("vpc_id", String(), optional=True, computed=True, force_new=True),
            attr("cidr_block", String(), optional=True, computed=True, force_new=True),
            attr("zone_id", String(), optional=True, computed=True, force_new=True),
            attr("vswitch_name", String(), optional=True, computed=True),
            attr("description", String(), optional=True),
            attr("tags", Map(String()), optional=True),
            attr("enable_ipv6", Bool(), optional=True, computed=True),
            attr("ipv6_cidr_block_mask", Number(), optional=True, computed=True),
            attr("status", String(), computed=True),
            attr("create_time", String(), computed=True),
        )

    def validate(self, diags, type_name, config):
        super().validate(diags, type_name, config)
        if config.get("zone_id") is None:
            diags.add_error('"zone_id": one of `availability_zone,zone_id` must be specified')

    def _read(self, vswitch_id: str, prior: dict[str, Any]) -> dict[str, Any] | None:
        try:
            body = self.client.vpc("DescribeVSwitchAttributes", {"VSwitchId": vswitch_id})
        except ApiError as exc:
            if exc.code in _VSW_GONE:
                return None
            raise
        return {
            **prior,
            "id": body["VSwitchId"],
            "vpc_id": body["VpcId"],
            "cidr_block": body["CidrBlock"],
            "zone_id": body["ZoneId"],
            "vswitch_name": body.get("VSwitchName", ""),
            "description": body.get("Description") or prior.get("description"),
            "tags": tags_from(body.get("Tags"), "Key", "Value") or prior.get("tags"),
            "enable_ipv6": False,
            "ipv6_cidr_block_mask": prior.get("ipv6_cidr_block_mask")
            if known(prior.get("ipv6_cidr_block_mask"))
            else 0,
            "status": body.get("Status", ""),
            "create_time": body.get("CreationTime", ""),
        }

    def create(self, ctx, planned):
        request = {
            "VpcId": planned.get("vpc_id"),
            "ZoneId": planned.get("zone_id"),
            "CidrBlock": planned.get("cidr_block"),
            "VSwitchName": planned.get("vswitch_name")
            if known(planned.get("vswitch_name"))
            else None,
            "Description": planned.get("description"),
            "Tag": tags_param(planned.get("tags")),
        }
        try:
            vswitch_id = self.client.vpc("CreateVSwitch", request)["VSwitchId"]
            wait_for(
                lambda: self.client.vpc("DescribeVSwitchAttributes", {"VSwitchId": vswitch_id}),
                lambda b: b.get("Status") == "Available",
                timeout_s=300,
            )
            return self._read(vswitch_id, planned)
        except (ApiError, TimeoutError) as exc:
            self.api_error(ctx.diagnostics, "creating alicloud_vswitch", exc)
            return None

    def read(self, ctx, current):
        try:
            return self._read(current["id"], current)
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "reading alicloud_vswitch", exc)
            return current

    def delete(self, ctx, current):
        try:
            retry(
                lambda: self.client.vpc("DeleteVSwitch", {"VSwitchId": current["id"]}),
                codes=("DependencyViolation", "IncorrectVSwitchStatus"),
                timeout_s=120,
            )
        except ApiError as exc:
            if exc.code not in _VSW_GONE:
                self.api_error(ctx.diagnostics, "deleting alicloud_vswitch", exc)
                return current
        return None
