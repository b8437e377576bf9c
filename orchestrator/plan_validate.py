"""Every value of every plan candidate, checked before any cloud or Terraform call.

`orch up --plan` reads a file anyone may have edited: a value that is only present is not
enough. Each candidate's fields are checked for type and range, the instance type against the
catalog of its cloud, the region, market, login user, root volume and image against the rules
below, with the cloud's own rules where clouds differ (optional attributes of the Cloud
object, see `_rules`). The first problem is a UsageError (exit 2, one line) naming the
candidate and the field; nothing has been written or called by then.
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import UsageError
from orchestrator.plan import MAX_NODES, Candidate, Plan

MARKETS = ("on-demand", "spot")
# POSIX portable user names as useradd takes them: nothing ssh could read as an option.
SSH_USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
# Regions of clouds without their own rule: lower-case words joined by "-" (faux-east-1).
GENERIC_REGION_RE = re.compile(r"[a-z][a-z0-9]{0,15}(-[a-z0-9]{1,15}){0,4}")
MAX_TEXT = 256  # gpu name, image values, warnings
MAX_GPUS = 64
MAX_PRICE_PER_HOUR = 10_000.0  # no box costs more; a larger figure is a corrupt plan


@dataclass(frozen=True, slots=True)
class Rules:
    """Where clouds differ; a cloud object may override each one with an attribute."""

    region_re: re.Pattern[str] = GENERIC_REGION_RE
    root_volume_gib_max: int = 16384
    image_keys: tuple[str, ...] = ("id", "name_regex", "owners")
    image_id_re: re.Pattern[str] = re.compile(r"[A-Za-z0-9._-]{1,128}")


def _rules(cloud: Any) -> Rules:
    base = Rules()
    return Rules(
        region_re=getattr(cloud, "region_re", base.region_re),
        root_volume_gib_max=getattr(cloud, "root_volume_gib_max", base.root_volume_gib_max),
        image_keys=getattr(cloud, "image_keys", base.image_keys),
        image_id_re=getattr(cloud, "image_id_re", base.image_id_re),
    )


def validate_plan(plan: Plan, spot_bid: float | None = None) -> None:
    """UsageError for the first bad value of any candidate (the choice, then alternatives)."""
    for index, candidate in enumerate(plan.candidates()):
        where = "choice" if index == 0 else f"alternative {index}"
        validate_candidate(candidate, where)
    if spot_bid is not None and not (
        isinstance(spot_bid, int | float) and math.isfinite(spot_bid) and spot_bid > 0
    ):
        raise UsageError(f"--spot-bid {spot_bid} is not a positive price (USD per hour)")


def validate_candidate(candidate: Candidate, where: str = "candidate") -> None:
    """Every field of a plan row (`check_candidate_fields`), and its type in the catalog."""
    check_candidate_fields(candidate, f"plan {where}")
    _known_instance_type(candidate.cloud, candidate.instance_type, where)


def check_candidate_fields(candidate: Candidate, what: str) -> None:
    """Type, characters and range of every field of a plan row, as a plan and a box record
    (box.json, a --state bundle) alike hold it; UsageError "WHAT: FIELD VALUE is not ...".
    No catalog look-up: a box's record names the type it was made with, which may since have
    left the catalog, and such a box must still be shown and destroyed."""
    from orchestrator import clouds

    def bad(field: str, value: object, expected: str) -> UsageError:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return UsageError(f"{what}: {field} {shown} is not {expected}")

    name = _text(candidate.cloud, "cloud", bad, max_len=40)
    try:
        cloud = clouds.get(clouds.check_name(name))
    except UsageError as exc:
        raise UsageError(f"{what}: {exc.message}") from None
    rules = _rules(cloud)

    region = _text(candidate.region, "region", bad, max_len=40)
    if not rules.region_re.fullmatch(region):
        raise bad("region", region, f"a {name} region name")
    _text(candidate.instance_type, "instance_type", bad, max_len=64)
    if candidate.market not in MARKETS:
        raise bad("market", candidate.market, "on-demand or spot")
    user = candidate.ssh_user
    if not isinstance(user, str) or not SSH_USER_RE.fullmatch(user):
        raise bad("ssh_user", user, "a POSIX user name (a-z, 0-9, '_', '-'; not starting with '-')")
    volume = _number(candidate.root_volume_gib, "root_volume_gib", bad)
    if not 1 <= volume <= rules.root_volume_gib_max:
        raise bad("root_volume_gib", volume, f"a size from 1 to {rules.root_volume_gib_max} GiB")
    _image(candidate.image, rules, bad)

    _text(candidate.gpu, "gpu", bad)
    nodes = candidate.nodes
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
        raise bad("nodes", nodes, f"a whole number from 1 to {MAX_NODES}")
    count = candidate.gpu_count
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_GPUS:
        raise bad("gpu_count", count, f"a whole number from 1 to {MAX_GPUS}")
    if _number(candidate.gpu_memory_gib, "gpu_memory_gib", bad) <= 0:
        raise bad("gpu_memory_gib", candidate.gpu_memory_gib, "a positive size")
    for field, limit in (("price_per_hour", MAX_PRICE_PER_HOUR), ("cost", None)):
        value = getattr(candidate, field)
        if value is not None:
            number = _number(value, field, bad)
            if number < 0 or (limit is not None and number > limit):
                raise bad(field, value, "a price from 0 (USD)" + (f" to {limit:g}" * bool(limit)))
    for field in ("samples_per_s", "hours", "memory_fraction"):
        if _number(getattr(candidate, field), field, bad) < 0:
            raise bad(field, getattr(candidate, field), "a number of 0 or more")
    for field in ("tokens_per_s_per_gpu", "mfu"):  # decoder jobs only; informational
        value = getattr(candidate, field)
        if value is not None and _number(value, field, bad) < 0:
            raise bad(field, value, "a number of 0 or more")
    memory = candidate.memory_per_gpu_bytes
    if isinstance(memory, bool) or not isinstance(memory, int) or memory < 0:
        raise bad("memory_per_gpu_bytes", memory, "a whole number of bytes")
    if not isinstance(candidate.price_verified, bool):
        raise bad("price_verified", candidate.price_verified, "true or false")
    if not isinstance(candidate.precision_used, str) or len(candidate.precision_used) > 40:
        raise bad("precision_used", candidate.precision_used, "a precision name")
    _texts(candidate.warnings, "warnings", bad, max_len=2000)
    for cidr in _texts(candidate.ssh_ingress_cidrs, "ssh_ingress_cidrs", bad, max_len=50):
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise bad("ssh_ingress_cidrs", cidr, "an address block") from None


# ------------------------------------------------------------------------------ helpers


def _known_instance_type(cloud: str, instance_type: str, where: str) -> None:
    """The type must be in its cloud's catalog: an unknown one would reach the cloud, where
    Aliyun's answer (no stock) would silently fail over, and AWS's fails in Terraform."""
    from orchestrator.catalog.loader import load_instances

    if instance_type not in {row.name for row in load_instances(cloud)}:
        raise UsageError(
            f"plan {where}: {cloud} instance type {instance_type!r} is not in the catalog",
            hint="see `orch catalog instances`",
        )


def _text(value: object, field: str, bad: Any, max_len: int = MAX_TEXT) -> str:
    if not isinstance(value, str) or not value or len(value) > max_len or not value.isprintable():
        raise bad(field, value, f"a printable text of 1 to {max_len} characters")
    return value


def _texts(value: object, field: str, bad: Any, max_len: int = MAX_TEXT) -> list[str]:
    if not isinstance(value, list) or len(value) > 100:
        raise bad(field, value, "a list")
    return [_text(item, field, bad, max_len) for item in value]


def _number(value: object, field: str, bad: Any) -> float:
    """A JSON number (not a string, not a bool), finite."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise bad(field, value, "a finite number")
    return float(value)


# Beside the keys that name the image, every cloud's image may say which CUDA its software
# needs: `orch check` then holds the driver to it (check/drivers.py; docs/check.md, `driver`).
IMAGE_CUDA_RE = re.compile(r"\d{1,2}(\.\d{1,2}){0,2}")


def _image(image: object, rules: Rules, bad: Any) -> None:
    if not isinstance(image, dict) or not image:
        raise bad("image", image, "an object naming the image")
    keys = (*rules.image_keys, "cuda")
    unknown = sorted(set(image) - set(keys))
    if unknown:
        raise bad("image", unknown[0], f"an image field ({', '.join(keys)})")
    if "cuda" in image and not (
        isinstance(image["cuda"], str) and IMAGE_CUDA_RE.fullmatch(image["cuda"])
    ):
        raise bad("image.cuda", image["cuda"], "a CUDA version such as 12.8")
    for key, value in image.items():
        values = value if key == "owners" and isinstance(value, list) else [value]
        if not values:
            raise bad(f"image.{key}", value, "a text")
        for item in values:
            _text(item, f"image.{key}", bad)
    if "id" in image and not rules.image_id_re.fullmatch(image["id"]):
        raise bad("image.id", image["id"], "an image id")
    if set(image) <= {"owners", "cuda"}:
        raise bad("image", image, "an object naming the image (owners or cuda alone name none)")
