"""Flat RPC parameters in: indexed lists (`Tag.1.Key`), JSON-array parameters, flags,
numbers, regions, pagination and tag filters."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Any

from tests.sim.aliyun.models import (
    AliyunBackend,
    invalid,
)

Params = dict[str, str]
Handler = Callable[[AliyunBackend, Params], dict[str, Any]]


def indexed(params: Params, prefix: str) -> list[str]:
    """`Prefix.1`, `Prefix.2`, ... in index order."""
    found = []
    for key, value in params.items():
        head, _, index = key.rpartition(".")
        if head == prefix and index.isdigit():
            found.append((int(index), value))
    return [value for _, value in sorted(found)]


def indexed_objects(params: Params, prefix: str) -> list[dict[str, str]]:
    """`Prefix.1.Field=...` -> [{"Field": ...}, ...] in index order."""
    objects: dict[int, dict[str, str]] = {}
    start = prefix + "."
    for key, value in params.items():
        if not key.startswith(start):
            continue
        index, _, name = key[len(start) :].partition(".")
        if index.isdigit() and name:
            objects.setdefault(int(index), {})[name] = value
    return [objects[i] for i in sorted(objects)]


def tags_of(params: Params, prefix: str = "Tag") -> dict[str, str]:
    tags = {}
    for item in indexed_objects(params, prefix):
        key = item.get("Key")
        if key:
            if key.startswith(("aliyun", "acs:")):
                raise invalid(
                    "The tag key cannot start with aliyun or acs:.", "InvalidTagKey.Malformed"
                )
            tags[key] = item.get("Value", "")
    return tags


def json_list(params: Params, name: str) -> list[str] | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid(
            f"The specified {name} is not a valid JSON array.", f"Invalid{name}.Malformed"
        )
    return value


def flag(params: Params, name: str) -> bool:
    return str(params.get(name, "")).lower() == "true"


def integer(params: Params, name: str, default: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise invalid(f"The specified {name} is not a valid integer.") from None


def region_of(params: Params) -> str:
    return params.get("RegionId", "")


def paginate(
    items: list[Any], params: Params, *, max_size: int = 100, default_size: int = 10
) -> tuple[list[Any], dict[str, Any]]:
    """PageNumber/PageSize paging, or NextToken/MaxResults when either of those is given."""
    if "NextToken" in params or "MaxResults" in params:
        size = integer(params, "MaxResults", default_size)
        token = params.get("NextToken") or ""
        try:
            start = int(base64.b64decode(token).decode()) if token else 0
        except (binascii.Error, ValueError):
            raise invalid(
                "The specified NextToken is not valid.", "InvalidNextToken.Malformed"
            ) from None
        if not 1 <= size <= max_size:
            raise invalid("The specified MaxResults is out of range.")
        page = items[start : start + size]
        more = start + size < len(items)
        token_out = base64.b64encode(str(start + size).encode()).decode() if more else ""
        return page, {"NextToken": token_out, "TotalCount": len(items), "PageSize": size}
    number = integer(params, "PageNumber", 1)
    size = integer(params, "PageSize", default_size)
    if number < 1 or not 1 <= size <= max_size:
        raise invalid("The specified PageNumber or PageSize is out of range.")
    start = (number - 1) * size
    return items[start : start + size], {
        "PageNumber": number,
        "PageSize": size,
        "TotalCount": len(items),
    }


def ecs_tags(tags: dict[str, str]) -> dict[str, Any]:
    return {"Tag": [{"TagKey": k, "TagValue": v} for k, v in tags.items()]}


def vpc_tags(tags: dict[str, str]) -> dict[str, Any]:
    return {"Tag": [{"Key": k, "Value": v} for k, v in tags.items()]}


def matches_tags(have: dict[str, str], wanted: list[dict[str, str]]) -> bool:
    for item in wanted:
        key = item.get("Key")
        if key is None:
            continue
        if key not in have:
            return False
        if "Value" in item and have[key] != item["Value"]:
            return False
    return True
