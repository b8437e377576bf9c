"""Click options for how a box's GPUs are checked: shared by `orch check`, `orch watch` and
the check `orch up` runs once the box is up, so that each means the same in all three.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import click

from orchestrator.commands.duration_type import DURATION
from orchestrator.durations import duration_range, format_duration
from orchestrator.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])

VIA_CHOICES = ("ssh", "ssm", "cloud-assistant")
VIA_CHOICE = click.Choice(VIA_CHOICES)
# How long a GPU check keeps retrying while the box boots: the same for `orch check`, `up`,
# `run` and the pool (a box with drivers to install takes minutes; too short a wait fails a
# run and destroys a box that was about to answer).
DEFAULT_CHECK_TIMEOUT = "15m"
DAY_S = 86400.0
# The range, in seconds, of each duration option of up/run (by parameter): checked by
# `bounded_duration`
# once the options are parsed, and where a job file sets the option, at its loading
# (jobfile/layout.py), so that the file's error names its file, line and key.
DURATION_RANGES: dict[str, dict[str, float]] = {
    "check_timeout": {"low": 1, "high": DAY_S},
    "ssh_lost_after": {"low": 5, "high": DAY_S},
    "watch_interval": {"low": 0.2, "high": 3600},
    "rendezvous_timeout": {"low": 10, "high": DAY_S},
    "checkpoint_interval": {"low": 1, "high": DAY_S},
    "lease_wait": {"low": 0, "high": DAY_S},
}


def via_option(help_text: str = "How to reach the box.") -> Callable[[F], F]:
    return click.option(
        "--via",
        type=VIA_CHOICE,
        default="ssh",
        show_default=True,
        help=help_text + " The cloud agents (ssm, cloud-assistant) need no SSH ingress.",
    )


def check_timeout_option(flag: str = "--timeout", dest: str = "timeout") -> Callable[[F], F]:
    return click.option(
        flag,
        dest,
        type=DURATION,
        default=DEFAULT_CHECK_TIMEOUT,
        show_default=True,
        help="How long the GPU check keeps retrying while the box boots (30s, 10m; a bare"
        " number is seconds).",
    )


def ssh_config_option() -> Callable[[F], F]:
    return click.option(
        "--ssh-config",
        type=click.Path(dir_okay=False),
        help="ssh_config file passed to ssh -F (default: $ORCH_SSH_CONFIG, else ssh's own).",
    )


def bounded(option: str, value: float, *, low: float, high: float) -> float:
    """Refuse nan, inf and values outside [low, high] (click's FloatRange lets nan through)."""
    if not math.isfinite(value) or not low <= value <= high:
        raise UsageError(f"{option} must be a number from {low:g} to {high:g}, not {value!r}")
    return value


def bounded_duration(option: str, seconds: float, *, low: float, high: float) -> float:
    """`bounded` for a duration option: the range and the value in the duration format
    (`--timeout must be a duration from 1s to 1d, not 61d`), as a job file's error says it."""
    if not math.isfinite(seconds) or not low <= seconds <= high:
        span = duration_range(low, high)
        shown = format_duration(seconds) if math.isfinite(seconds) else repr(seconds)
        raise UsageError(f"{option} must be a duration {span}, not {shown}")
    return seconds
