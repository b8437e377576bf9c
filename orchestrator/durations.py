"""Durations, one format everywhere: `30s`, `10m`, `2h`, `1d` (decimals allowed: `1.5h`).

Every option that takes a length of time (--ttl, --deadline, --check-timeout, --lease-wait,
--checkpoint-interval, pool --wait/--idle ...) and every duration in a job file (orch.yaml)
goes through `parse_seconds`. A bare number is read in the option's old unit (seconds for the
timeouts and intervals, hours for --deadline) so that command lines written before the
units existed keep working; help shows these options as DURATION.
"""

from __future__ import annotations

import re

from orchestrator.errors import UsageError

UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"^\s*([0-9]{1,12}(?:\.[0-9]{1,9})?)\s*([smhd]?)\s*$")
EXAMPLES = "30s, 10m, 2h, 1d"


def parse_seconds(
    text: str, option: str, default_unit: str = "s", *, allow_zero: bool = False
) -> float:
    """Seconds in `text` ("90m", "2h", "1.5d"); a bare number is in `default_unit`.
    Positive unless `allow_zero`; UsageError naming `option` otherwise."""
    match = _PATTERN.match(text) if isinstance(text, str) else None
    if not match:
        raise UsageError(f"{option}: cannot read duration {text!r} (use e.g. {EXAMPLES})")
    value = float(match.group(1)) * UNIT_SECONDS[match.group(2) or default_unit]
    if value < 0 or (value == 0 and not allow_zero):
        raise UsageError(f"{option}: duration must be positive, got {text!r}")
    return value


def parse_hours(text: str, option: str, default_unit: str = "h") -> float:
    """Hours in `text`; a bare number is in `default_unit`. Must be positive."""
    return parse_seconds(text, option, default_unit) / 3600.0


def format_duration(seconds: float) -> str:
    """The shortest exact spelling of `seconds` in the same format: 600 -> "10m", 43200 -> "12h"."""
    for unit in ("d", "h", "m"):
        count = seconds / UNIT_SECONDS[unit]
        if count >= 1 and count == int(count):
            return f"{int(count)}{unit}"
    return f"{seconds:g}s"


def duration_range(low: float, high: float) -> str:
    """`from 1s to 1d`: a duration option's range as its errors say it (0 is `0s`)."""
    return f"from {format_duration(low) if low else '0s'} to {format_duration(high)}"
