"""ECS instances and their disks: RunInstances' checks, launch, release, auto-release."""

from __future__ import annotations

import ipaddress
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tests.sim.aliyun.data import (
    ImageSpec,
    InstanceTypeSpec,
)
from tests.sim.aliyun.models.core import SimError, invalid, new_id, not_found, parse_release_time
from tests.sim.aliyun.models.vpcs import VSwitch


@dataclass
class Disk:
    id: str
    region: str
    zone_id: str
    instance_id: str
    category: str
    size: int
    encrypted: bool
    kms_key_id: str
    performance_level: str
    name: str
    description: str
    image_id: str
    created_at: datetime
    type: str = "system"
    delete_with_instance: bool = True


@dataclass
class Instance:
    id: str
    region: str
    zone_id: str
    spec: InstanceTypeSpec
    image_id: str
    name: str
    description: str
    host_name: str
    vpc_id: str
    vswitch_id: str
    private_ip: str
    public_ip: str
    security_group_ids: list[str]
    key_pair_name: str
    charge_type: str
    spot_strategy: str
    spot_price_limit: float
    internet_charge_type: str
    internet_max_bandwidth_out: int
    user_data: str
    tags: dict[str, str]
    auto_release_time: datetime | None
    created_at: datetime
    running_at: datetime
    http_tokens: str
    http_endpoint: str
    deletion_protection: bool
    system_disk_id: str
    resource_group_id: str
    spot_interruption_behavior: str = "Terminate"
    stopped: bool = False
    # OperationLocks.LockReason values ("Recycling": a spot instance pending release).
    lock_reasons: list[str] = field(default_factory=list)
    # A reclaimed spot instance: when ECS releases it (metadata instance/spot/termination-time).
    spot_termination_at: datetime | None = None
    ram_role_name: str = ""  # its instance RAM role (AttachInstanceRamRole), "" for none
    deployment_set_id: str = ""  # RunInstances DeploymentSetId, "" for none

    def status(self, now: datetime) -> str:
        if self.stopped:
            return "Stopped"
        return "Running" if now >= self.running_at else "Pending"


@dataclass(frozen=True)
class SystemDiskRequest:
    """RunInstances SystemDisk.*, parsed: size None means the image's (at least 40 GiB)."""

    category: str = "cloud_efficiency"
    size: int | None = None
    encrypted: bool = False
    kms_key_id: str = ""
    performance_level: str = ""
    name: str = ""
    description: str = ""


@dataclass(frozen=True)
class MarketRequest:
    """RunInstances InstanceChargeType / SpotStrategy / SpotPriceLimit, parsed and consistent."""

    charge_type: str = "PostPaid"
    spot_strategy: str = "NoSpot"
    spot_price_limit: float = 0.0

    @property
    def spot(self) -> bool:
        return self.spot_strategy != "NoSpot"


@dataclass(frozen=True)
class LaunchPlan:
    """What RunInstances' checks resolved: where its instances go and what they run."""

    region: str
    zone_id: str
    spec: InstanceTypeSpec
    image: ImageSpec
    vswitch: VSwitch
    security_group_ids: list[str]  # checked, duplicates dropped
    system_disk_size: int  # GiB
    created_at: datetime
    auto_release_time: datetime | None  # cut to its minute


@dataclass(frozen=True)
class InstanceDetails:
    """RunInstances' parameters that every instance it launches takes as they were sent."""

    name: str
    description: str
    host_name: str
    private_ip: str  # "" for the vSwitch's next address
    key_pair_name: str
    internet_charge_type: str
    internet_max_bandwidth_out: int
    user_data: str
    tags: dict[str, str]
    http_tokens: str
    http_endpoint: str
    deletion_protection: bool
    resource_group_id: str  # "" for the account's default group
    deployment_set_id: str


class InstanceBackend:
    """AliyunBackend's instance calls."""

    def run_instances(
        self,
        *,
        region: str,
        instance_type: str,
        image_id: str,
        vswitch_id: str,
        security_group_ids: list[str],
        system_disk: SystemDiskRequest = SystemDiskRequest(),
        market: MarketRequest = MarketRequest(),
        zone_id: str = "",
        key_pair_name: str = "",
        internet_charge_type: str = "PayByTraffic",
        internet_max_bandwidth_out: int = 0,
        user_data: str = "",
        http_tokens: str = "optional",
        http_endpoint: str = "enabled",
        auto_release_time: datetime | None = None,
        amount: int = 1,
        dry_run: bool = False,
        deletion_protection: bool = False,
        client_token: str = "",
        instance_name: str = "",
        description: str = "",
        host_name: str = "",
        private_ip: str = "",
        resource_group_id: str = "",
        tags: dict[str, str] | None = None,
        deployment_set_id: str = "",
    ) -> list[str]:
        """RunInstances on parsed values (responses.run_instances): the checks that need state,
        in the order ECS reports them, then the launch. Returns the new instance ids."""
        region = self.check_region(region)
        with self.lock:
            self.reap()
            if client_token and (region, client_token) in self.client_tokens:
                return self.client_tokens[(region, client_token)]  # idempotent retry
            plan = self._check_launch(
                region,
                instance_type=instance_type,
                image_id=image_id,
                vswitch_id=vswitch_id,
                zone_id=zone_id,
                security_group_ids=security_group_ids,
                key_pair_name=key_pair_name,
                system_disk=system_disk,
                market=market,
                deployment_set_id=deployment_set_id,
                amount=amount,
                auto_release_time=auto_release_time,
                dry_run=dry_run,
            )
            details = InstanceDetails(
                name=instance_name,
                description=description,
                host_name=host_name,
                private_ip=private_ip,
                key_pair_name=key_pair_name,
                internet_charge_type=internet_charge_type,
                internet_max_bandwidth_out=internet_max_bandwidth_out,
                user_data=user_data,
                tags=tags or {},
                http_tokens=http_tokens,
                http_endpoint=http_endpoint,
                deletion_protection=deletion_protection,
                resource_group_id=resource_group_id,
                deployment_set_id=deployment_set_id,
            )
            ids = []
            for _ in range(amount):
                instance = self._new_instance(plan, market, details)
                ids.append(
                    self._launch(instance, system_disk, plan.system_disk_size, plan.image).id
                )
            if client_token:
                self.client_tokens[(region, client_token)] = ids
            return ids

    def _check_launch(
        self,
        region: str,
        *,
        instance_type: str,
        image_id: str,
        vswitch_id: str,
        zone_id: str,
        security_group_ids: list[str],
        key_pair_name: str,
        system_disk: SystemDiskRequest,
        market: MarketRequest,
        deployment_set_id: str,
        amount: int,
        auto_release_time: datetime | None,
        dry_run: bool,
    ) -> LaunchPlan:
        """RunInstances' checks, in the order ECS reports them (a dry run stops after those that
        do not need stock), then stock and any injected fault; what they resolved."""
        spec = self.instance_type(instance_type)
        image = self.image(region, image_id)
        vswitch, zone = self._placement(region, vswitch_id, zone_id)
        groups = self._security_groups_for(region, security_group_ids, vswitch)
        self._check_key_pair(region, key_pair_name)
        disk_size = self._system_disk_size(system_disk, image)
        self._check_spot_price(region, spec, market, zone)
        if deployment_set_id:
            self.check_deployment_set(region, deployment_set_id, zone, amount)
        now = self.now()
        release_at = (
            None if auto_release_time is None else self.check_release_window(auto_release_time, now)
        )
        if dry_run:
            raise SimError(
                "DryRunOperation",
                "Request validation has been passed with DryRun flag set.",
                400,
            )
        self._check_stock(region, zone, spec, market)
        self.raise_fault("RunInstances", zone)
        return LaunchPlan(
            region=region,
            zone_id=zone,
            spec=spec,
            image=image,
            vswitch=vswitch,
            security_group_ids=groups,
            system_disk_size=disk_size,
            created_at=now,
            auto_release_time=release_at,
        )

    def _new_instance(
        self, plan: LaunchPlan, market: MarketRequest, details: InstanceDetails
    ) -> Instance:
        """One of RunInstances' instances, not yet recorded: its own id, private IP (the next
        of the vSwitch's unless one was asked for) and public IP (only with bandwidth out)."""
        return Instance(
            id=new_id("i", plan.region),
            region=plan.region,
            zone_id=plan.zone_id,
            spec=plan.spec,
            image_id=plan.image.image_id,
            name=details.name,
            description=details.description,
            host_name=details.host_name,
            vpc_id=plan.vswitch.vpc_id,
            vswitch_id=plan.vswitch.id,
            private_ip=details.private_ip or self._next_private_ip(plan.vswitch),
            public_ip=self._public_ip() if details.internet_max_bandwidth_out > 0 else "",
            security_group_ids=plan.security_group_ids,
            key_pair_name=details.key_pair_name,
            charge_type=market.charge_type,
            spot_strategy=market.spot_strategy,
            spot_price_limit=market.spot_price_limit,
            internet_charge_type=details.internet_charge_type,
            internet_max_bandwidth_out=details.internet_max_bandwidth_out,
            user_data=details.user_data,
            tags=dict(details.tags),
            auto_release_time=plan.auto_release_time,
            created_at=plan.created_at,
            running_at=plan.created_at + timedelta(seconds=self.settings.launch_delay_s),
            http_tokens=details.http_tokens,
            http_endpoint=details.http_endpoint,
            deletion_protection=details.deletion_protection,
            system_disk_id="",
            resource_group_id=details.resource_group_id or "rg-acfmdefault",
            deployment_set_id=details.deployment_set_id,
        )

    # RunInstances, step by step (each raises the error ECS returns for that condition).

    def _placement(self, region: str, vswitch_id: str, zone_id: str) -> tuple[VSwitch, str]:
        """The vSwitch and zone of a new instance: VPC only, the zone must be the vSwitch's."""
        if not vswitch_id:
            raise SimError(
                "InvalidVSwitchId.NotFound",
                "A vSwitch is required: classic network instances cannot be created.",
                404,
            )
        vswitch = self.vswitch(region, vswitch_id)
        zone = zone_id or vswitch.zone_id
        self.check_zone(region, zone)
        if zone != vswitch.zone_id:
            raise invalid(
                "The specified vSwitch is not in the specified zone.",
                "InvalidVSwitchId.ZoneMismatch",
            )
        return vswitch, zone

    def _security_groups_for(
        self, region: str, group_ids: list[str], vswitch: VSwitch
    ) -> list[str]:
        """At least one group, each existing and in the vSwitch's VPC; duplicates dropped."""
        if not group_ids:
            raise SimError("MissingParameter", "The input parameter SecurityGroupId is mandatory.")
        for group_id in group_ids:
            if self.security_group(region, group_id).vpc_id != vswitch.vpc_id:
                raise invalid(
                    "The specified security group and vSwitch are not in the same VPC.",
                    "InvalidSecurityGroupId.VPCMismatch",
                )
        return list(dict.fromkeys(group_ids))

    def _check_key_pair(self, region: str, key_pair_name: str) -> None:
        if key_pair_name and (region, key_pair_name) not in self.key_pairs:
            raise not_found("InvalidKeyPair.NotFound", "KeyPairName")

    def _system_disk_size(self, disk: SystemDiskRequest, image: ImageSpec) -> int:
        """The system disk's size: at least the image's, and within ECS's 20-2048 GiB."""
        size = disk.size if disk.size is not None else max(40, image.size_gib)
        if not max(20, image.size_gib) <= size <= 2048:
            raise invalid(
                "The specified SystemDisk.Size is out of range.",
                "InvalidSystemDiskSize.ValueNotSupported",
            )
        return size

    def _check_spot_price(
        self, region: str, spec: InstanceTypeSpec, market: MarketRequest, zone: str
    ) -> None:
        if market.spot_strategy == "SpotWithPriceLimit" and market.spot_price_limit < self.price(
            region, spec, True, zone
        ):
            raise SimError(
                "InvalidSpotPriceLimit.LowerThanPublicPrice",
                "The specified SpotPriceLimit is lower than the current spot price.",
                400,
            )

    def _check_stock(
        self, region: str, zone: str, spec: InstanceTypeSpec, market: MarketRequest
    ) -> None:
        status = self.stock_status(region, zone, spec.name, market.spot)
        if status in ("WithoutStock", "ClosedWithoutStock"):
            raise SimError(
                "OperationDenied.NoStock",
                "Sales of this resource are temporarily suspended in the specified region; "
                "please try again later.",
                403,
            )

    def _launch(
        self, instance: Instance, request: SystemDiskRequest, size: int, image: ImageSpec
    ) -> Instance:
        """Record a new instance and its system disk (Pending until launch_delay_s passes)."""
        disk = Disk(
            id=new_id("d", instance.region),
            region=instance.region,
            zone_id=instance.zone_id,
            instance_id=instance.id,
            category=request.category,
            size=size,
            encrypted=request.encrypted,
            kms_key_id=request.kms_key_id,
            performance_level=(
                request.performance_level or "PL1" if request.category == "cloud_essd" else ""
            ),
            name=request.name,
            description=request.description,
            image_id=image.image_id,
            created_at=instance.created_at,
        )
        instance.name = instance.name or instance.id
        instance.host_name = instance.host_name or f"iZ{instance.id[2:]}Z"
        instance.system_disk_id = disk.id
        self.instances[instance.id] = instance
        self.disks[disk.id] = disk
        return instance

    def check_release_window(self, moment: datetime, now: datetime) -> datetime:
        """An auto-release time cut to its minute (as ECS does), 30 minutes to 3 years on.

        ECS drops the seconds: "if ss is not 00, only mm is used" / "如果秒不是 00,则自动取为
        当前分钟开始时" (ModifyInstanceAutoReleaseTime, AutoReleaseTime:
        https://www.alibabacloud.com/help/ja/ecs/api-modifyinstanceautoreleasetime,
        https://developer.aliyun.com/ask/210107); RunInstances takes the same format."""
        moment = moment.replace(second=0, microsecond=0)
        if moment < now + timedelta(minutes=30) or moment > now + timedelta(days=3 * 365):
            raise SimError(
                "InvalidAutoReleaseTime.Malformed",
                "The specified parameter autoReleaseTime is not valid: the release time must be "
                "30 minutes to 3 years from now.",
                400,
            )
        return moment

    def check_release_time(self, text: str, now: datetime) -> datetime:
        return self.check_release_window(parse_release_time(text), now)

    def _next_private_ip(self, vswitch: VSwitch) -> str:
        network = ipaddress.ip_network(vswitch.cidr_block)
        address = network.network_address + vswitch.next_host
        vswitch.next_host -= 1
        return str(address)

    def _public_ip(self) -> str:
        return f"47.{random.randint(74, 254)}.{random.randint(0, 255)}.{random.randint(1, 254)}"

    def instance(self, region: str, instance_id: str | None) -> Instance:
        instance = self.instances.get(instance_id or "")
        if instance is None or instance.region != region:
            raise not_found("InvalidInstanceId.NotFound", "InstanceId")
        return instance

    def list_instances(self, region: str) -> list[Instance]:
        self.check_region(region)
        with self.lock:
            self.reap()
            return sorted(
                (i for i in self.instances.values() if i.region == region),
                key=lambda i: (i.created_at, i.id),
            )

    def delete_instance(self, region: str, instance_id: str, force: bool) -> None:
        # An operation lock does not refuse the release. Neither DeleteInstance's reference
        # (https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-deleteinstance)
        # nor the spot interruption guides name an error for a "Recycling" lock, and the one
        # lock ECS documents API by API, "security", leaves DeleteInstance/DeleteInstances
        # unaffected ("API operations that are not listed ... are unaffected":
        # https://www.alibabacloud.com/help/en/ecs/developer-reference/api-behavior-when-an-instance-is-locked-for-security-reasons).
        # So a locked spot instance is released by the status rules alone: Stopped without
        # Force, Running with it (what `orch down` does during the notice).
        with self.lock:
            self.reap()
            instance = self.instance(region, instance_id)
            if instance.deletion_protection:
                raise SimError(
                    "InvalidOperation.DeletionProtection",
                    "The instance is protected from deletion.",
                    403,
                )
            if instance.status(self.now()) == "Pending":
                raise SimError(
                    "IncorrectInstanceStatus.Initializing",
                    "The instance is still being created; try again later.",
                    403,
                )
            if not force and instance.status(self.now()) != "Stopped":
                # Only Stopped instances may be released without Force.
                raise SimError(
                    "IncorrectInstanceStatus",
                    "The current status of the resource does not support this operation.",
                    403,
                )
            self._release(instance)

    def _release(self, instance: Instance) -> None:
        self.instances.pop(instance.id, None)
        for disk in [d for d in self.disks.values() if d.instance_id == instance.id]:
            if disk.delete_with_instance:
                del self.disks[disk.id]

    def modify_auto_release_time(self, region: str, instance_id: str, text: str | None) -> None:
        with self.lock:
            self.reap()
            instance = self.instance(region, instance_id)
            if instance.charge_type != "PostPaid":
                raise SimError(
                    "ChargeTypeViolation",
                    "The operation is not permitted due to charge type of the instance.",
                    403,
                )
            instance.auto_release_time = self.check_release_time(text, self.now()) if text else None
