"""The click parameter type of every duration option: shown as DURATION, read by
orchestrator/durations.py (`30s`, `10m`, `2h`, `1d`), handed to the command as seconds (float)."""

from __future__ import annotations

from typing import Any

import click

from orchestrator.durations import EXAMPLES, parse_seconds
from orchestrator.errors import UsageError


class Duration(click.ParamType):
    """A duration in seconds; a bare number is in `bare_unit` (the option's old unit)."""

    name = "duration"

    def __init__(self, bare_unit: str = "s", *, allow_zero: bool = False) -> None:
        self.bare_unit = bare_unit
        self.allow_zero = allow_zero

    def get_metavar(self, param: click.Parameter, *args: Any, **kwargs: Any) -> str:
        return "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)
        option = param.opts[-1] if param is not None and param.opts else "duration"
        try:
            seconds = parse_seconds(value, option, self.bare_unit, allow_zero=True)
        except UsageError:
            self.fail(f"{value!r} is not a duration (use e.g. {EXAMPLES})", param, ctx)
        if seconds == 0 and not self.allow_zero:
            self.fail(f"{value!r} is zero: give a positive duration (e.g. {EXAMPLES})", param, ctx)
        return seconds


DURATION = Duration()
DURATION_OR_ZERO = Duration(allow_zero=True)
