"""VPC (2016-04-28): VPCs and vSwitches."""

from __future__ import annotations

import ipaddress
from typing import Any

from tests.sim.aliyun.models import (
    AliyunBackend,
    fmt_time,
)
from tests.sim.aliyun.responses.params import (
    Params,
    indexed_objects,
    matches_tags,
    paginate,
    region_of,
    tags_of,
    vpc_tags,
)


def create_vpc(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    vpc = backend.create_vpc(
        region_of(params),
        params.get("CidrBlock"),
        params.get("VpcName", ""),
        params.get("Description", ""),
        tags_of(params),
    )
    return {
        "VpcId": vpc.id,
        "VRouterId": vpc.vrouter_id,
        "RouteTableId": vpc.route_table_id,
        "ResourceGroupId": vpc.resource_group_id,
    }


def _vpc_shape(backend: AliyunBackend, vpc: Any) -> dict[str, Any]:
    return {
        "VpcId": vpc.id,
        "RegionId": vpc.region,
        "Status": vpc.status,
        "VpcName": vpc.name,
        "Description": vpc.description,
        "CidrBlock": vpc.cidr_block,
        "VRouterId": vpc.vrouter_id,
        "IsDefault": False,
        "CreationTime": fmt_time(vpc.created_at),
        "ResourceGroupId": vpc.resource_group_id,
        "VSwitchIds": {
            "VSwitchId": [v.id for v in backend.vswitches.values() if v.vpc_id == vpc.id]
        },
        "UserCidrs": {"UserCidr": []},
        "Tags": vpc_tags(vpc.tags),
    }


def describe_vpcs(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = backend.check_region(region_of(params))
    with backend.lock:
        vpcs = sorted((v for v in backend.vpcs.values() if v.region == region), key=lambda v: v.id)
        if params.get("VpcId"):
            wanted = {v.strip() for v in params["VpcId"].split(",")}
            vpcs = [v for v in vpcs if v.id in wanted]
        if params.get("VpcName"):
            vpcs = [v for v in vpcs if v.name == params["VpcName"]]
        wanted_tags = indexed_objects(params, "Tag")
        if wanted_tags:
            vpcs = [v for v in vpcs if matches_tags(v.tags, wanted_tags)]
        page, meta = paginate(vpcs, params, max_size=50)
        return {**meta, "Vpcs": {"Vpc": [_vpc_shape(backend, v) for v in page]}}


def describe_vpc_attribute(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        return _vpc_shape(backend, backend.vpc(region_of(params), params.get("VpcId")))


def delete_vpc(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    backend.delete_vpc(region_of(params), params.get("VpcId", ""))
    return {}


def create_vswitch(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    vswitch = backend.create_vswitch(
        region_of(params),
        params.get("VpcId", ""),
        params.get("ZoneId"),
        params.get("CidrBlock"),
        params.get("VSwitchName", ""),
        params.get("Description", ""),
        tags_of(params),
    )
    return {"VSwitchId": vswitch.id}


def _vswitch_shape(backend: AliyunBackend, vswitch: Any) -> dict[str, Any]:

    used = sum(i.vswitch_id == vswitch.id for i in backend.instances.values())
    total = ipaddress.ip_network(vswitch.cidr_block).num_addresses - 4
    return {
        "VSwitchId": vswitch.id,
        "VpcId": vswitch.vpc_id,
        "ZoneId": vswitch.zone_id,
        "RegionId": vswitch.region,
        "CidrBlock": vswitch.cidr_block,
        "VSwitchName": vswitch.name,
        "Description": vswitch.description,
        "Status": vswitch.status,
        "CreationTime": fmt_time(vswitch.created_at),
        "AvailableIpAddressCount": total - used,
        "IsDefault": False,
        "ResourceGroupId": "rg-acfmdefault",
        "Tags": vpc_tags(vswitch.tags),
    }


def describe_vswitches(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = backend.check_region(region_of(params))
    with backend.lock:
        items = sorted(
            (v for v in backend.vswitches.values() if v.region == region), key=lambda v: v.id
        )
        for name, attr in (("VpcId", "vpc_id"), ("VSwitchId", "id"), ("ZoneId", "zone_id")):
            if params.get(name):
                items = [v for v in items if getattr(v, attr) == params[name]]
        if params.get("VSwitchName"):
            items = [v for v in items if v.name == params["VSwitchName"]]
        wanted_tags = indexed_objects(params, "Tag")
        if wanted_tags:
            items = [v for v in items if matches_tags(v.tags, wanted_tags)]
        page, meta = paginate(items, params, max_size=50)
        return {**meta, "VSwitches": {"VSwitch": [_vswitch_shape(backend, v) for v in page]}}


def describe_vswitch_attributes(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    with backend.lock:
        return _vswitch_shape(backend, backend.vswitch(region_of(params), params.get("VSwitchId")))


def delete_vswitch(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    vswitch_id = params.get("VSwitchId", "")
    vswitch = backend.vswitches.get(vswitch_id)
    region = params.get("RegionId") or (vswitch.region if vswitch else "")
    backend.delete_vswitch(region, vswitch_id)
    return {}
