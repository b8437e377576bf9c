"""Read a plain command line against `Option` records, without importing click.

"Plain" is what people and scripts type: `--name value`, `--name=value`, `-o value`, flags, and
repeated options (the last value wins unless the option is `multiple`). Anything else returns
None and the caller hands the whole command line to click, which gives the help text and every
error message: an unknown option, a value out of its range or choices, a missing value, a value
that starts with "-", a positional argument, `--`, `-h`/`--help`. This parser never reports an
error itself, so on every command line it accepts it must agree with click; the tests compare
the two on generated command lines.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from orchestrator.commands.option_spec import Option

_REFUSED = object()  # a value click would refuse (or that needs its judgement)


@dataclass(frozen=True, slots=True)
class Parsed:
    """Every option's value by name, and the names the command line gave."""

    values: dict[str, Any]
    given: frozenset[str]


def parse_plain(options: Iterable[Option], args: list[str]) -> Parsed | None:
    """The options' values from `args`, or None where click must read the command line."""
    options = tuple(options)
    by_flag = {flag: option for option in options for flag in option.flags}
    values = {option.name: option.initial() for option in options}
    repeated: dict[str, list[Any]] = {}
    given: set[str] = set()
    rest = iter(args)
    for token in rest:
        flag, equals, attached = token.partition("=") if token.startswith("--") else (token, "", "")
        option = by_flag.get(flag)
        if option is None:
            return None
        if option.kind == "flag":
            if equals:
                return None  # click: "Option does not take a value"
            value: Any = True
        else:
            raw = attached if equals else next(rest, None)
            if raw is None or raw.startswith("-"):
                return None
            value = _convert(option, raw)
            if value is _REFUSED:
                return None
        given.add(option.name)
        if option.multiple:
            repeated.setdefault(option.name, []).append(value)
        else:
            values[option.name] = value
    for name, items in repeated.items():
        values[name] = tuple(items)
    return Parsed(values, frozenset(given))


def _convert(option: Option, raw: str) -> Any:
    """`raw` as click's type for the option converts it, or _REFUSED where click would fail."""
    if option.choices:
        return raw if raw in option.choices else _REFUSED
    if option.kind == "path":
        return raw if _path_acceptable(raw) else _REFUSED
    if option.kind == "text":
        return raw
    number = int if option.kind == "int" else float
    try:
        value = number(raw)  # click's INT and FLOAT call int() and float() likewise
    except ValueError:
        return _REFUSED
    return value if _in_range(option, value) else _REFUSED


def _in_range(option: Option, value: float) -> bool:
    # click's IntRange/FloatRange: a bound is inclusive unless marked open (comparisons with NaN
    # are false there as here, so NaN passes both).
    low, high = option.minimum, option.maximum
    if low is not None and (value <= low if option.minimum_open else value < low):
        return False
    return not (high is not None and value > high)


def _path_acceptable(raw: str) -> bool:
    # click.Path(dir_okay=False): a path that does not exist yet passes; one that exists must
    # not be a directory and must be readable (its `readable=True` default).
    try:
        status = os.stat(raw)
    except OSError:
        return True
    return not stat.S_ISDIR(status.st_mode) and os.access(raw, os.R_OK)
