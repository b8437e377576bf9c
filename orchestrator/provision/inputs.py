"""The values a user gives for a box, each checked on its own: lifetime, SSH ingress, tags,
spot bid, owner. `provision/request.py` puts them together into one UpRequest."""

from __future__ import annotations

import getpass
import ipaddress
import os
import socket
from datetime import UTC, datetime, timedelta

from orchestrator.errors import UsageError

CHECKIP_URL = "https://checkip.amazonaws.com"
MAX_TTL = timedelta(days=30)
MIN_TTL = timedelta(minutes=1)
NO_EXPIRY = "none"  # `--ttl none`: the one spelling of "no expiry" (an empty value is an error)
# The widest --ssh-cidr union allowed without --allow-world-ssh: a /8's worth of IPv4
# addresses. IPv6 blocks are refused outright today (the box modules take IPv4 ingress only);
# the IPv6 figure (a /32's worth) is the rule once they are accepted.
MAX_SSH_ADDRESSES = {4: 2 ** (32 - 8), 6: 2 ** (128 - 32)}
MAX_TAGS = 30
# The orch:owner tag's value ($ORCH_OWNER): at most what EC2 takes, "Tag values are
# case-sensitive and accept a maximum of 256 Unicode characters" (EC2 API Reference, Tag,
# https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_Tag.html; tag limits,
# https://docs.aws.amazon.com/tag-editor/latest/userguide/tagging.html). A cloud with a lower
# limit refuses more in its own tfvars (Aliyun: 128, clouds/aliyun/terraform.py check_tags).
MAX_OWNER_LENGTH = 256


def parse_ttl(text: str) -> timedelta:
    """A box lifetime in the one duration format (orchestrator/durations.py); a unit is
    required."""
    from orchestrator.durations import parse_seconds

    hint = f"use a number and a unit (30m, 2h, 1d), or --ttl {NO_EXPIRY}"
    if not isinstance(text, str) or not text.strip()[-1:].isalpha():
        raise UsageError(f"bad --ttl {text!r}", hint=hint)
    try:
        seconds = parse_seconds(text, "--ttl")
    except UsageError:
        raise UsageError(f"bad --ttl {text!r}", hint=hint) from None
    if seconds < MIN_TTL.total_seconds():
        raise UsageError(f"--ttl {text} is shorter than a minute", hint=hint)
    if seconds > MAX_TTL.total_seconds():
        raise UsageError(f"--ttl {text} is longer than {MAX_TTL.days} days")
    return timedelta(seconds=seconds)


def no_expiry(ttl: str | None) -> bool:
    """Whether `ttl` means "no expiry": not given, or `--ttl none` (never the empty string)."""
    return ttl is None or (isinstance(ttl, str) and ttl.strip().lower() == NO_EXPIRY)


def check_ttl(ttl: str | None) -> timedelta | None:
    """The lifetime in `ttl`; None for no expiry. UsageError unless `ttl` is absent, `none`
    or a valid lifetime ("" is an error)."""
    return None if no_expiry(ttl) else parse_ttl(ttl)  # type: ignore[arg-type]


def expires_at_for(ttl: str | None, now: datetime | None = None) -> str | None:
    if no_expiry(ttl):
        return None
    return iso(expiry(parse_ttl(ttl), now))  # type: ignore[arg-type]


def expiry(ttl: timedelta, now: datetime | None = None) -> datetime:
    return ((now or datetime.now(UTC)) + ttl).astimezone(UTC).replace(microsecond=0)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_bid(bid: float | None) -> float | None:
    """--spot-bid: a positive, finite price in USD per hour, or None."""
    if bid is not None and not (0 < bid < float("inf")):
        raise UsageError(f"--spot-bid {bid} is not a positive price (USD per hour)")
    return bid


def normalise_cidrs(cidrs: list[str], allow_world_ssh: bool) -> list[str]:
    """Validate --ssh-cidr values: IPv4 blocks; the whole internet only when asked for."""
    result: list[str] = []
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for text in cidrs:
        try:
            network = ipaddress.ip_network(str(text).strip(), strict=False)
        except ValueError:
            raise UsageError(f"bad --ssh-cidr {text!r}: expected e.g. 203.0.113.7/32") from None
        if network.version != 4:
            raise UsageError(f"--ssh-cidr {text!r} is IPv6; give an IPv4 block")
        if network.prefixlen == 0 and not allow_world_ssh:
            raise UsageError(
                f"--ssh-cidr {text} opens SSH to the whole internet",
                hint="add --allow-world-ssh if you really mean it",
            )
        if str(network) not in result:
            result.append(str(network))
            networks.append(network)
    # Judge the union, not each block: 0.0.0.0/1 + 128.0.0.0/1 is the whole internet too.
    for version, limit in MAX_SSH_ADDRESSES.items():
        same = [n for n in networks if n.version == version]
        total = sum(n.num_addresses for n in ipaddress.collapse_addresses(same))  # type: ignore[arg-type]
        if total > limit and not allow_world_ssh:
            prefix = 8 if version == 4 else 32
            raise UsageError(
                f"--ssh-cidr blocks together open SSH to {total:,} addresses "
                f"(more than a /{prefix})",
                hint="narrow them, or add --allow-world-ssh if you really mean it",
            )
    return result


def discover_caller_cidr(timeout: float = 5.0) -> str:
    """This machine's public IPv4 address as a /32, asked of checkip.amazonaws.com."""
    import urllib.request

    try:
        with urllib.request.urlopen(CHECKIP_URL, timeout=timeout) as response:  # noqa: S310
            text = response.read(64).decode("ascii", "replace").strip()
        address = ipaddress.ip_address(text)
    except (OSError, ValueError):
        raise UsageError(
            f"cannot find this machine's public address ({CHECKIP_URL} did not answer)",
            hint="pass --ssh-cidr with the address block allowed to SSH in",
        ) from None
    if address.version != 4:
        raise UsageError(f"public address {address} is IPv6; pass --ssh-cidr with an IPv4 block")
    return f"{address}/32"


def default_owner() -> str:
    """$ORCH_OWNER (checked: `check_owner`), else user@host."""
    explicit = os.environ.get("ORCH_OWNER")
    if explicit:
        return check_owner(explicit)
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def check_owner(owner: str) -> str:
    """The orch:owner tag value: printable text (it is a record's text, shown by status and
    in a claim's "claimed by" line) of at most MAX_OWNER_LENGTH characters; UsageError (exit 2)
    before any record, key or Terraform call rather than a failed apply at the cloud."""
    if not isinstance(owner, str) or not owner.isprintable():
        raise UsageError(
            f"ORCH_OWNER {str(owner)[:40]!r} is not printable text (the orch:owner tag value)"
        )
    if len(owner) > MAX_OWNER_LENGTH:
        raise UsageError(
            f"ORCH_OWNER holds {len(owner)} characters; the orch:owner tag value holds at most "
            f"{MAX_OWNER_LENGTH} (AWS's tag value limit)"
        )
    return owner


def reserved_tag_prefixes() -> tuple[str, ...]:
    """Tag key prefixes users may not set: ours, and every registered cloud's own."""
    from orchestrator import clouds
    from orchestrator.clouds.base import ORCH_TAG_PREFIX

    return (ORCH_TAG_PREFIX, *(p for c in clouds.all_clouds() for p in c.reserved_tag_prefixes))


def parse_tags(values: tuple[str, ...] | list[str]) -> dict[str, str]:
    """--tag KEY=VALUE (repeatable). Values may hold anything: they travel as JSON."""
    return check_tags(dict(_split_tag(value) for value in values))


def _split_tag(value: str) -> tuple[str, str]:
    key, sep, text = str(value).partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"--tag expects KEY=VALUE, got {value!r}")
    return key, text


def check_tags(tags: dict[str, str]) -> dict[str, str]:
    """User tags: no reserved prefix, keys up to 128 and values up to 256 characters."""
    for key, text in tags.items():
        if not isinstance(key, str) or not isinstance(text, str) or not key.strip():
            raise UsageError(f"--tag expects KEY=VALUE, got {key!r}")
        reserved = reserved_tag_prefixes()
        if key.lower().startswith(reserved):
            raise UsageError(
                f"--tag {key!r}: the prefixes {', '.join(reserved[:-1])} and {reserved[-1]} "
                "are reserved"
            )
        if len(key) > 128 or len(text) > 256:
            raise UsageError(f"--tag {key[:40]!r}: keys hold at most 128, values 256 characters")
    if len(tags) > MAX_TAGS:
        raise UsageError(f"at most {MAX_TAGS} --tag options")
    return tags
