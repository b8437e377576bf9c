"""The checks a job file's value gets at loading where its schema cannot say the rule: a
duration's range (durations are text, "40d"), run.env's reserved names, box.tags' reserved
prefixes. Each applies the rule the option's own check applies once the options are parsed
(the same constants or the same function), so that the file's error names its file, line and
key rather than a flag the user did not type.

A check takes the key's value and returns None, or (the path below the key, message).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.durations import format_duration, parse_seconds
from orchestrator.errors import UsageError

Problem = tuple[tuple[Any, ...], str] | None
Check = Callable[[Any], Problem]


def _seconds(value: Any) -> float:
    # The schema let only the one duration format through, with its unit.
    return parse_seconds(str(value), "duration", allow_zero=True)


def duration_within(low: float, high: float) -> Check:
    """A duration from `low` to `high` seconds (commands/check_options.py's `bounded`)."""

    def check(value: Any) -> Problem:
        if not low <= _seconds(value) <= high:
            span = f"from {format_duration(low) if low else '0s'} to {format_duration(high)}"
            return (), f"{value!r} is not {span}"
        return None

    return check


def positive_duration(value: Any) -> Problem:
    """--deadline: any positive duration (selection_options.py reads it with parse_hours)."""
    return ((), f"{value!r} is zero: give a positive duration") if _seconds(value) == 0 else None


def box_lifetime(value: Any) -> Problem:
    """box.ttl: `none`, or a lifetime provision/inputs.py's parse_ttl takes (1m to 30d)."""
    from orchestrator.provision import inputs

    if inputs.no_expiry(value):
        return None
    low, high = inputs.MIN_TTL.total_seconds(), inputs.MAX_TTL.total_seconds()
    return duration_within(low, high)(value)


def environment_names(names: list[str]) -> Problem:
    """run.env: names the job may be given (run/spec.py's parse_env, on NAME= so that the
    value, read from the environment only at run time, is neither needed nor shown)."""
    from orchestrator.run.spec import parse_env

    for index, name in enumerate(names):
        try:
            parse_env([f"{name}="], environ={})
        except UsageError as exc:
            return (index,), exc.message.removeprefix(f"--env {name}: ")
    return None


def box_tags(tags: dict[str, str]) -> Problem:
    """box.tags: keys without `=` (a key becomes KEY=VALUE for --tag) and the rules of
    provision/inputs.py's check_tags (reserved prefixes, lengths)."""
    from orchestrator.provision import inputs

    for key, text in tags.items():
        if "=" in key:
            return (key,), "a tag key cannot hold '='"
        try:
            inputs.check_tags({key: text})
        except UsageError as exc:
            return (key,), exc.message.removeprefix("--tag ")
    return None
