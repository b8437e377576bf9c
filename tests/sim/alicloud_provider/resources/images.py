"""data "alicloud_images" (ECS DescribeImages).

Schema: a subset of alicloud/data_source_alicloud_images.go at v1.289.0. Like the real data
source: page through DescribeImages (ImageOwnerAlias = owners, Status), keep the images whose
name matches name_regex, and with most_recent keep only the newest by CreationTime. An empty
result is not an error for the real data source either; the module's `images[0]` then fails.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from tests.sim.alicloud_provider.client import ApiError
from tests.sim.alicloud_provider.resources.base import BaseDataSource, known
from tests.sim.alicloud_provider.schema import Bool, List, Number, Object, String, attr, schema

IMAGE = Object(
    {
        "id": String(),
        "image_id": String(),
        "name": String(),
        "architecture": String(),
        "creation_time": String(),
        "description": String(),
        "image_owner_alias": String(),
        "os_type": String(),
        "os_name": String(),
        "os_name_en": String(),
        "platform": String(),
        "status": String(),
        "state": String(),
        "size": Number(),
        "image_version": String(),
        "usage": String(),
    }
)


class Images(BaseDataSource):
    @classmethod
    def get_name(cls) -> str:
        return "images"

    @classmethod
    def get_schema(cls):
        return schema(
            attr("name_regex", String(), optional=True),
            attr("most_recent", Bool(), optional=True),
            attr("owners", String(), optional=True),
            attr("status", String(), optional=True),
            attr("os_type", String(), optional=True),
            attr("architecture", String(), optional=True),
            attr("instance_type", String(), optional=True),
            attr("output_file", String(), optional=True),
            attr("ids", List(String()), computed=True),
            attr("images", List(IMAGE), computed=True),
        )

    def validate(self, diags, type_name, config):
        super().validate(diags, type_name, config)
        self.check_in(diags, config, "owners", ["system", "self", "others", "marketplace", ""])
        self.check_in(
            diags,
            config,
            "status",
            ["Available", "Creating", "Waiting", "UnAvailable", "CreateFailed", "Deprecated"],
        )
        self.check_in(diags, config, "os_type", ["windows", "linux"])
        self.check_in(diags, config, "architecture", ["i386", "x86_64", "arm64"])
        regex = config.get("name_regex")
        if known(regex):
            try:
                re.compile(regex)
            except re.error as exc:
                diags.add_error(
                    f"name_regex is not a valid regular expression: {exc}", path=["name_regex"]
                )
        if all(config.get(k) is None for k in ("name_regex", "owners")):
            diags.add_error("one of `image_owner_id,name_regex,owners` must be specified")

    def read(self, ctx, config):
        request: dict[str, Any] = {"PageNumber": 1, "PageSize": 100}
        if config.get("owners"):
            request["ImageOwnerAlias"] = config["owners"]
        request["Status"] = config.get("status") or "Available"
        for key, name in (
            ("os_type", "OSType"),
            ("architecture", "Architecture"),
            ("instance_type", "InstanceType"),
        ):
            if config.get(key):
                request[name] = config[key]
        found: list[dict[str, Any]] = []
        try:
            while True:
                body = self.client.ecs("DescribeImages", request)
                page = (body.get("Images") or {}).get("Image") or []
                found.extend(page)
                if len(page) < 100:
                    break
                request["PageNumber"] += 1
        except ApiError as exc:
            self.api_error(ctx.diagnostics, "reading data alicloud_images", exc)
            return None
        if config.get("name_regex"):
            pattern = re.compile(config["name_regex"])
            found = [i for i in found if i.get("ImageName") and pattern.search(i["ImageName"])]
        found.sort(key=lambda i: i.get("CreationTime", ""), reverse=True)
        if config.get("most_recent") and found:
            found = found[:1]
        images = [
            {
                "id": i["ImageId"],
                "image_id": i["ImageId"],
                "name": i.get("ImageName", ""),
                "architecture": i.get("Architecture", ""),
                "creation_time": i.get("CreationTime", ""),
                "description": i.get("Description", ""),
                "image_owner_alias": i.get("ImageOwnerAlias", ""),
                "os_type": i.get("OSType", ""),
                "os_name": i.get("OSName", ""),
                "os_name_en": i.get("OSNameEn", ""),
                "platform": i.get("Platform", ""),
                "status": i.get("Status", ""),
                "state": i.get("Status", ""),
                "size": i.get("Size", 0),
                "image_version": i.get("ImageVersion", ""),
                "usage": i.get("Usage", ""),
            }
            for i in found
        ]
        ids = [i["id"] for i in images]
        return {
            **config,
            "id": hashlib.sha256(",".join(ids).encode()).hexdigest()[:16],
            "ids": ids,
            "images": images,
        }
