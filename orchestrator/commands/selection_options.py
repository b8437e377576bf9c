"""Options that steer selection, shared by `orch plan` and `orch up` (without --plan), declared
as `Option` records (commands/option_spec.py).

`selection_options` adds them to a click command; `selection_from_options(job, gpus_given,
**kwargs)` turns the parsed values into `PlanOptions`. With --gpus given explicitly, only
boxes with exactly that many GPUs are considered (its default only sets the estimate's
data-parallel width).
`up_selection_options` is the same set without the --max-price filter: on `orch up` the price
a user names is the spot bid, `--spot-bid` (see commands/boxes.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

from orchestrator import clouds
from orchestrator.commands.option_spec import (
    Option,
    apply_click_options,
    given_on_command_line,
    refuse_non_finite,
)
from orchestrator.durations import parse_hours
from orchestrator.errors import UsageError
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.nodes import parse_nodes
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
    "gpu",
    "allow_unverified_prices",
    "nodes",
)

MAX_PRICE = Option(
    ("--max-price",),
    "max_price",
    "float",
    metavar="USD/h",
    help="Only boxes that cost at most this per hour (the whole instance).",
)

# Multi-node plans (issue 24): on plan, and on up/run when they plan inline.
NODES = Option(
    ("--nodes",),
    "nodes",
    metavar="N|auto",
    help="Boxes per cluster: exactly N (1-64), or auto (1, 2, 4 or 8, whichever costs the"
    " job least); default 1. Sharding (--zero 3) spreads memory over every node's GPUs.",
)

SELECTION_OPTIONS = (
    Option(
        ("--cloud",),
        "cloud",
        default="any",
        choices=(*clouds.names(), "any"),
        show_default=True,
        help="Which clouds to consider.",
    ),
    Option(("--region",), "region", help="Only this region (e.g. us-east-1, cn-hangzhou)."),
    Option(("--spot",), "spot", "flag", help="Also consider spot capacity (ranked together)."),
    MAX_PRICE,
    Option(
        ("--deadline",),
        "deadline",
        metavar="DURATION",
        help="The job must finish within this time (6h, 90m; a bare number is hours).",
    ),
    Option(
        ("--headroom",),
        "headroom",
        "float",
        0.9,
        minimum=0.1,
        maximum=1.0,
        show_default=True,
        help="Fraction of GPU memory the estimated peak may use.",
    ),
    Option(
        ("--throughput",),
        "throughput",
        multiple=True,
        metavar="GPU=SAMPLES_PER_S",
        help="Your measured samples/s per GPU; overrides the model (repeatable).",
    ),
    Option(
        ("--dataset-gib",),
        "dataset_gib",
        "float",
        0.0,
        minimum=0,
        help="Dataset size on disk, to size the root volume.",
    ),
    Option(
        ("--instance-type",),
        "instance_type",
        help="Cost only this instance type (e.g. g5.12xlarge), in each region it is priced.",
    ),
    Option(
        ("--gpu",),
        "gpu",
        metavar="NAME",
        help="Only boxes with this GPU (H100 matches H100-80GB; see `orch catalog gpus`).",
    ),
    Option(
        ("--allow-unverified-prices",),
        "allow_unverified_prices",
        "flag",
        help="Let prices marked NOT RE-VERIFIED (no dated source) win under --cloud any;"
        " default: ranked last (a named --cloud ranks its boxes anyway, with a warning).",
    ),
    NODES,
)


# `orch up` leaves the filter out: there the price a user names is the spot bid.
UP_SELECTION_OPTIONS = tuple(o for o in SELECTION_OPTIONS if o is not MAX_PRICE)


def selection_options(func: F) -> F:
    return apply_click_options(func, SELECTION_OPTIONS)


def up_selection_options(func: F) -> F:
    """The selection options of `orch up` (planning inline): all but the --max-price filter."""
    return apply_click_options(func, UP_SELECTION_OPTIONS)


def explicit(parameter: str) -> bool:
    """Whether the user gave an option of the running click command, as opposed to click
    filling in its default."""
    return parameter in given_on_command_line((parameter,))


def parse_throughput(values: tuple[str, ...]) -> dict[str, float]:
    """--throughput A10G=123.4 (repeatable): a user's measured samples/s per GPU."""
    result: dict[str, float] = {}
    for value in values:
        name, sep, number = value.partition("=")
        try:
            rate = float(number)
        except ValueError:
            rate = -1.0
        if not sep or not math.isfinite(rate) or rate <= 0:  # float() takes nan and inf
            raise UsageError(f"--throughput expects GPU=SAMPLES_PER_S, got {value!r}")
        result[name.strip()] = rate
    if result:
        from orchestrator.catalog import load_gpus
        from orchestrator.catalog.gpu_names import resolve_gpu

        known = load_gpus()
        result = {resolve_gpu(name, known, "--throughput"): rate for name, rate in result.items()}
    return result


def selection_from_options(job: JobSpec, gpus_given: bool, **kwargs: Any) -> PlanOptions:
    """PlanOptions from the parsed values; `gpus_given`: --gpus was on the command line (only
    then does it filter boxes by GPU count)."""
    refuse_non_finite(SELECTION_OPTIONS, kwargs)
    max_price = kwargs.get("max_price")
    if max_price is not None and max_price <= 0:
        raise UsageError("--max-price must be positive")
    deadline = kwargs.get("deadline")
    gpu = kwargs.get("gpu")
    if gpu is not None:
        from orchestrator.catalog import load_gpus
        from orchestrator.catalog.gpu_names import resolve_gpu

        gpu = resolve_gpu(gpu, load_gpus())
    return PlanOptions(
        cloud=kwargs.get("cloud") or "any",
        region=kwargs.get("region"),
        spot=bool(kwargs.get("spot")),
        max_price=max_price,
        deadline_hours=parse_hours(deadline, "--deadline") if deadline else None,
        gpus=job.gpus if gpus_given else None,
        headroom=kwargs.get("headroom") or 0.9,
        throughput=parse_throughput(tuple(kwargs.get("throughput") or ())),
        dataset_gib=kwargs.get("dataset_gib") or 0.0,
        instance_type=kwargs.get("instance_type") or None,
        gpu=gpu,
        allow_unverified_prices=bool(kwargs.get("allow_unverified_prices")),
        nodes=parse_nodes(kwargs.get("nodes")),
    )
