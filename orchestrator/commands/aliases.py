"""Old spellings of options and choices that keep working, hidden from help, with a warning.

Renames keep CI lines written against earlier releases running: `--check-via` (now `--via`),
`up --max-price` (now `--spot-bid`) and `sweep --cloud all` (now `any`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from orchestrator.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])


def warn_deprecated(old: str, new: str) -> None:
    click.echo(f"orch: warning: {old} is deprecated; use {new}", err=True)


def deprecated_option(old: str, new: str, dest: str, **kwargs: Any) -> Callable[[F], F]:
    """A hidden option `old` whose value lands in parameter `dest`; see `take_deprecated`."""

    def warn(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None:
            warn_deprecated(old, new)
        return value

    return click.option(old, dest, hidden=True, default=None, callback=warn, **kwargs)


def take_deprecated(new: str, new_value: Any, old: str, old_value: Any, new_given: bool) -> Any:
    """The value to use when an option has a deprecated spelling: the old one if given.

    Both given with different values is a usage error rather than a silent pick.
    """
    if old_value is None:
        return new_value
    if new_given and new_value != old_value:
        raise UsageError(f"give {new} or the deprecated {old}, not both")
    return old_value


class AliasedChoice(click.Choice):
    """A click.Choice that also accepts hidden, deprecated aliases (`all` for `any`)."""

    def __init__(self, choices: list[str], aliases: Mapping[str, str], option: str) -> None:
        super().__init__(choices)
        self.aliases = dict(aliases)
        self.option = option

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value in self.aliases:
            new = self.aliases[value]
            warn_deprecated(f"{self.option} {value}", f"{self.option} {new}")
            return new
        return super().convert(value, param, ctx)
