"""Deployment sets (CreateDeploymentSet, DescribeDeploymentSets, DeleteDeploymentSet), what
RunInstances' DeploymentSetId checks, and the account's vCPU quotas (DescribeAccountAttributes).

Sources (ECS 2014-05-26):
* CreateDeploymentSet: Strategy Availability (default) / AvailabilityGroup / LowLatency,
  GroupCount 1-7 (AvailabilityGroup only), DeploymentSetName 2-128 characters starting with a
  letter, Description 2-256, neither starting with http:// or https://; errors 400
  InvalidDeploymentSetName.Malformed, InvalidDescription.Malformed, InvalidParameter.Strategy
  (https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-createdeploymentset,
  its error table in aliyun's docs repo, doc 91269). The request has no Tag parameter
  (alibabacloud_ecs20140526 CreateDeploymentSetRequest): deployment sets carry no tags.
* DeleteDeploymentSet: "You cannot delete a deployment set that contains instances": 403
  DependencyViolation.NotEmpty, "There are still instance(s) in the specified
  DeploymentSetId." (https://www.alibabacloud.com/help/doc-detail/91311.htm).
* RunInstances: 404 InvalidDeploymentSetId.NotFound "The specified DeploymentSetId does not
  exist." (RunInstances error table); a full set: 403 DeploymentSet.InstanceLimitExceeded "The
  number of instances on the specified Deployment Set has reached the limit."
  (ModifyInstanceDeployment's error table, the same condition).
* Limits ("Deployment sets", https://www.alibabacloud.com/help/zh/doc-detail/91258.htm, 使用限制):
  Availability: at most 20 instances per zone; AvailabilityGroup: 7 groups x 20 per zone;
  LowLatency: all instances in one zone, at most 20 there. The same page: no spot
  (preemptible) instances in a deployment set (抢占式实例); the error code for that and for a
  LowLatency set spanning zones is not documented, so the emulator does not invent one (orch
  never asks for either: orchestrator/clouds/aliyun/terraform.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from tests.sim.aliyun.models.core import SimError, invalid, new_id

STRATEGIES = ("Availability", "AvailabilityGroup", "LowLatency")
PER_ZONE_LIMIT = 20  # instances per zone, per group for AvailabilityGroup
_NAME = re.compile(r"[A-Za-z\u4e00-\u9fa5][A-Za-z0-9\u4e00-\u9fa5:_-]{1,127}")

# DescribeAccountAttributes: the vCPU quotas of pay-as-you-go and spot instances per region
# (AttributeName max-postpaid-instance-vcpu-count / max-spot-instance-vcpu-count, and the
# used-* counts; alibabacloud_ecs20140526 DescribeAccountAttributesRequest.attribute_name).
VCPU_ATTRIBUTES = (
    "max-postpaid-instance-vcpu-count",
    "max-spot-instance-vcpu-count",
    "used-postpaid-instance-vcpu-count",
    "used-spot-instance-vcpu-count",
)
DEFAULT_VCPU_QUOTA = 500


@dataclass
class DeploymentSet:
    id: str
    region: str
    name: str
    description: str
    strategy: str
    group_count: int
    on_unable_to_redeploy: str
    created_at: datetime


def _text_ok(text: str, low: int, high: int) -> bool:
    return low <= len(text) <= high and not text.startswith(("http://", "https://"))


class DeploymentSetBackend:
    """AliyunBackend's deployment-set and account-attribute calls."""

    def create_deployment_set(
        self,
        region: str,
        name: str = "",
        description: str = "",
        strategy: str = "",
        group_count: int | None = None,
        on_unable_to_redeploy: str = "",
    ) -> DeploymentSet:
        region = self.check_region(region)
        if name and not (_NAME.fullmatch(name) and _text_ok(name, 2, 128)):
            raise invalid(
                "Specified deployment set name is not valid.", "InvalidDeploymentSetName.Malformed"
            )
        if description and not _text_ok(description, 2, 256):
            raise invalid(
                "The specified parameter Description is not valid.", "InvalidDescription.Malformed"
            )
        strategy = strategy or "Availability"
        if strategy not in STRATEGIES:
            raise invalid(
                "The specified parameter Strategy is not valid", "InvalidParameter.Strategy"
            )
        if group_count is not None and not 1 <= group_count <= 7:
            raise invalid("The specified parameter GroupCount is not valid.")
        if on_unable_to_redeploy not in ("", "CancelMembershipAndStart", "KeepStopped"):
            raise invalid("The specified parameter OnUnableToRedeployFailedInstance is not valid.")
        with self.lock:
            ds = DeploymentSet(
                id=new_id("ds", region),
                region=region,
                name=name,
                description=description,
                strategy=strategy,
                group_count=(group_count or 3) if strategy == "AvailabilityGroup" else 0,
                on_unable_to_redeploy=on_unable_to_redeploy or "CancelMembershipAndStart",
                created_at=self.now(),
            )
            self.deployment_sets[ds.id] = ds
            return ds

    def deployment_set(self, region: str, ds_id: str) -> DeploymentSet:
        ds = self.deployment_sets.get(ds_id)
        if ds is None or ds.region != region:
            raise SimError(
                "InvalidDeploymentSetId.NotFound",
                "The specified DeploymentSetId does not exist.",
                404,
            )
        return ds

    def deployment_set_members(self, ds_id: str) -> list[str]:
        with self.lock:
            return sorted(i.id for i in self.instances.values() if i.deployment_set_id == ds_id)

    def check_deployment_set(self, region: str, ds_id: str, zone: str, amount: int) -> None:
        """RunInstances DeploymentSetId: the set exists here and has room in `zone`."""
        ds = self.deployment_set(region, ds_id)
        in_zone = sum(
            1 for i in self.instances.values() if i.deployment_set_id == ds_id and i.zone_id == zone
        )
        limit = PER_ZONE_LIMIT * (ds.group_count if ds.strategy == "AvailabilityGroup" else 1)
        if in_zone + amount > limit:
            raise SimError(
                "DeploymentSet.InstanceLimitExceeded",
                "The number of instances on the specified Deployment Set has reached the limit.",
                403,
            )

    def delete_deployment_set(self, region: str, ds_id: str) -> None:
        if not ds_id:
            raise SimError(
                "MissingParameter",
                'The input parameter "DeploymentSetId" that is mandatory for processing this '
                "request is not supplied.",
            )
        region = self.check_region(region)
        with self.lock:
            self.reap()
            self.deployment_set(region, ds_id)
            if self.deployment_set_members(ds_id):
                raise SimError(
                    "DependencyViolation.NotEmpty",
                    "There are still instance(s) in the specified DeploymentSetId.",
                    403,
                )
            del self.deployment_sets[ds_id]

    def set_vcpu_quota(self, region: str, spot: bool, limit: int) -> None:
        """Test set-up: the account's vCPU quota for pay-as-you-go (or spot) in `region`."""
        with self.lock:
            self.vcpu_quotas[(region, spot)] = limit

    def account_vcpus(self, region: str, attribute: str) -> int:
        """The value of one of VCPU_ATTRIBUTES in `region`: a used-* count is the vCPUs of the
        instance types of the region's pay-as-you-go instances (spot ones for the spot count)
        not yet released; subscription (PrePaid) instances count under neither quota."""
        spot = "-spot-" in attribute
        with self.lock:
            if attribute.startswith("max-"):
                return self.vcpu_quotas.get((region, spot), DEFAULT_VCPU_QUOTA)
            self.reap()
            return sum(
                i.spec.cpu
                for i in self.instances.values()
                if i.region == region
                and i.charge_type == "PostPaid"
                and (i.spot_strategy != "NoSpot") == spot
            )
