"""Click options that steer selection, shared by `orch plan` and `orch up` (without --plan).

`selection_options` adds them; `selection_from_options(job, **kwargs)` turns the parsed
values into `PlanOptions`. With --gpus given explicitly, only boxes with exactly that many
GPUs are considered (its default only sets the estimate's data-parallel width).
`up_selection_options` is the same set without the --max-price filter: on `orch up` the price
a user names is the spot bid, `--spot-bid` (see commands/boxes.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from orchestrator import clouds
from orchestrator.commands.durations import parse_hours
from orchestrator.errors import UsageError
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.select import PlanOptions

F = TypeVar("F", bound=Callable[..., Any])

SELECTION_KEYS = (
    "cloud",
    "region",
    "spot",
    "max_price",
    "deadline",
    "headroom",
    "throughput",
    "dataset_gib",
    "instance_type",
    "allow_unverified_prices",
)

_MAX_PRICE = click.option(
    "--max-price",
    type=float,
    metavar="USD/h",
    help="Only boxes that cost at most this per hour (the whole instance).",
)

_OPTIONS = (
    click.option(
        "--cloud",
        type=click.Choice([*clouds.names(), "any"]),
        default="any",
        show_default=True,
        help="Which clouds to consider.",
    ),
    click.option("--region", help="Only this region (e.g. us-east-1, cn-hangzhou)."),
    click.option("--spot", is_flag=True, help="Also consider spot capacity (ranked together)."),
    _MAX_PRICE,
    click.option("--deadline", help="The job must finish within this time (e.g. 6h, 90m)."),
    click.option(
        "--headroom",
        type=click.FloatRange(0.1, 1.0),
        default=0.9,
        show_default=True,
        help="Fraction of GPU memory the estimated peak may use.",
    ),
    click.option(
        "--throughput",
        "throughput",
        multiple=True,
        metavar="GPU=SAMPLES_PER_S",
        help="Your measured samples/s per GPU; overrides the model (repeatable).",
    ),
    click.option(
        "--dataset-gib",
        type=click.FloatRange(min=0),
        default=0.0,
        help="Dataset size on disk, to size the root volume.",
    ),
    click.option(
        "--instance-type",
        help="Cost only this instance type (e.g. g5.12xlarge), in each region it is priced.",
    ),
    click.option(
        "--allow-unverified-prices",
        is_flag=True,
        help="Let prices marked NOT RE-VERIFIED (no dated source) win; default: ranked last.",
    ),
)


# `orch up` leaves the filter out: there the price a user names is the spot bid.
_UP_OPTIONS = tuple(option for option in _OPTIONS if option is not _MAX_PRICE)


def _apply(func: F, options: tuple[Callable[[F], F], ...]) -> F:
    for option in reversed(options):
        func = option(func)
    return func


def selection_options(func: F) -> F:
    return _apply(func, _OPTIONS)


def up_selection_options(func: F) -> F:
    """The selection options of `orch up` (planning inline): all but the --max-price filter."""
    return _apply(func, _UP_OPTIONS)


def explicit(parameter: str) -> bool:
    """Whether the user gave an option, as opposed to click filling in its default."""
    source = click.get_current_context().get_parameter_source(parameter)
    return source is not None and source.name == "COMMANDLINE"


def parse_throughput(values: tuple[str, ...]) -> dict[str, float]:
    """--throughput A10G=123.4 (repeatable): a user's measured samples/s per GPU."""
    result: dict[str, float] = {}
    for value in values:
        name, sep, number = value.partition("=")
        try:
            rate = float(number)
        except ValueError:
            rate = -1.0
        if not sep or rate <= 0:
            raise UsageError(f"--throughput expects GPU=SAMPLES_PER_S, got {value!r}")
        result[name.strip()] = rate
    return result


def selection_from_options(job: JobSpec, **kwargs: Any) -> PlanOptions:
    max_price = kwargs.get("max_price")
    if max_price is not None and max_price <= 0:
        raise UsageError("--max-price must be positive")
    deadline = kwargs.get("deadline")
    return PlanOptions(
        cloud=kwargs.get("cloud") or "any",
        region=kwargs.get("region"),
        spot=bool(kwargs.get("spot")),
        max_price=max_price,
        deadline_hours=parse_hours(deadline, "--deadline") if deadline else None,
        gpus=job.gpus if explicit("gpus") else None,
        headroom=kwargs.get("headroom") or 0.9,
        throughput=parse_throughput(tuple(kwargs.get("throughput") or ())),
        dataset_gib=kwargs.get("dataset_gib") or 0.0,
        instance_type=kwargs.get("instance_type") or None,
        allow_unverified_prices=bool(kwargs.get("allow_unverified_prices")),
    )
