"""AliyunCloud: Alibaba Cloud ECS behind orchestrator.clouds.registry.Cloud.

Imported by the registry on first use; the modules that need the SDK load inside the methods.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.clouds.aliyun.box_metadata import BOX_METADATA
from orchestrator.clouds.base import BOX_TAG, BoxRequest, ErrorKind, ImageChoice, LocalSetup
from orchestrator.resources import resource_path

if TYPE_CHECKING:  # online calls' values: loaded by the calls, never by a plan
    from orchestrator.clouds.values import (
        AgentTransport,
        Credentials,
        InstanceState,
        ObjectStore,
        PriceApi,
        TaggedResource,
        VcpuQuota,
    )

# OSS endpoints: oss-REGION[-internal].aliyuncs.com, its S3-compatible s3.oss-REGION...,
# the acceleration endpoints oss-accelerate[-overseas].aliyuncs.com, each also as BUCKET.HOST
# (https://www.alibabacloud.com/help/en/oss/user-guide/regions-and-endpoints).
_OSS_HOST = re.compile(r"(?:[a-z0-9.-]+\.)?oss-[a-z0-9-]+\.aliyuncs\.com")
# OSS accepts only virtual-hosted-style requests, "for security reasons, not path-style URLs"
# (https://www.alibabacloud.com/help/en/oss/developer-reference/overview-24), and PutObject has
# no If-Match compare-and-swap: its one write condition, x-oss-forbid-overwrite, is
# create-only (https://www.alibabacloud.com/help/en/oss/developer-reference/putobject).

# The root-module templates live with the renderer (orchestrator/provision/templates/<cloud>).
_TEMPLATES = Path(__file__).resolve().parents[2] / "provision" / "templates" / "aliyun"


class AliyunCloud:
    name = "aliyun"
    title = "Aliyun"
    reserved_tag_prefixes = ("acs:", "aliyun")  # ECS rejects tag keys starting with these
    agent_via = "cloud-assistant"
    box_metadata = BOX_METADATA  # its instance metadata service, for the box-side agent
    # Plan rules (orchestrator/plan_validate.py): region ids (cn-hangzhou, ap-southeast-1),
    # the ECS system disk's 2048 GiB limit (smaller than 20 GiB is raised to 20 at render).
    region_re = re.compile(r"[a-z]{2}-[a-z]+(-[0-9]{1,2})?")
    root_volume_gib_max = 2048
    image_keys = ("id", "name_regex", "owners")
    # ImportKeyPair takes rsa, dsa, ssh-rsa, ssh-dss and ecdsa keys only, no ed25519
    # (https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-importkeypair).
    ssh_key_type = "rsa"
    # A cluster lives in a deployment set, and "spot (preemptible) instances cannot be created
    # in a deployment set" (ECS "Deployment sets", limits,
    # https://www.alibabacloud.com/help/zh/doc-detail/91258.htm): `orch plan` offers no spot
    # Aliyun cluster (sizing/select.py), and terraform.py refuses one.
    spot_clusters = False
    # A cluster's nodes in its box root module (templates/aliyun: module "box";
    # terraform/modules/aliyun_gpu/main.tf: alicloud_instance.this, count = node_count).
    node_resource = "module.box.alicloud_instance.this"

    def catalog_file(self) -> Path | None:
        return None  # orchestrator/catalog/data/aliyun.toml

    def object_store(self, host: str) -> ObjectStore | None:
        if not _OSS_HOST.fullmatch(host.lower().rstrip(".")):
            return None
        from orchestrator.clouds.values import ObjectStore

        return ObjectStore("Alibaba OSS", conditional_writes=False, path_style=False)

    def image_for(self, instance: Any) -> ImageChoice:
        from orchestrator.clouds.aliyun.images import image_for

        return image_for(instance)

    def price_api(self) -> PriceApi:
        from orchestrator.clouds.aliyun.prices import PRICE_API

        return PRICE_API

    def module_dir(self) -> Path:
        return resource_path("terraform/modules/aliyun_gpu")

    def templates_dir(self) -> Path:
        return _TEMPLATES

    def outputs(self) -> tuple[str, ...]:
        from orchestrator.clouds.aliyun.terraform import OUTPUTS

        return OUTPUTS

    def tfvars(self, request: BoxRequest) -> dict[str, Any]:
        from orchestrator.clouds.aliyun.terraform import tfvars

        return tfvars(request)

    def local_setup(self) -> LocalSetup:
        from orchestrator.clouds.aliyun.setup import local_setup

        return local_setup()

    def credentials(self) -> Credentials:
        from orchestrator.clouds.aliyun.credentials import credentials

        return credentials()

    def runtime_env(self) -> dict[str, str]:
        from orchestrator.clouds.aliyun.terraform import runtime_env

        return runtime_env()

    def zones_with_stock(self, region: str, instance_type: str, spot: bool) -> list[str] | None:
        from orchestrator.clouds.aliyun.stock import check_stock

        return check_stock(region, instance_type, spot)

    def vcpu_quota(self, region: str, instance_type: str, spot: bool) -> VcpuQuota | None:
        from orchestrator.clouds.aliyun.quotas import vcpu_quota

        return vcpu_quota(region, instance_type, spot)

    def error_kind(self, code: str) -> ErrorKind:
        from orchestrator.clouds.aliyun.errors import error_kind

        return error_kind(code)

    def failover_codes(self) -> tuple[str, ...]:
        from orchestrator.clouds.aliyun.errors import CAPACITY_CODES, QUOTA_CODES

        return tuple(sorted(CAPACITY_CODES | QUOTA_CODES))

    def list_tagged(self, region: str, box: str | None = None) -> list[TaggedResource]:
        from orchestrator.clouds.aliyun.tags import list_tagged_resources

        return list_tagged_resources(region, {BOX_TAG: box})

    def delete_tagged(self, region: str, resources: list[TaggedResource]) -> None:
        from orchestrator.clouds.aliyun.cleanup import delete_tagged

        delete_tagged(region, resources)

    def instance_state(self, region: str, instance_id: str) -> InstanceState:
        from orchestrator.clouds.aliyun.state import instance_state

        return instance_state(region, instance_id)

    def agent_transport(self, instance_id: str, region: str) -> AgentTransport:
        from orchestrator.clouds.aliyun.agent import CloudAssistantTransport

        return CloudAssistantTransport(instance_id, region)
