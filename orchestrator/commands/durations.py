"""Parse human durations ("90m", "2h", "1d", "1.5") used by --deadline and --ttl."""

from __future__ import annotations

import re

from orchestrator.errors import UsageError

_UNITS_HOURS = {"s": 1 / 3600, "m": 1 / 60, "h": 1.0, "d": 24.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_hours(text: str, option: str, default_unit: str = "h") -> float:
    """Hours in `text`; a bare number is in `default_unit`. Must be positive."""
    match = _PATTERN.match(text)
    if not match:
        raise UsageError(f"{option}: cannot read duration {text!r} (use e.g. 30m, 2h, 1d)")
    value = float(match.group(1)) * _UNITS_HOURS[match.group(2) or default_unit]
    if value <= 0:
        raise UsageError(f"{option}: duration must be positive, got {text!r}")
    return value
