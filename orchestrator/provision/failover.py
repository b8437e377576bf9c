"""Failover: which Terraform failures are the cloud's capacity or quota (and so worth trying
elsewhere), and the loop over a plan's candidates and their zones.

Order: the candidate's zones that the cloud says can launch it now (zones a spot box was just
reclaimed in last), then the plan's next candidate. A quota is the account's, whatever the
zone: it moves straight to the next candidate. Any other failure ends the loop. In a subnet
(`--subnet-id`) a candidate is tried once: the subnet fixes the zone.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator import clouds
from orchestrator.clouds.registry import zones_with_stock_of
from orchestrator.errors import OrchError
from orchestrator.plan import Candidate
from orchestrator.provision.terraform import TerraformError

Say = Callable[[str], None]
NO_ZONE = "no zone known to offer it (a cluster needs one zone)"


def failover_codes(cloud: str | None = None) -> tuple[str, ...]:
    """Capacity and quota codes of `cloud` (of every registered cloud when None), longest
    first so that "QuotaExceed.ElasticQuota" wins over "QuotaExceed"."""
    names = [cloud] if cloud else clouds.names()
    codes = {code for name in names for code in clouds.get(name).failover_codes()}
    return tuple(sorted(codes, key=lambda code: (-len(code), code)))


@functools.cache
def _failover_re(codes: tuple[str, ...]) -> re.Pattern[str]:
    # A code counts only where it stands as a code ("api error Unsupported: ...", "Code: X\n"),
    # so Terraform's own "Unsupported argument" or "Unsupported Terraform Core version" do not.
    return re.compile(
        r"(?<![A-Za-z.])("
        + "|".join(re.escape(code) for code in codes)
        + r")(?=[.:;,\"')\]]|[ \t]*$)",
        re.MULTILINE,
    )


def is_capacity_error(error: TerraformError, cloud: str | None = None) -> str | None:
    """The capacity/quota error code in a Terraform failure, or None."""
    match = _failover_re(failover_codes(cloud)).search(error.text())
    return match.group(1) if match else None


def zones_to_try(
    cloud: clouds.Cloud, candidate: Candidate, avoid: tuple[str, ...] = ()
) -> list[str | None]:
    """The zones to launch `candidate` in, best first: those the cloud says can launch it now,
    `avoid` last; [None] (the module picks) when it cannot tell. Raises CloudError when no
    zone has stock."""
    try:
        zones = zones_with_stock_of(
            cloud, candidate.region, candidate.instance_type, candidate.market == "spot"
        )
    except clouds.CloudError as exc:
        if exc.kind.fails_over:
            raise
        return [None]  # the stock check itself failed: the launch will tell
    if not zones:
        return [None]
    return sorted(zones, key=lambda zone: zone in avoid)  # stable: the cloud's order otherwise


def target(candidate: Candidate) -> dict[str, str]:
    return {
        "cloud": candidate.cloud,
        "region": candidate.region,
        "instance_type": candidate.instance_type,
        "market": candidate.market,
    }


def same_target(a: Candidate, b: Candidate) -> bool:
    return target(a) == target(b)


def describe(candidate: Candidate, zone: str | None = None) -> str:
    """`g5.xlarge spot in us-east-1a`; a cluster `2 × p4d.24xlarge on-demand in us-east-1a`."""
    return f"{candidate.label} {candidate.market} in {zone or candidate.region}"


@dataclass(frozen=True, slots=True)
class Attempts:
    """How one `up` tries its candidates: `prepare(candidate)` gives the candidate to launch
    once its zones are known (the image to boot now); `launch(candidate, zone)` creates the
    box (raises TerraformError); `clear()` destroys a partial box; `fail(message)` marks the
    box failed; `attempts` collects a row per failed try (the box record's "attempts")."""

    name: str
    prepare: Callable[[Candidate], Candidate]
    launch: Callable[[Candidate, str | None], None]
    clear: Callable[[], None]
    fail: Callable[[str], None]
    attempts: list[dict[str, Any]]
    say: Say
    in_subnet: bool = False  # --subnet-id: the subnet fixes the zone (provision/subnet.py)


def launch_first(
    candidates: list[Candidate], avoid: tuple[str, ...], how: Attempts
) -> tuple[Candidate, str | None]:
    """Launch the first candidate (and zone) that has capacity; returns it. OrchError when
    none has, or on any other failure (after `how.fail`)."""
    tried: list[str] = []
    for index, candidate in enumerate(candidates):
        last_candidate = index == len(candidates) - 1
        cloud = clouds.get(candidate.cloud)
        try:
            zones = zones_to_try(cloud, candidate, avoid)
        except clouds.CloudError as exc:  # the stock check: no zone can launch it now
            how.attempts.append({**target(candidate), "error": exc.code or exc.message})
            tried.append(f"{describe(candidate)}: {exc.code}")
            if not last_candidate:
                how.say(f"{describe(candidate)}: {exc.code}; trying the next candidate")
                continue
            how.fail(exc.message)
            raise _no_capacity(how.name, tried) from None
        if how.in_subnet:
            # A subnet lies in one zone, and the module launches there whatever zone it is
            # given (aws_gpu ignores zone_id with subnet_id): trying the stock's other zones
            # would launch the same subnet again, and the zone the box got is its outputs'.
            zones = [None]
        elif zones == [None] and candidate.nodes > 1:
            # A cluster needs one zone for all its nodes (aws_gpu refuses node_count > 1
            # without one): with none known to offer the type, try the next candidate as a
            # box with no stock would, rather than fail in Terraform's validation.
            how.attempts.append({**target(candidate), "error": NO_ZONE})
            tried.append(f"{describe(candidate)}: {NO_ZONE}")
            if not last_candidate:
                how.say(f"{describe(candidate)}: {NO_ZONE}; trying the next candidate")
                continue
            how.fail(f"{describe(candidate)}: {NO_ZONE}")
            raise _no_capacity(how.name, tried)
        candidate = how.prepare(candidate)
        for zone_index, zone in enumerate(zones):
            try:
                how.launch(candidate, zone)
                return candidate, zone
            except TerraformError as exc:
                code = is_capacity_error(exc, candidate.cloud)
                if code:
                    tried.append(f"{describe(candidate, zone)}: {code}")
                next_zone = _settle(exc, code, candidate, zones, zone_index, last_candidate, how)
                if next_zone is None and code:
                    raise _no_capacity(how.name, tried) from None
                if next_zone is None:
                    raise OrchError(
                        f"{exc.message}",
                        hint=f"`orch down {how.name}` removes what was created; `orch up` retries",
                    ) from None
                if not next_zone:
                    break
    raise OrchError("the plan has no candidates")  # pragma: no cover - Plan always has one


def _settle(
    exc: TerraformError,
    code: str | None,
    candidate: Candidate,
    zones: list[str | None],
    zone_index: int,
    last_candidate: bool,
    how: Attempts,
) -> bool | None:
    """After a failed launch: True to try the next zone, False the next candidate (the
    partial box cleared either way); None when the failure ends `up` (box marked failed)."""
    cloud = clouds.get(candidate.cloud)
    zone = zones[zone_index]
    how.attempts.append({**target(candidate), "zone": zone or "", "error": code or exc.message})
    # No stock in this zone: the region's other zones first, then the next candidate.
    next_zone = (
        code is not None
        and cloud.error_kind(code) is clouds.ErrorKind.CAPACITY
        and zone_index < len(zones) - 1
    )
    if code and (next_zone or not last_candidate):
        where = f"zone {zones[zone_index + 1]}" if next_zone else "the next candidate"
        how.say(f"{describe(candidate, zone)}: {code}; destroying the partial box, trying {where}")
        how.clear()
        return next_zone
    how.fail(exc.message)
    return None


def _no_capacity(name: str, tried: list[str]) -> OrchError:
    return OrchError(
        f"no capacity for any plan candidate ({'; '.join(tried)})",
        hint=f"`orch down {name}` removes what was created",
    )
