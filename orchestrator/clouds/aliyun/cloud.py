"""AliyunCloud: Alibaba Cloud ECS behind orchestrator.clouds.registry.Cloud.

Imported by the registry on first use; the modules that need the SDK load inside the methods.
The required members it shares with aws are packaged.py's; the capabilities are its own.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from orchestrator.clouds.aliyun.box_metadata import BOX_METADATA
from orchestrator.clouds.base import BOX_TAG
from orchestrator.clouds.packaged import PackagedCloud

if TYPE_CHECKING:  # online calls' values: loaded by the calls, never by a plan
    from orchestrator.clouds.values import (
        AgentTransport,
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


class AliyunCloud(PackagedCloud):
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

    def object_store(self, host: str) -> ObjectStore | None:
        if not _OSS_HOST.fullmatch(host.lower().rstrip(".")):
            return None
        from orchestrator.clouds.values import ObjectStore

        return ObjectStore("Alibaba OSS", conditional_writes=False, path_style=False)

    def check_subnet_id(self, subnet_id: str) -> str:
        from orchestrator.clouds.aliyun.terraform import check_subnet_id

        return check_subnet_id(subnet_id)

    def price_api(self) -> PriceApi:
        from orchestrator.clouds.aliyun.prices import PRICE_API

        return PRICE_API

    def zones_with_stock(self, region: str, instance_type: str, spot: bool) -> list[str] | None:
        from orchestrator.clouds.aliyun.stock import check_stock

        return check_stock(region, instance_type, spot)

    def vcpu_quota(self, region: str, instance_type: str, spot: bool) -> VcpuQuota | None:
        from orchestrator.clouds.aliyun.quotas import vcpu_quota

        return vcpu_quota(region, instance_type, spot)

    def list_tagged(self, region: str, box: str | None = None) -> list[TaggedResource]:
        from orchestrator.clouds.aliyun.tags import list_tagged_resources

        return list_tagged_resources(region, {BOX_TAG: box})

    def instance_state(self, region: str, instance_id: str) -> InstanceState:
        from orchestrator.clouds.aliyun.state import instance_state

        return instance_state(region, instance_id)

    def agent_transport(self, instance_id: str, region: str) -> AgentTransport:
        from orchestrator.clouds.aliyun.agent import CloudAssistantTransport

        return CloudAssistantTransport(instance_id, region)
