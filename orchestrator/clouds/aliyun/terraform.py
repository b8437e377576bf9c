"""Aliyun: a box request (plan candidate + what `orch up` decided) -> box module variables.

The renderer (orchestrator/provision/render.py) writes these values to terraform.tfvars.json
for orchestrator/provision/templates/aliyun/*.j2, which pass them to
terraform/modules/aliyun_gpu.

Two Alibaba Cloud specifics:
* `--ttl` also becomes the instance's auto_release_time, so ECS releases an expired box even if
  nobody runs `orch sweep`. ECS wants that time on a whole minute, 30 minutes to 3 years ahead:
  the expiry is rounded up to the minute and moved to 40 minutes from now when it is sooner
  (the orch:expires-at tag and the in-guest timer keep the exact expiry).
* A spot candidate becomes spot_strategy SpotAsPriceGo (pay the market price, never more than
  pay-as-you-go), or SpotWithPriceLimit when `--max-price` is given.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.clouds.aliyun.identity import identity_vars
from orchestrator.clouds.aliyun.images import UBUNTU_REGEX
from orchestrator.clouds.base import OWNER_TAG, BoxRequest
from orchestrator.errors import UsageError

# Root module outputs (templates/aliyun/outputs.tf.j2); instance_id, public_ip, private_ip and
# ssh_user are what `orch status` and `orch check` read.
OUTPUTS = (
    "instance_id",
    "public_ip",
    "private_ip",
    "availability_zone",
    "image_id",
    "ssh_user",
    "security_group_id",
    "key_name",
    "vpc_id",
    "vswitch_id",
    "auto_release_time",
    "nodes",  # a cluster's nodes, rank 0 first (provision/cluster.py); null for one box
    "deployment_set_id",  # a cluster's deployment set; null for one box
)
# A LowLatency deployment set holds at most 20 instances, all in one zone ("Deployment sets",
# limits, https://www.alibabacloud.com/help/zh/doc-detail/91258.htm).
MAX_CLUSTER_NODES = 20
MAX_TAG_LENGTH = 128  # an ECS tag key or value (check_tags)
MIN_SYSTEM_DISK_GIB = 20
MAX_SYSTEM_DISK_GIB = 2048
# ECS: "The release time must be at least 30 minutes later than the current time." The time is
# fixed at render; RunInstances comes after `terraform init` (which may download the provider)
# and after the VPC, vSwitch, group and key pair are created: ten minutes of slack for that.
MIN_RELEASE_DELAY = timedelta(minutes=40)
MAX_RELEASE_DELAY = timedelta(days=3 * 365)
DEFAULT_IMAGE_REGEX = UBUNTU_REGEX


def image_vars(image: dict[str, Any]) -> dict[str, Any]:
    """Plan `image` -> image_id, or image_name_regex + image_owners."""
    if not isinstance(image, dict):
        raise UsageError("plan candidate's image is not an object")
    if image.get("id"):
        return {"image_id": str(image["id"])}
    owners = image.get("owners") or "system"
    if isinstance(owners, list):
        if len(owners) != 1:
            raise UsageError(f"an Aliyun image has one owner alias, got {owners}")
        owners = owners[0]
    return {
        "image_name_regex": str(image.get("name_regex") or DEFAULT_IMAGE_REGEX),
        "image_owners": str(owners),
    }


def auto_release_time(expires_at: str | None, now: datetime | None = None) -> str | None:
    """ECS auto-release time for an orch expiry (see the module docstring), or None."""
    if not expires_at:
        return None
    try:
        moment = datetime.fromisoformat(expires_at.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"expiry {expires_at!r} is not an ISO 8601 time") from None
    if moment.tzinfo is None:
        raise UsageError(f"expiry {expires_at!r} has no time zone")
    now = (now or datetime.now(UTC)).astimezone(UTC)
    moment = max(moment.astimezone(UTC), now + MIN_RELEASE_DELAY)
    # ECS cuts seconds off (rounds down, ModifyInstanceAutoReleaseTime: "if ss is not 00, only
    # mm is used"): send the whole minute at or after the expiry, so that what ECS keeps is
    # exactly what was sent and the box is never released before its TTL.
    whole = moment.replace(second=0, microsecond=0)
    if whole < moment:
        whole += timedelta(minutes=1)
    if whole > now + MAX_RELEASE_DELAY:  # checked after rounding up: that can cross the limit
        raise UsageError("Alibaba Cloud cannot release an instance more than 3 years ahead")
    return whole.strftime("%Y-%m-%dT%H:%M:%SZ")


def spot_vars(market: str, spot_max_price: float | None) -> dict[str, Any]:
    """Plan market (+ --max-price) -> spot_strategy and spot_price_limit."""
    if market == "on-demand":
        return {"spot_strategy": "NoSpot", "spot_price_limit": None}
    if market != "spot":
        raise UsageError(f"unknown market {market!r} (expected on-demand or spot)")
    if spot_max_price is None:
        return {"spot_strategy": "SpotAsPriceGo", "spot_price_limit": None}
    # RunInstances SpotPriceLimit: "accurate to three decimal places" (RunInstances reference,
    # https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-runinstances).
    limit = round(spot_max_price, 3) if math.isfinite(spot_max_price) else spot_max_price
    # NaN passes a `<= 0` test, and a bid under $0.0005 rounds to 0: both would fail only in
    # Terraform, after the network and key pair exist.
    if not math.isfinite(limit) or limit <= 0:
        raise UsageError(
            f"--max-price {spot_max_price} is not a positive price (USD per hour)"
            + (" at the three decimals Alibaba Cloud takes" if math.isfinite(limit) else "")
        )
    return {"spot_strategy": "SpotWithPriceLimit", "spot_price_limit": limit}


def system_disk_gib(root_volume_gib: int | float) -> int:
    """The plan's root volume as a whole number of GiB within the ECS system disk limits."""
    size = math.ceil(float(root_volume_gib))
    if size <= 0:  # a corrupt plan: never quietly the 20 GiB minimum
        raise UsageError(f"a root volume of {root_volume_gib} GiB is not a size")
    if size > MAX_SYSTEM_DISK_GIB:
        raise UsageError(
            f"a {size} GiB root volume is over the {MAX_SYSTEM_DISK_GIB} GiB ECS system disk limit"
        )
    return max(MIN_SYSTEM_DISK_GIB, size)


def cluster_nodes(candidate: Any) -> int:
    """The plan row's node count, checked against what an Aliyun cluster can be: at most 20
    nodes (one LowLatency deployment set) and not spot ("spot instances cannot be created in a
    deployment set", the same page), before anything is rendered or created."""
    nodes = int(getattr(candidate, "nodes", 1) or 1)
    if nodes > MAX_CLUSTER_NODES:
        raise UsageError(
            f"an Aliyun cluster holds at most {MAX_CLUSTER_NODES} nodes "
            f"(one LowLatency deployment set), not {nodes}"
        )
    if nodes > 1 and candidate.market == "spot":
        raise UsageError(
            f"{nodes} x {candidate.instance_type} spot: ECS does not put spot instances "
            "in a deployment set",
            hint="plan the Aliyun cluster on-demand",
        )
    return nodes


def check_tags(tags: dict[str, str]) -> dict[str, str]:
    """The rule of terraform/modules/aliyun_gpu/variables.tf's `tags` validation (ECS's tag
    limits: keys and values of at most 128 characters, no http:// or https:// in a key; ECS
    TagResources, https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-tagresources),
    checked before the box record, its key and `terraform init` rather than by Terraform after
    them. The reserved key prefixes are refused with the other --tag checks (inputs.check_tags)."""
    for key, value in tags.items():
        if key == OWNER_TAG and len(value) > MAX_TAG_LENGTH:  # ORCH_OWNER, not a --tag
            raise UsageError(
                f"ORCH_OWNER holds {len(value)} characters; Aliyun tag values (its orch:owner "
                f"tag) hold at most {MAX_TAG_LENGTH}"
            )
        if len(key) > MAX_TAG_LENGTH or len(value) > MAX_TAG_LENGTH:
            raise UsageError(
                f"--tag {key[:40]!r}: Aliyun tag keys and values hold at most "
                f"{MAX_TAG_LENGTH} characters"
            )
        if "http://" in key or "https://" in key:
            raise UsageError(
                f"--tag {key[:40]!r}: Aliyun tag keys may not hold http:// or https://"
            )
    return tags


def check_subnet_id(subnet_id: str) -> str:
    """None is taken yet: the module makes each box its own VPC and vSwitch."""
    raise UsageError(
        "--subnet-id is not supported for Aliyun boxes yet",
        hint="each Aliyun box gets its own VPC and vSwitch",
    )


def tfvars(request: BoxRequest) -> dict[str, Any]:
    """The values of templates/aliyun/variables.tf.j2 for one box (a render.RenderRequest)."""
    candidate = request.candidate
    nodes = cluster_nodes(candidate)
    if request.subnet_id:
        check_subnet_id(request.subnet_id)
    return {
        "region": candidate.region,
        "name": request.name,
        "owner": request.owner,
        "expires_at": request.expires_at or "",
        "auto_release_time": auto_release_time(request.expires_at),
        "instance_type": candidate.instance_type,
        **image_vars(candidate.image),
        "system_disk_category": "cloud_essd",
        "system_disk_size": system_disk_gib(candidate.root_volume_gib),
        **spot_vars(candidate.market, request.spot_max_price),
        "user_data": request.user_data,
        "ssh_public_key": request.ssh_public_key,
        "ssh_user": candidate.ssh_user or "root",
        "ssh_ingress_cidrs": list(request.ssh_ingress_cidrs),
        "allow_world_ssh": bool(request.allow_world_ssh),
        "zone_id": request.zone,
        # orch:box / orch:owner / orch:expires-at are added by the module from the values above.
        "tags": check_tags({**request.tags, **request.orch_tags()}),
        **identity_vars(getattr(request, "identity", None)),
        **({"node_count": nodes} if nodes > 1 else {}),
    }


def runtime_env() -> dict[str, str]:
    """Nothing to add: the provider reads ALIBABA_CLOUD_* (credentials, region, endpoints)."""
    return {}
