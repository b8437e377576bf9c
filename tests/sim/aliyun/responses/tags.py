"""ECS tags: TagResources, UntagResources, ListTagResources."""

from __future__ import annotations

from typing import Any

from tests.sim.aliyun.models import (
    AliyunBackend,
    SimError,
    invalid,
)
from tests.sim.aliyun.responses.params import (
    Params,
    flag,
    indexed,
    indexed_objects,
    matches_tags,
    paginate,
    region_of,
    tags_of,
)


def _tag_resource_ids(params: Params) -> tuple[str, list[str]]:
    resource_type = params.get("ResourceType") or ""
    ids = indexed(params, "ResourceId")
    if not resource_type or not ids:
        raise SimError("MissingParameter", "ResourceType and ResourceId are mandatory.")
    return resource_type, ids


def tag_resources(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    resource_type, ids = _tag_resource_ids(params)
    tags = tags_of(params)
    with backend.lock:
        for resource_id in ids:
            backend.tag_target(region_of(params), resource_type, resource_id).update(tags)
    return {}


def untag_resources(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    resource_type, ids = _tag_resource_ids(params)
    keys = indexed(params, "TagKey")
    with backend.lock:
        for resource_id in ids:
            target = backend.tag_target(region_of(params), resource_type, resource_id)
            for key in list(target) if flag(params, "All") else keys:
                target.pop(key, None)
    return {}


def list_tag_resources(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    region = backend.check_region(region_of(params))
    resource_type = (params.get("ResourceType") or "").lower()
    ids = indexed(params, "ResourceId")
    with backend.lock:
        pool: list[tuple[str, dict[str, str]]] = []
        if resource_type == "instance":
            pool = [(i.id, i.tags) for i in backend.instances.values() if i.region == region]
        elif resource_type == "securitygroup":
            pool = [(g.id, g.tags) for g in backend.security_groups.values() if g.region == region]
        elif resource_type == "keypair":
            pool = [(p.name, p.tags) for p in backend.key_pairs.values() if p.region == region]
        else:
            raise invalid(f"The specified ResourceType {resource_type!r} is not supported.")
    wanted = indexed_objects(params, "Tag")
    rows = [
        {"ResourceId": rid, "ResourceType": resource_type, "TagKey": k, "TagValue": v}
        for rid, tags in pool
        if (not ids or rid in ids) and matches_tags(tags, wanted)
        for k, v in tags.items()
    ]
    params = {k: v for k, v in params.items() if k != "PageNumber"}
    params.setdefault("MaxResults", "50")
    page, meta = paginate(rows, params, max_size=1000, default_size=50)
    return {"NextToken": meta.get("NextToken", ""), "TagResources": {"TagResource": page}}
