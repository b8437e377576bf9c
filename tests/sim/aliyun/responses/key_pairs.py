"""ECS key pairs: ImportKeyPair, DescribeKeyPairs, DeleteKeyPairs."""

from __future__ import annotations

from typing import Any

from tests.sim.aliyun.models import (
    AliyunBackend,
    SimError,
    fmt_time,
)
from tests.sim.aliyun.responses.params import (
    Params,
    ecs_tags,
    indexed_objects,
    json_list,
    matches_tags,
    paginate,
    region_of,
    tags_of,
)


def import_key_pair(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    pair = backend.import_key_pair(
        region_of(params),
        params.get("KeyPairName"),
        params.get("PublicKeyBody", ""),
        tags_of(params),
    )
    return {"KeyPairName": pair.name, "KeyPairFingerPrint": pair.fingerprint}


def describe_key_pairs(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    import fnmatch

    region = backend.check_region(region_of(params))
    with backend.lock:
        pairs = sorted(
            (p for p in backend.key_pairs.values() if p.region == region), key=lambda p: p.name
        )
    if params.get("KeyPairName"):
        pairs = [p for p in pairs if fnmatch.fnmatchcase(p.name, params["KeyPairName"])]
    if params.get("KeyPairFingerPrint"):
        pairs = [p for p in pairs if p.fingerprint == params["KeyPairFingerPrint"]]
    wanted_tags = indexed_objects(params, "Tag")
    if wanted_tags:
        pairs = [p for p in pairs if matches_tags(p.tags, wanted_tags)]
    page, meta = paginate(pairs, params, max_size=50)
    return {
        **meta,
        "KeyPairs": {
            "KeyPair": [
                {
                    "KeyPairName": p.name,
                    "KeyPairFingerPrint": p.fingerprint,
                    "PublicKey": p.public_key,
                    "CreationTime": fmt_time(p.created_at),
                    "ResourceGroupId": p.resource_group_id,
                    "Tags": ecs_tags(p.tags),
                }
                for p in page
            ]
        },
    }


def delete_key_pairs(backend: AliyunBackend, params: Params) -> dict[str, Any]:
    names = json_list(params, "KeyPairNames")
    if not names:
        raise SimError("MissingParameter", "The input parameter KeyPairNames is mandatory.")
    backend.delete_key_pairs(backend.check_region(region_of(params)), names)
    return {}
