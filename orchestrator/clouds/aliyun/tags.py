"""Aliyun: list what carries orch's tags (instances, security groups, key pairs, VPCs,
vSwitches, RAM roles and policies), all pages. ECS resources through the ECS SDK, VPC resources
through the VPC API, RAM ones through the RAM API.

`tags` filters: every given tag must be present (value None: any value).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from orchestrator.clouds.aliyun.client import call, ecs_client, vpc_rpc
from orchestrator.clouds.base import BOX_TAG
from orchestrator.clouds.values import TaggedResource

Tags = dict[str, str | None]
PAGE_SIZE = 50  # PageNumber-paged calls: DescribeKeyPairs, and the VPC API's listings


def _ecs_tags(item: Any) -> dict[str, str]:
    tags = getattr(getattr(item, "tags", None), "tag", None) or []
    return {t.tag_key: t.tag_value or "" for t in tags}


def _token_pages(fetch: Callable[[str | None], Any]) -> Iterator[Any]:
    """The body of each page of a NextToken-paged ECS call, from the first (`fetch(token)`
    asks for one page; the last page has no next_token)."""
    token: str | None = None
    while True:
        body = fetch(token)
        yield body
        token = body.next_token
        if not token:
            return


def _numbered_pages(fetch: Callable[[int], tuple[list[Any], int]]) -> Iterator[Any]:
    """Every item of a PageNumber/PageSize-paged call, page 1 first (`fetch(n)` returns page
    n's items and the TotalCount); a short page or the total ends it."""
    number = 1
    while True:
        items, total = fetch(number)
        yield from items
        if len(items) < PAGE_SIZE or number * PAGE_SIZE >= total:
            return
        number += 1


def list_tagged_instances(region: str, tags: Tags) -> list[TaggedResource]:
    """Instances carrying every given tag; `name` is the instance type, `state` its Status."""
    from alibabacloud_ecs20140526 import models

    client = ecs_client(region)
    filters = [
        models.DescribeInstancesRequestTag(key=key, value=value) for key, value in tags.items()
    ]

    def page(token: str | None) -> Any:
        request = models.DescribeInstancesRequest(
            region_id=region, tag=filters or None, max_results=100, next_token=token
        )
        return call("DescribeInstances", lambda: client.describe_instances(request)).body

    return [
        TaggedResource(
            "instance",
            item.instance_id,
            item.instance_type or "",
            _ecs_tags(item),
            region=region,
            state=item.status or "",
        )
        for body in _token_pages(page)
        for item in ((body.instances.instance or []) if body.instances else [])
    ]


def list_tagged_security_groups(region: str, tags: Tags) -> list[TaggedResource]:
    from alibabacloud_ecs20140526 import models

    client = ecs_client(region)
    filters = [
        models.DescribeSecurityGroupsRequestTag(key=key, value=value) for key, value in tags.items()
    ]

    def page(token: str | None) -> Any:
        request = models.DescribeSecurityGroupsRequest(
            region_id=region, tag=filters or None, max_results=100, next_token=token
        )
        return call("DescribeSecurityGroups", lambda: client.describe_security_groups(request)).body

    return [
        TaggedResource(
            "security_group",
            group.security_group_id,
            group.security_group_name or "",
            _ecs_tags(group),
            region=region,
            vpc_id=group.vpc_id or "",
        )
        for body in _token_pages(page)
        for group in ((body.security_groups.security_group if body.security_groups else None) or [])
    ]


def list_tagged_key_pairs(region: str, tags: Tags) -> list[TaggedResource]:
    """Key pairs: `id` is the key pair's name (the API has no other id)."""
    from alibabacloud_ecs20140526 import models

    client = ecs_client(region)
    filters = [
        models.DescribeKeyPairsRequestTag(key=key, value=value) for key, value in tags.items()
    ]

    def page(number: int) -> tuple[list[Any], int]:
        request = models.DescribeKeyPairsRequest(
            region_id=region, tag=filters or None, page_number=number, page_size=PAGE_SIZE
        )
        body = call("DescribeKeyPairs", lambda: client.describe_key_pairs(request)).body
        pairs = (body.key_pairs.key_pair if body.key_pairs else None) or []
        return pairs, int(body.total_count or 0)

    return [
        TaggedResource("key_pair", pair.key_pair_name, pair.key_pair_name, _ecs_tags(pair), region)
        for pair in _numbered_pages(page)
    ]


def _vpc_tag_query(tags: Tags) -> dict[str, str]:
    query: dict[str, str] = {}
    for index, (key, value) in enumerate(tags.items(), start=1):
        query[f"Tag.{index}.Key"] = key
        if value is not None:
            query[f"Tag.{index}.Value"] = value
    return query


def _vpc_tags(raw: Any) -> dict[str, str]:
    items = (raw or {}).get("Tag") or []
    return {item["Key"]: item.get("Value", "") for item in items if "Key" in item}


def _list_vpc_api(
    region: str, action: str, tags: Tags, wrapper: str, item: str
) -> list[dict[str, Any]]:
    def page(number: int) -> tuple[list[Any], int]:
        query = {**_vpc_tag_query(tags), "PageNumber": number, "PageSize": PAGE_SIZE}
        body = vpc_rpc(region, action, query)
        return ((body.get(wrapper) or {}).get(item)) or [], int(body.get("TotalCount") or 0)

    return list(_numbered_pages(page))


def list_tagged_vpcs(region: str, tags: Tags) -> list[TaggedResource]:
    """VPCs, via the VPC API's DescribeVpcs."""
    return [
        TaggedResource(
            "vpc", raw["VpcId"], raw.get("VpcName", ""), _vpc_tags(raw.get("Tags")), region
        )
        for raw in _list_vpc_api(region, "DescribeVpcs", tags, "Vpcs", "Vpc")
    ]


def list_tagged_vswitches(region: str, tags: Tags) -> list[TaggedResource]:
    """vSwitches, via DescribeVSwitches."""
    return [
        TaggedResource(
            "vswitch",
            raw["VSwitchId"],
            raw.get("VSwitchName", ""),
            _vpc_tags(raw.get("Tags")),
            region,
            vpc_id=raw.get("VpcId", ""),
        )
        for raw in _list_vpc_api(region, "DescribeVSwitches", tags, "VSwitches", "VSwitch")
    ]


def list_tagged_resources(region: str, tags: Tags) -> list[TaggedResource]:
    """Everything above, instances first, then the boxes' RAM roles and policies (global, but
    tagged with their region: clouds/aliyun/ram.py), then clusters' deployment sets (untagged:
    found by name and given their box's tags, clouds/aliyun/deployment_sets.py)."""
    from orchestrator.clouds.aliyun.deployment_sets import list_deployment_sets, with_box_tags
    from orchestrator.clouds.aliyun.ram import list_tagged as list_tagged_ram

    found = list_tagged_instances(region, tags)
    for lister in (
        list_tagged_security_groups,
        list_tagged_key_pairs,
        list_tagged_vswitches,
        list_tagged_vpcs,
        list_tagged_ram,
    ):
        found += lister(region, tags)
    box = tags.get(BOX_TAG) if set(tags) == {BOX_TAG} else None
    sets = with_box_tags(list_deployment_sets(region, box), found)
    return found + [s for s in sets if _matches(s.tags, tags)]


def _matches(have: dict[str, str], wanted: Tags) -> bool:
    return all(k in have and (v is None or have[k] == v) for k, v in wanted.items())
