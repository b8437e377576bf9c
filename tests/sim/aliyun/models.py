"""In-memory state of the emulated Alibaba Cloud account, and the rules the real API enforces.

One `AliyunBackend` holds every region. Methods take plain Python values (already parsed from
the RPC parameters by responses.py), check them the way ECS/VPC do, change state under one lock,
and raise `SimError(code, message, status)` with the documented error codes.

Time is the real UTC clock plus an offset that tests can advance (`advance_clock`), or a
frozen moment (`freeze_clock`) plus that offset, so that a Pending instance, a finishing
command or auto-release (the cloud releasing an expired box by itself) happens when a test says
so rather than after a sleep. `wait_for` blocks until the state satisfies a condition.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import random
import re
import string
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.sim.aliyun import agent
from tests.sim.aliyun.data import (
    INSTANCE_TYPES,
    SYSTEM_IMAGES,
    ImageSpec,
    InstanceTypeSpec,
    zones_of,
)

# ------------------------------------------------------------------------------ errors


class SimError(Exception):
    """An API error: serialised as {"Code", "Message", "RequestId", ...} with `status`."""

    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


def not_found(code: str, what: str) -> SimError:
    return SimError(code, f"The specified {what} does not exist.", 404)


def invalid(message: str, code: str = "InvalidParameter") -> SimError:
    return SimError(code, message, 400)


# ------------------------------------------------------------------------------ helpers

_REGION_CODES = {
    "cn-hangzhou": "bp1",
    "cn-beijing": "2ze",
    "cn-shanghai": "uf6",
    "cn-shenzhen": "wz9",
    "ap-southeast-1": "t4n",
    "us-west-1": "rj9",
    "eu-central-1": "gw8",
}
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
MINUTE_FORMAT = "%Y-%m-%dT%H:%MZ"  # what ECS uses for instance CreationTime / StartTime


def new_id(prefix: str, region: str) -> str:
    body = "".join(random.choices(string.ascii_lowercase + string.digits, k=17))
    return f"{prefix}-{_REGION_CODES.get(region, '0xi')}{body}"


def new_request_id() -> str:
    return str(uuid.uuid4()).upper()


def fmt_time(moment: datetime) -> str:
    return moment.strftime(TIME_FORMAT)


def fmt_minute(moment: datetime) -> str:
    return moment.strftime(MINUTE_FORMAT)


def parse_release_time(text: str) -> datetime:
    """ECS accepts yyyy-MM-ddTHH:mm:ssZ (and the minute form it prints itself), UTC only."""
    for pattern in (TIME_FORMAT, MINUTE_FORMAT):
        try:
            return datetime.strptime(text, pattern).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise SimError(
        "InvalidAutoReleaseTime.Malformed",
        "The specified parameter autoReleaseTime is not valid.",
        400,
    )


# ImportKeyPair: "The imported key pair must support one of the following encryption methods:
# rsa, dsa, ssh-rsa, ssh-dss, ecdsa" (and their OpenSSH certificates), so no ssh-ed25519 or
# sk-* keys (https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-importkeypair).
ACCEPTED_KEY_TYPES = frozenset(
    {
        "ssh-rsa",
        "ssh-dss",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "ssh-rsa-cert-v00@openssh.com",
        "ssh-dss-cert-v00@openssh.com",
        "ssh-rsa-cert-v01@openssh.com",
        "ssh-dss-cert-v01@openssh.com",
        "ecdsa-sha2-nistp256-cert-v01@openssh.com",
        "ecdsa-sha2-nistp384-cert-v01@openssh.com",
        "ecdsa-sha2-nistp521-cert-v01@openssh.com",
    }
)


def key_fingerprint(public_key: str) -> str:
    """MD5 of the decoded key blob, as hex: what ImportKeyPair reports as KeyPairFingerPrint.

    A key of a type ImportKeyPair does not support is refused like a malformed one (HTTP 400,
    InvalidPublicKeyBody.Malformed, the code of ImportKeyPair's error table)."""
    parts = public_key.split()
    if len(parts) < 2 or parts[0] not in ACCEPTED_KEY_TYPES:
        raise invalid("The specified PublicKeyBody is not valid.", "InvalidPublicKeyBody.Malformed")
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise invalid(
            "The specified PublicKeyBody is not valid.", "InvalidPublicKeyBody.Malformed"
        ) from None
    return hashlib.md5(blob).hexdigest()


# ------------------------------------------------------------------------------ records


@dataclass
class Vpc:
    id: str
    region: str
    cidr_block: str
    name: str
    description: str
    created_at: datetime
    vrouter_id: str
    route_table_id: str
    resource_group_id: str
    tags: dict[str, str] = field(default_factory=dict)
    status: str = "Available"


@dataclass
class VSwitch:
    id: str
    region: str
    vpc_id: str
    zone_id: str
    cidr_block: str
    name: str
    description: str
    created_at: datetime
    tags: dict[str, str] = field(default_factory=dict)
    status: str = "Available"
    next_host: int = 253  # private addresses are handed out from the top of the range down


@dataclass
class Rule:
    id: str
    direction: str  # "ingress" | "egress"
    ip_protocol: str  # lower case: tcp, udp, icmp, gre, all, icmpv6
    port_range: str
    cidr: str  # source for ingress, destination for egress
    policy: str  # "accept" | "drop"
    priority: int
    nic_type: str
    description: str
    created_at: datetime

    def same_as(self, other: Rule) -> bool:
        fields_ = (
            "direction",
            "ip_protocol",
            "port_range",
            "cidr",
            "policy",
            "priority",
            "nic_type",
        )
        return all(getattr(self, f) == getattr(other, f) for f in fields_)


@dataclass
class SecurityGroup:
    id: str
    region: str
    vpc_id: str
    name: str
    description: str
    type: str
    created_at: datetime
    resource_group_id: str
    inner_access_policy: str = "Accept"
    tags: dict[str, str] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)


@dataclass
class KeyPair:
    name: str
    region: str
    public_key: str
    fingerprint: str
    created_at: datetime
    resource_group_id: str
    tags: dict[str, str] = field(default_factory=dict)


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

    def status(self, now: datetime) -> str:
        if self.stopped:
            return "Stopped"
        return "Running" if now >= self.running_at else "Pending"


@dataclass
class Invocation:
    invoke_id: str
    command_id: str
    region: str
    name: str
    command_type: str
    content: str
    created_at: datetime
    finish_at: datetime
    results: dict[str, tuple[str, int]]  # instance id -> (output, exit code)
    timeout: int = 60


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


# Errors tests can inject, with the HTTP status and message ECS answers them with: RunInstances'
# error table (https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-runinstances:
# 403 Zone.NotOnSale, 403 QuotaExceed.ElasticQuota, 403 OperationDenied.NoStock) and the common
# errors of Alibaba Cloud's RPC APIs (Throttling 400 "Request was denied due to request
# throttling.", ServiceUnavailable 503; the Tea SDK retries neither by default).
FAULT_STATUS: dict[str, tuple[int, str]] = {
    "Zone.NotOnSale": (403, "The specified zone is not available for purchase."),
    "QuotaExceed.ElasticQuota": (
        403,
        "The number of vCPUs assigned to the ECS instances has exceeded the quota in the zone.",
    ),
    "OperationDenied.NoStock": (
        403,
        "Sales of this resource are temporarily suspended in the specified region; "
        "please try again later.",
    ),
    "Throttling": (400, "Request was denied due to request throttling."),
    "NoPermission": (
        403,
        "You are not authorized to do this action. You should be authorized by RAM.",
    ),
    "ServiceUnavailable": (
        503,
        "The request has failed due to a temporary failure of the server.",
    ),
}


@dataclass
class Fault:
    action: str
    code: str
    status: int
    message: str
    zone: str  # "" for any
    times: int


# ------------------------------------------------------------------------------ backend


@dataclass
class Settings:
    launch_delay_s: float = 0.5  # Pending -> Running
    command_delay_s: float = 0.3  # RunCommand: Running -> Finished
    # A reclaimed spot instance is released this long after the notice (ECS: 5 minutes).
    spot_release_delay_s: float = 300.0


class AliyunBackend:
    """Everything an account holds, in every region."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        # Notified after every API call and clock change: tests wait on it (`wait_for`)
        # instead of sleeping and polling.
        self.changed = threading.Condition(self.lock)
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.settings = Settings()
            self.clock_offset = timedelta()
            self.frozen_at: datetime | None = None  # set: time stands still until advanced
            self.vpcs: dict[str, Vpc] = {}
            self.vswitches: dict[str, VSwitch] = {}
            self.security_groups: dict[str, SecurityGroup] = {}
            self.key_pairs: dict[tuple[str, str], KeyPair] = {}
            self.instances: dict[str, Instance] = {}
            self.disks: dict[str, Disk] = {}
            self.invocations: dict[str, Invocation] = {}
            self.client_tokens: dict[tuple[str, str], list[str]] = {}
            # (region, zone or "*", instance type, "spot"|"on-demand"|"*") -> StatusCategory
            self.stock: dict[tuple[str, str, str, str], str] = {}
            self.prices: dict[tuple[str, str], tuple[float, float]] = {}
            # (region, zone, instance type) -> spot price there (spot prices differ by zone)
            self.zone_spot_prices: dict[tuple[str, str, str], float] = {}
            self.faults: list[Fault] = []
            self.command_outputs: list[tuple[re.Pattern[str], str, int]] = []
            # Ids the cloud released by itself (auto-release, spot reclaim), in that order.
            self.released: list[str] = []
            self.request_log: list[str] = []  # actions, in arrival order
            from tests.sim.aliyun.ram import RamState  # ram.py imports this module

            self.ram = RamState()  # RAM is global: the account's roles and policies

    # ------------------------------------------------------------------ clock and reaping

    def now(self) -> datetime:
        base = self.frozen_at if self.frozen_at is not None else datetime.now(UTC)
        return base + self.clock_offset

    def advance_clock(self, seconds: float) -> None:
        """Move the emulated time on: Pending instances start, invocations finish, expired
        instances are released; what a test would otherwise sleep for happens at once."""
        if seconds < 0:
            raise invalid("the clock only moves forward")
        with self.lock:
            self.clock_offset += timedelta(seconds=seconds)
            self.reap()
            self.changed.notify_all()

    def freeze_clock(self) -> None:
        """Stop the emulated time where it is: nothing that waits on time (an instance leaving
        Pending, a command finishing, auto-release) happens until `advance_clock`."""
        with self.lock:
            if self.frozen_at is None:
                self.frozen_at = datetime.now(UTC)

    def thaw_clock(self) -> None:
        """Let the emulated time run with the real clock again, from where it stood."""
        with self.lock:
            if self.frozen_at is not None:
                self.clock_offset = self.now() - datetime.now(UTC)
                self.frozen_at = None
                self.changed.notify_all()

    def wait_for(self, predicate: Callable[[], object], timeout: float) -> bool:
        """Block until `predicate()` (evaluated under the lock after every API call or clock
        change) is true, or `timeout` seconds pass; returns whether it became true."""
        with self.changed:
            return bool(self.changed.wait_for(predicate, timeout))

    def notify(self) -> None:
        with self.lock:
            self.changed.notify_all()

    def reap(self) -> None:
        """Release instances whose auto-release time, or spot termination time, has passed."""
        now = self.now()
        for instance in list(self.instances.values()):
            due = [instance.auto_release_time, instance.spot_termination_at]
            if any(moment is not None and moment <= now for moment in due):
                self._release(instance)
                self.released.append(instance.id)

    # ------------------------------------------------------------------ spot reclaim

    def reclaim_spot(self, instance_id: str, *, stop_now: bool = True) -> datetime:
        """Take a Running spot instance back the way ECS does; returns its termination time.

        ECS locks a spot instance it reclaims with OperationLocks.LockReason "Recycling"
        (DescribeInstances shows it; the instance's metadata item instance/spot/termination-time
        gives the moment), then stops and releases it about 5 minutes later:
        https://www.alibabacloud.com/help/en/ecs/user-guide/query-the-interruption-events-of-preemptible-instances
        https://www.alibabacloud.com/help/en/ecs/user-guide/what-is-a-spot-instance ("released
        5 minutes later"). The emulator stops the instance at the notice already, so that a
        watcher sees it lost at once; `settings.spot_release_delay_s` (300 s) later, on the
        emulator's clock, it is released: gone from DescribeInstances, listed in `released`.
        `stop_now=False` keeps it Running (with the lock) through the notice instead, as ECS
        does: the notice is there for a graceful shutdown on the instance itself
        (https://www.alibabacloud.com/help/en/ecs/user-guide/query-the-interruption-events-of-preemptible-instances,
        "Detect and handle preemptible instance interruptions": react by shutting down
        gracefully or persisting data), and the instance goes at its release.
        Test-only control (no ECS action does this): a ValueError for anything ECS would
        not reclaim.
        """
        with self.lock:
            self.reap()
            instance = self.instances.get(instance_id)
            if instance is None:
                raise ValueError(f"reclaim_spot: no instance {instance_id!r}")
            if instance.spot_strategy == "NoSpot":
                raise ValueError(
                    f"reclaim_spot: {instance_id} is not a spot instance (SpotStrategy NoSpot); "
                    "ECS reclaims spot instances only"
                )
            now = self.now()
            if instance.status(now) != "Running" or "Recycling" in instance.lock_reasons:
                raise ValueError(
                    f"reclaim_spot: {instance_id} is {instance.status(now)}"
                    + (", already being reclaimed" if instance.lock_reasons else "")
                    + "; only a Running spot instance can be reclaimed"
                )
            instance.lock_reasons.append("Recycling")
            instance.stopped = stop_now
            instance.spot_termination_at = now + timedelta(
                seconds=self.settings.spot_release_delay_s
            )
            self.changed.notify_all()
            return instance.spot_termination_at

    # ------------------------------------------------------------------ common checks

    def check_region(self, region: str | None) -> str:
        if not region:
            raise SimError("MissingParameter", "The input parameter RegionId is mandatory.", 400)
        if not re.fullmatch(r"[a-z]{2}-[a-z]+(-\d+)?", region):
            raise SimError(
                "InvalidRegionId.NotFound", "The specified RegionId does not exist.", 404
            )
        return region

    def check_zone(self, region: str, zone_id: str) -> str:
        if zone_id not in zones_of(region):
            raise SimError("InvalidZoneId.NotFound", "The specified zone does not exist.", 404)
        return zone_id

    def instance_type(self, name: str | None) -> InstanceTypeSpec:
        if not name:
            raise SimError("MissingParameter", "The input parameter InstanceType is mandatory.")
        spec = INSTANCE_TYPES.get(name)
        if spec is None:
            raise not_found("InvalidInstanceType.NotFound", "InstanceType")
        return spec

    def images(self, region: str) -> list[ImageSpec]:
        self.check_region(region)
        return list(SYSTEM_IMAGES)

    def image(self, region: str, image_id: str | None) -> ImageSpec:
        if not image_id:
            raise SimError("MissingParameter", "The input parameter ImageId is mandatory.")
        for image in self.images(region):
            if image.image_id == image_id:
                return image
        raise not_found("InvalidImageId.NotFound", "ImageId")

    # ------------------------------------------------------------------ stock and prices

    def stock_status(self, region: str, zone: str, instance_type: str, spot: bool) -> str:
        """StatusCategory for one zone/type/market: the last matching set_stock rule wins."""
        market = "spot" if spot else "on-demand"
        status = "WithStock"
        for (r, z, t, m), value in self.stock.items():
            if r == region and t == instance_type and z in (zone, "*") and m in (market, "*"):
                status = value
        return status

    def set_stock(
        self, region: str, instance_type: str, status: str, zone: str = "*", market: str = "*"
    ) -> None:
        if status not in ("WithStock", "ClosedWithStock", "WithoutStock", "ClosedWithoutStock"):
            raise invalid(f"unknown stock status {status!r}")
        if market not in ("*", "spot", "on-demand"):
            raise invalid(f"unknown market {market!r}")
        with self.lock:
            key = (region, zone, instance_type, market)
            self.stock.pop(key, None)  # re-inserted last: rules apply in the order they were set
            self.stock[key] = status

    def price(
        self, region: str, spec: InstanceTypeSpec, spot: bool, zone: str | None = None
    ) -> float:
        """Pay-as-you-go price, or the spot price (of `zone` where one was set for it)."""
        on_demand, spot_price = self.prices.get((region, spec.name), (spec.on_demand, spec.spot))
        if spot and zone:
            spot_price = self.zone_spot_prices.get((region, zone, spec.name), spot_price)
        return spot_price if spot else on_demand

    def set_price(
        self,
        region: str,
        instance_type: str,
        on_demand: float,
        spot: float,
        zone: str | None = None,
    ) -> None:
        """Set a type's prices; with `zone`, the spot price of that zone only."""
        self.instance_type(instance_type)
        with self.lock:
            if zone:
                self.check_zone(region, zone)
                self.zone_spot_prices[(region, zone, instance_type)] = spot
            else:
                self.prices[(region, instance_type)] = (on_demand, spot)

    # ------------------------------------------------------------------ injected faults

    def inject_fault(
        self, action: str, code: str, zone: str = "", times: int = 1, message: str = ""
    ) -> None:
        """Make the next `times` calls of `action` (in `zone`, for RunInstances) fail with
        `code`, at the HTTP status the real API answers it with (FAULT_STATUS)."""
        if code not in FAULT_STATUS:
            raise invalid(f"cannot inject {code!r} (choose {', '.join(sorted(FAULT_STATUS))})")
        if times < 1:
            raise invalid("times must be at least 1")
        status, default_message = FAULT_STATUS[code]
        with self.lock:
            self.faults.append(Fault(action, code, status, message or default_message, zone, times))

    def raise_fault(self, action: str, zone: str = "") -> None:
        """Raise the first injected fault that matches this call (and count it used)."""
        with self.lock:
            for fault in self.faults:
                if fault.action == action and fault.zone in ("", zone):
                    fault.times -= 1
                    if fault.times <= 0:
                        self.faults.remove(fault)
                    raise SimError(fault.code, fault.message, fault.status)

    # ------------------------------------------------------------------ VPC

    def create_vpc(
        self, region: str, cidr_block: str | None, name: str, description: str, tags: dict
    ) -> Vpc:
        region = self.check_region(region)
        cidr = cidr_block or "172.16.0.0/12"
        try:
            network = ipaddress.ip_network(cidr)
        except ValueError:
            raise invalid(
                "The specified CidrBlock is invalid.", "InvalidCidrBlock.Malformed"
            ) from None
        if network.version != 4 or not 8 <= network.prefixlen <= 28:
            raise invalid("The specified CidrBlock is invalid.", "InvalidCidrBlock.Malformed")
        with self.lock:
            vpc = Vpc(
                id=new_id("vpc", region),
                region=region,
                cidr_block=str(network),
                name=name,
                description=description,
                created_at=self.now(),
                vrouter_id=new_id("vrt", region),
                route_table_id=new_id("vtb", region),
                resource_group_id="rg-acfmdefault",
                tags=dict(tags),
            )
            self.vpcs[vpc.id] = vpc
            return vpc

    def vpc(self, region: str, vpc_id: str | None) -> Vpc:
        vpc = self.vpcs.get(vpc_id or "")
        if vpc is None or vpc.region != region:
            raise not_found("InvalidVpcID.NotFound", "VPC")
        return vpc

    def delete_vpc(self, region: str, vpc_id: str) -> None:
        with self.lock:
            vpc = self.vpc(region, vpc_id)
            if any(v.vpc_id == vpc.id for v in self.vswitches.values()):
                raise SimError(
                    "DependencyViolation.VSwitch",
                    "The specified VPC has vSwitches that must be deleted first.",
                    400,
                )
            if any(g.vpc_id == vpc.id for g in self.security_groups.values()):
                raise SimError(
                    "DependencyViolation.SecurityGroup",
                    "The specified VPC has security groups that must be deleted first.",
                    400,
                )
            del self.vpcs[vpc.id]

    def create_vswitch(
        self,
        region: str,
        vpc_id: str,
        zone_id: str | None,
        cidr_block: str | None,
        name: str,
        description: str,
        tags: dict,
    ) -> VSwitch:
        region = self.check_region(region)
        with self.lock:
            vpc = self.vpc(region, vpc_id)
            if not zone_id:
                raise SimError("MissingParameter", "The input parameter ZoneId is mandatory.")
            self.check_zone(region, zone_id)
            if not cidr_block:
                raise SimError("MissingParameter", "The input parameter CidrBlock is mandatory.")
            try:
                network = ipaddress.ip_network(cidr_block)
            except ValueError:
                raise invalid(
                    "The specified CidrBlock is invalid.", "InvalidCidrBlock.Malformed"
                ) from None
            if not network.subnet_of(ipaddress.ip_network(vpc.cidr_block)):  # type: ignore[arg-type]
                raise invalid(
                    "The vSwitch CIDR block must be within the VPC CIDR block.",
                    "InvalidCidrBlock.Malformed",
                )
            if not 16 <= network.prefixlen <= 29:
                raise invalid("The specified CidrBlock is invalid.", "InvalidCidrBlock.Malformed")
            for other in self.vswitches.values():
                if other.vpc_id == vpc.id and network.overlaps(
                    ipaddress.ip_network(other.cidr_block)
                ):
                    raise invalid(
                        "The specified CIDR block overlaps with another vSwitch.",
                        "InvalidCidrBlock.Overlapped",
                    )
            vswitch = VSwitch(
                id=new_id("vsw", region),
                region=region,
                vpc_id=vpc.id,
                zone_id=zone_id,
                cidr_block=str(network),
                name=name,
                description=description,
                created_at=self.now(),
                tags=dict(tags),
                next_host=network.num_addresses - 3,
            )
            self.vswitches[vswitch.id] = vswitch
            return vswitch

    def vswitch(self, region: str, vswitch_id: str | None) -> VSwitch:
        vswitch = self.vswitches.get(vswitch_id or "")
        if vswitch is None or vswitch.region != region:
            raise not_found("InvalidVSwitchId.NotFound", "vSwitch")
        return vswitch

    def delete_vswitch(self, region: str, vswitch_id: str) -> None:
        with self.lock:
            vswitch = self.vswitch(region, vswitch_id)
            if any(i.vswitch_id == vswitch.id for i in self.instances.values()):
                raise SimError(
                    "DependencyViolation",
                    "The specified vSwitch still has instances attached to it.",
                    400,
                )
            del self.vswitches[vswitch.id]

    # ------------------------------------------------------------------ security groups

    def create_security_group(
        self,
        region: str,
        vpc_id: str | None,
        name: str,
        description: str,
        group_type: str,
        tags: dict,
    ) -> SecurityGroup:
        region = self.check_region(region)
        if group_type not in ("normal", "enterprise"):
            raise invalid("The specified SecurityGroupType is not valid.")
        with self.lock:
            if not vpc_id:
                raise SimError(
                    "MissingParameter",
                    "The input parameter VpcId is mandatory (classic network is retired).",
                )
            vpc = self.vpc(region, vpc_id)
            group = SecurityGroup(
                id=new_id("sg", region),
                region=region,
                vpc_id=vpc.id,
                name=name,
                description=description,
                type=group_type,
                created_at=self.now(),
                resource_group_id="rg-acfmdefault",
                tags=dict(tags),
            )
            self.security_groups[group.id] = group
            return group

    def security_group(self, region: str, group_id: str | None) -> SecurityGroup:
        group = self.security_groups.get(group_id or "")
        if group is None or group.region != region:
            raise not_found("InvalidSecurityGroupId.NotFound", "SecurityGroupId")
        return group

    def delete_security_group(self, region: str, group_id: str) -> None:
        with self.lock:
            group = self.security_group(region, group_id)
            if any(group.id in i.security_group_ids for i in self.instances.values()):
                raise SimError(
                    "DependencyViolation",
                    "There is still instance(s) in the specified security group.",
                    403,
                )
            del self.security_groups[group.id]

    def new_rule(
        self,
        *,
        direction: str,
        ip_protocol: str,
        port_range: str,
        cidr: str,
        policy: str = "accept",
        priority: int = 1,
        nic_type: str = "intranet",
        description: str = "",
    ) -> Rule:
        """A rule from parsed values (responses.rule_of checks their formats)."""
        return Rule(
            id=new_id("sgr", "rule"),
            direction=direction,
            ip_protocol=ip_protocol,
            port_range=port_range,
            cidr=cidr,
            policy=policy,
            priority=priority,
            nic_type=nic_type,
            description=description,
            created_at=self.now(),
        )

    def authorize(self, region: str, group_id: str, rules: list[Rule]) -> list[str]:
        with self.lock:
            group = self.security_group(region, group_id)
            ids = []
            for rule in rules:
                existing = next((r for r in group.rules if r.same_as(rule)), None)
                if existing is None:  # authorising an existing rule again is a no-op
                    group.rules.append(rule)
                    existing = rule
                ids.append(existing.id)
            return ids

    def revoke(
        self, region: str, group_id: str, direction: str, rules: list[Rule], rule_ids: list[str]
    ) -> None:
        with self.lock:
            group = self.security_group(region, group_id)
            unknown = [rid for rid in rule_ids if not any(r.id == rid for r in group.rules)]
            if unknown:
                raise not_found("InvalidSecurityGroupRuleId.NotFound", "security group rule")
            group.rules = [
                r
                for r in group.rules
                if r.id not in rule_ids
                and not (r.direction == direction and any(r.same_as(x) for x in rules))
            ]

    # ------------------------------------------------------------------ key pairs

    def import_key_pair(
        self, region: str, name: str | None, public_key: str, tags: dict
    ) -> KeyPair:
        region = self.check_region(region)
        if not name:
            raise SimError("MissingParameter", "The input parameter KeyPairName is mandatory.")
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9._:-]{1,127}", name):
            raise invalid("The specified KeyPairName is not valid.", "InvalidKeyPairName.Malformed")
        fingerprint = key_fingerprint(public_key or "")
        with self.lock:
            if (region, name) in self.key_pairs:
                raise SimError(
                    "KeyPair.AlreadyExist", "The key pair with the same name already exists.", 400
                )
            pair = KeyPair(
                name=name,
                region=region,
                public_key=public_key.strip(),
                fingerprint=fingerprint,
                created_at=self.now(),
                resource_group_id="rg-acfmdefault",
                tags=dict(tags),
            )
            self.key_pairs[(region, name)] = pair
            return pair

    def delete_key_pairs(self, region: str, names: list[str]) -> None:
        with self.lock:
            for name in names:
                # Like ECS: unknown names are skipped; instances keep the key already injected.
                self.key_pairs.pop((region, name), None)

    # ------------------------------------------------------------------ instances

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
    ) -> list[str]:
        """RunInstances on parsed values (responses.run_instances): the checks that need state,
        in the order ECS reports them, then the launch. Returns the new instance ids."""
        region = self.check_region(region)
        with self.lock:
            self.reap()
            if client_token and (region, client_token) in self.client_tokens:
                return self.client_tokens[(region, client_token)]  # idempotent retry
            spec = self.instance_type(instance_type)
            image = self.image(region, image_id)
            vswitch, zone = self._placement(region, vswitch_id, zone_id)
            groups = self._security_groups_for(region, security_group_ids, vswitch)
            self._check_key_pair(region, key_pair_name)
            disk_size = self._system_disk_size(system_disk, image)
            self._check_spot_price(region, spec, market, zone)
            now = self.now()
            release_at = (
                None
                if auto_release_time is None
                else self.check_release_window(auto_release_time, now)
            )
            if dry_run:
                raise SimError(
                    "DryRunOperation",
                    "Request validation has been passed with DryRun flag set.",
                    400,
                )
            self._check_stock(region, zone, spec, market)
            self.raise_fault("RunInstances", zone)
            ids = []
            for _ in range(amount):
                instance = self._launch(
                    Instance(
                        id=new_id("i", region),
                        region=region,
                        zone_id=zone,
                        spec=spec,
                        image_id=image.image_id,
                        name=instance_name,
                        description=description,
                        host_name=host_name,
                        vpc_id=vswitch.vpc_id,
                        vswitch_id=vswitch.id,
                        private_ip=private_ip or self._next_private_ip(vswitch),
                        public_ip=self._public_ip() if internet_max_bandwidth_out > 0 else "",
                        security_group_ids=groups,
                        key_pair_name=key_pair_name,
                        charge_type=market.charge_type,
                        spot_strategy=market.spot_strategy,
                        spot_price_limit=market.spot_price_limit,
                        internet_charge_type=internet_charge_type,
                        internet_max_bandwidth_out=internet_max_bandwidth_out,
                        user_data=user_data,
                        tags=dict(tags or {}),
                        auto_release_time=release_at,
                        created_at=now,
                        running_at=now + timedelta(seconds=self.settings.launch_delay_s),
                        http_tokens=http_tokens,
                        http_endpoint=http_endpoint,
                        deletion_protection=deletion_protection,
                        system_disk_id="",
                        resource_group_id=resource_group_id or "rg-acfmdefault",
                    ),
                    system_disk,
                    disk_size,
                    image,
                )
                ids.append(instance.id)
            if client_token:
                self.client_tokens[(region, client_token)] = ids
            return ids

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

    # ------------------------------------------------------------------ tags

    def tag_target(self, region: str, resource_type: str, resource_id: str) -> dict[str, str]:
        """The tags dict of a taggable resource (ECS TagResources resource types)."""
        kind = resource_type.lower()
        if kind == "instance":
            return self.instance(region, resource_id).tags
        if kind == "securitygroup":
            return self.security_group(region, resource_id).tags
        if kind == "vpc":
            return self.vpc(region, resource_id).tags
        if kind == "vswitch":
            return self.vswitch(region, resource_id).tags
        if kind == "keypair":
            pair = self.key_pairs.get((region, resource_id))
            if pair is None:
                raise not_found("InvalidKeyPair.NotFound", "KeyPairName")
            return pair.tags
        raise invalid(f"The specified ResourceType {resource_type!r} is not supported.")

    # ------------------------------------------------------------------ cloud assistant

    def run_command(
        self,
        region: str,
        instance_ids: list[str],
        command_type: str,
        content: str,
        name: str,
        timeout: int,
    ) -> Invocation:
        if command_type not in ("RunShellScript", "RunBatScript", "RunPowerShellScript"):
            raise invalid("The specified Type is not valid.", "InvalidCommandType")
        if not instance_ids:
            raise SimError("MissingParameter", "The input parameter InstanceId is mandatory.")
        with self.lock:
            self.reap()
            now = self.now()
            results = {}
            for instance_id in instance_ids:
                instance = self.instance(region, instance_id)
                if instance.status(now) != "Running":
                    raise SimError(
                        "IncorrectInstanceStatus",
                        "The current status of the resource does not support this operation.",
                        403,
                    )
                results[instance_id] = self._simulate(instance, content)
            invocation = Invocation(
                invoke_id=new_id("t", region),
                command_id=new_id("c", region),
                region=region,
                name=name,
                command_type=command_type,
                content=content,
                created_at=now,
                finish_at=now + timedelta(seconds=self.settings.command_delay_s),
                results=results,
                timeout=timeout,
            )
            self.invocations[invocation.invoke_id] = invocation
            return invocation

    def _simulate(self, instance: Instance, content: str) -> tuple[str, int]:
        for pattern, output, exit_code in self.command_outputs:
            if pattern.search(content):
                return output, exit_code
        return agent.simulate(instance, content)

    def add_command_output(self, pattern: str, output: str, exit_code: int = 0) -> None:
        with self.lock:
            self.command_outputs.insert(0, (re.compile(pattern), output, exit_code))

    def invocation(self, region: str, invoke_id: str | None) -> Invocation:
        invocation = self.invocations.get(invoke_id or "")
        if invocation is None or invocation.region != region:
            raise not_found("InvalidInvokeId.NotFound", "InvokeId")
        return invocation

    # ------------------------------------------------------------------ admin snapshot

    def summary(self) -> dict[str, Any]:
        """A JSON-able view of what exists, for tests and for humans poking the emulator."""
        with self.lock:
            self.reap()
            now = self.now()
            return {
                "now": fmt_time(now),
                "instances": [
                    {
                        "id": i.id,
                        "region": i.region,
                        "zone": i.zone_id,
                        "type": i.spec.name,
                        "status": i.status(now),
                        "spot_strategy": i.spot_strategy,
                        "lock_reasons": list(i.lock_reasons),
                        "spot_termination_time": fmt_time(i.spot_termination_at)
                        if i.spot_termination_at
                        else "",
                        "tags": i.tags,
                        "auto_release_time": fmt_time(i.auto_release_time)
                        if i.auto_release_time
                        else "",
                    }
                    for i in self.instances.values()
                ],
                "disks": sorted(self.disks),
                "security_groups": sorted(self.security_groups),
                "key_pairs": sorted(f"{r}/{n}" for r, n in self.key_pairs),
                "vpcs": sorted(self.vpcs),
                "vswitches": sorted(self.vswitches),
                "released": list(self.released),
                "ram": self.ram.summary(),
            }

    def resource_count(self) -> int:
        with self.lock:
            self.reap()
            return sum(
                len(x)
                for x in (
                    self.instances,
                    self.disks,
                    self.security_groups,
                    self.key_pairs,
                    self.vpcs,
                    self.vswitches,
                )
            )
