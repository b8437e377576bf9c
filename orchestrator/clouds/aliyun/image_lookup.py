"""Finding an Aliyun image by name pattern: the newest match that DescribeImages lists (what
Terraform's data "alicloud_images" picks). Online; `orch plan` never loads it (images.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.errors import OrchError


@dataclass(frozen=True, slots=True)
class Image:
    """An ECS image as DescribeImages returns it."""

    id: str
    name: str
    creation_time: str
    os_name: str


def find_image(region: str, name_regex: str, owners: str = "system") -> Image:
    """The newest image whose name matches `name_regex` (what data "alicloud_images" picks)."""
    from alibabacloud_ecs20140526 import models

    from orchestrator.clouds.aliyun.client import call, ecs_client

    pattern = re.compile(name_regex)
    client = ecs_client(region)
    found: list[Image] = []
    page = 1
    while True:
        request = models.DescribeImagesRequest(
            region_id=region,
            image_owner_alias=owners or None,
            status="Available",
            page_number=page,
            page_size=100,
        )
        body = call("DescribeImages", lambda r=request: client.describe_images(r)).body
        images = body.images.image if body.images and body.images.image else []
        for item in images:
            if item.image_name and pattern.search(item.image_name):
                found.append(
                    Image(
                        item.image_id,
                        item.image_name,
                        item.creation_time or "",
                        item.osname_en or "",
                    )
                )
        if len(images) < 100:
            break
        page += 1
    if not found:
        raise OrchError(
            f"no {owners or 'visible'} image in {region} matches {name_regex!r}",
            hint="check the image name pattern with `aliyun ecs DescribeImages`",
        )
    return max(found, key=lambda image: image.creation_time)
