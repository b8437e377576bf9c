"""AwsCloud: AWS EC2 behind orchestrator.clouds.registry.Cloud.

Imported by the registry on first use; the modules that need the SDK load inside the methods.
The required members it shares with aliyun are packaged.py's; the capabilities are its own.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from orchestrator.clouds.aws.box_metadata import BOX_METADATA
from orchestrator.clouds.packaged import PackagedCloud

if TYPE_CHECKING:  # online calls' values: loaded by the calls, never by a plan
    from orchestrator.clouds.values import (
        AgentTransport,
        InstanceState,
        PriceApi,
        TaggedResource,
        VcpuQuota,
    )


class AwsCloud(PackagedCloud):
    name = "aws"
    title = "AWS"
    reserved_tag_prefixes = ("aws:",)  # EC2 rejects tag keys starting with aws:
    agent_via = "ssm"
    box_metadata = BOX_METADATA  # its instance metadata service, for the box-side agent
    # Plan rules (orchestrator/plan_validate.py): EC2 region names, gp3's 16 TiB limit, AMI ids.
    region_re = re.compile(r"[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]{1,2}")
    root_volume_gib_max = 16384
    image_keys = ("id", "ssm_parameter", "name_filter", "name_regex", "owners")
    image_id_re = re.compile(r"ami-[0-9a-f]{8,17}")
    # A cluster's nodes in its box root module (templates/aws: module "box";
    # terraform/modules/aws_gpu/main.tf: aws_instance.this, count = node_count).
    node_resource = "module.box.aws_instance.this"

    def check_subnet_id(self, subnet_id: str) -> str:
        from orchestrator.clouds.aws.terraform import check_subnet_id

        return check_subnet_id(subnet_id)

    def price_api(self) -> PriceApi:
        from orchestrator.clouds.aws.prices import PRICE_API

        return PRICE_API

    def zones_with_stock(self, region: str, instance_type: str, spot: bool) -> list[str] | None:
        # EC2 has no stock API: the zones that offer the type, each tried in turn by `up`
        # (a launch tells; capacity codes in errors.py). None when no zone lists it.
        from orchestrator.clouds.aws.zones import offering_zones

        return offering_zones(region, instance_type) or None

    def list_tagged(self, region: str, box: str | None = None) -> list[TaggedResource]:
        from orchestrator.clouds.aws.tags import list_tagged_resources

        return list_tagged_resources(region, box)

    def instance_state(self, region: str, instance_id: str) -> InstanceState:
        from orchestrator.clouds.aws.state import instance_state

        return instance_state(region, instance_id)

    def resolve_image(self, region: str, image: dict[str, Any]) -> Any:
        from orchestrator.clouds.aws.dlami import resolve

        return resolve(region, image)

    def vcpu_quota(self, region: str, instance_type: str, spot: bool) -> VcpuQuota | None:
        from orchestrator.clouds.aws.quotas import vcpu_quota

        return vcpu_quota(region, instance_type, spot)

    def agent_transport(self, instance_id: str, region: str) -> AgentTransport:
        from orchestrator.clouds.aws.ssm import SsmTransport

        return SsmTransport(instance_id, region)
