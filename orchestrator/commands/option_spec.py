"""Command-line options declared as data: one declaration per option, shared by commands.

`orch plan`, `orch estimate` and the commands that take the same job and selection options
(`up`, `run`, `pool create`) declare them once, as `Option` values; `apply_click_options`
(and `click_command` in orchestrator/click_group.py) turn them into click's objects. A
`CommandSpec` is a command declared this way (its options and its body), built into a click
command by orchestrator/click_group.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from orchestrator.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])

# What an option's value is. "path" is click.Path(dir_okay=False): a file that may not exist
# yet, refused when it names a directory or an unreadable file.
KINDS = ("text", "int", "float", "flag", "path")


@dataclass(frozen=True, slots=True)
class Option:
    """One option: its flags ("--model", or "-o" and "--output"), the keyword the command
    receives, the value's kind and, for numbers, an optional range."""

    flags: tuple[str, ...]
    name: str
    kind: str = "text"
    default: Any = None
    multiple: bool = False
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    minimum_open: bool = False
    help: str | None = None
    metavar: str | None = None
    show_default: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name}: kind {self.kind!r} is not one of {KINDS}")
        if self.choices and self.kind != "text":
            raise ValueError(f"option {self.name}: choices are for text options")
        ranged = self.minimum is not None or self.maximum is not None or self.minimum_open
        if ranged and self.kind not in ("int", "float"):
            raise ValueError(f"option {self.name}: a range is for int and float options")

    def initial(self) -> Any:
        """The value the command receives when the option is not given."""
        if self.multiple:
            return ()
        if self.kind == "flag":
            return bool(self.default)
        return self.default


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """A command declared as data: its name, help, options and body.

    `run(given, **values)` receives every option's value by its `name` and `given`, the names
    the user typed (as opposed to defaults), as click's parameter source would say.
    """

    name: str
    help: str
    options: tuple[Option, ...]
    run: Callable[..., None]
    job_file: bool = False  # takes `-f FILE` / ./orch.yaml (orchestrator/jobfile)


def refuse_non_finite(options: Iterable[Option], values: dict[str, Any]) -> None:
    """UsageError for a float option given as nan or inf: float() and click's FLOAT and
    FloatRange accept both (NaN even passes a range), and none is a size, price or time."""
    for option in options:
        value = values.get(option.name)
        if option.kind == "float" and value is not None and not math.isfinite(value):
            raise UsageError(f"{option.flags[-1]} must be a finite number, got {value}")


def _click_type(option: Option) -> Any:
    import click

    if option.choices:
        return click.Choice(option.choices)
    if option.kind == "path":
        return click.Path(dir_okay=False)
    number = {"int": int, "float": float}.get(option.kind)
    if number is None:
        return None
    if option.minimum is None and option.maximum is None:
        return number
    bounded = click.IntRange if number is int else click.FloatRange
    return bounded(option.minimum, option.maximum, min_open=option.minimum_open)


def click_settings(option: Option) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    if option.kind == "flag":
        settings["is_flag"] = True
    else:
        click_type = _click_type(option)
        if click_type is not None:
            settings["type"] = click_type
    if option.default is not None:
        settings["default"] = option.default
    for key in ("multiple", "show_default"):
        if getattr(option, key):
            settings[key] = True
    for key in ("help", "metavar"):
        if getattr(option, key) is not None:
            settings[key] = getattr(option, key)
    return settings


def apply_click_options(func: F, options: Iterable[Option]) -> F:
    """Decorate a click command function with these options, the first one shown first."""
    import click

    for option in reversed(tuple(options)):
        func = click.option(*option.flags, option.name, **click_settings(option))(func)
    return func


def given_on_command_line(names: Iterable[str]) -> frozenset[str]:
    """Which of these parameters of the running click command the user gave: typed, or
    set in the job file (orch.yaml, which reaches click as the command's default_map)."""
    import click

    context = click.get_current_context()
    return frozenset(
        name
        for name in names
        if (source := context.get_parameter_source(name)) is not None
        and source.name in ("COMMANDLINE", "DEFAULT_MAP")
    )
