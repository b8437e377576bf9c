"""What `orch up` and `orch run` settle with the user before they spend money.

- Expiry by default: every box gets a lifetime, `DEFAULT_TTL` unless --ttl (or the job file's
  `box.ttl`) says otherwise; `--ttl none` is the one way to a box that never expires, and it is
  warned about here and recorded in the box's record (`ttl: "none"`).
- Confirmation: in a terminal, the box, its price per hour, its lifetime and the expected job
  cost are shown and the user is asked; `-y/--yes` skips the question, and without a terminal
  (CI, pipes) nothing asks.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO

from orchestrator.durations import parse_seconds
from orchestrator.errors import EXIT_FAILURE, OrchError
from orchestrator.textui import counted

DEFAULT_TTL = "12h"  # a box's lifetime unless told otherwise (up and run alike)
NO_EXPIRY = "none"


def is_no_expiry(ttl: str | None) -> bool:
    return isinstance(ttl, str) and ttl.strip().lower() == NO_EXPIRY


def warn_no_expiry(name: str, ttl: str | None, say: Callable[[str], None]) -> None:
    """The warning `--ttl none` earns: such a box runs (and costs) until someone destroys it."""
    if is_no_expiry(ttl):
        say(
            f"warning: box {name} will never expire (--ttl none): the sweeper leaves it alone"
            f" and it costs money until `orch down {name}`"
        )


def interactive(stdin: TextIO | None = None, stderr: TextIO | None = None) -> bool:
    """Whether a person can answer: stdin and stderr (where the question goes) are terminals."""
    streams = (stdin or sys.stdin, stderr or sys.stderr)
    try:
        return all(stream.isatty() for stream in streams)
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def offer_lines(choice: Any, name: str, ttl: str | None, alternatives: int) -> list[str]:
    """What the user is asked to pay for: the box, $/h, the lifetime, the job's expected cost."""
    price = choice.price_per_hour
    hourly = "price unknown" if price is None else f"${price:.3f}/h"
    lines = [
        f"box {name}: {choice.instance_type} ({choice.gpu_count}x{choice.gpu}, {choice.market})"
        f" in {choice.cloud} {choice.region}, {hourly}",
    ]
    if is_no_expiry(ttl):
        lines.append("  lifetime: never expires (--ttl none): it costs until `orch down`")
    else:
        seconds = parse_seconds(str(ttl), "--ttl")
        at_most = "" if price is None else f", at most ${price * seconds / 3600:,.2f} if kept"
        lines.append(f"  lifetime: {ttl} (destroyed by itself then{at_most})")
    cost = "unknown" if choice.cost is None else f"${choice.cost:,.2f}"
    lines.append(f"  expected job cost: {cost} ({choice.hours:.2f} h at the planned throughput)")
    if alternatives:
        tried = counted(alternatives, "alternative")
        lines.append(f"  ({tried} of the plan tried on capacity errors)")
    return lines


def confirm_launch(
    plan: Any,
    name: str,
    ttl: str | None,
    yes: bool,
    *,
    stdin: TextIO | None = None,
    stderr: TextIO | None = None,
) -> None:
    """Ask before creating a box, in a terminal and without --yes; OrchError (exit 1) on "no".
    Without a terminal (CI) or with --yes this returns at once."""
    if yes or not interactive(stdin, stderr):
        return
    out = stderr or sys.stderr
    source = stdin or sys.stdin
    for line in offer_lines(plan.choice, name, ttl, len(plan.alternatives)):
        out.write(line + "\n")
    out.write("Create it? [y/N] ")
    out.flush()
    answer = source.readline()
    if not answer:  # end of input (Ctrl-D): no answer is not a yes
        out.write("\n")
    if answer.strip().lower() not in ("y", "yes"):
        raise OrchError("cancelled: nothing was created", exit_code=EXIT_FAILURE)


def yes_option(func: Any) -> Any:
    """`-y/--yes`: create without asking (a terminal is asked otherwise; CI never is)."""
    import click

    return click.option(
        "-y",
        "--yes",
        "yes",
        is_flag=True,
        help="Do not ask before creating the box (nothing asks without a terminal anyway).",
    )(func)


def ready_to_launch(request: Any, yes: bool, as_json: bool) -> Any:
    """After every check (an UpRequest from provision.request.build_request): credentials
    (exit 2 before any record), the no-expiry warning (on stderr, under --json too), the
    question in a terminal, then the expiry counted from now and, without --ssh-cidr, this
    machine's address (a network call, so last)."""
    from dataclasses import replace

    from orchestrator.commands.console import make_say
    from orchestrator.provision.preflight import preflight

    request = replace(request, plan=preflight(request.plan, make_say(as_json)))
    warn_no_expiry(request.name, request.ttl, make_say(False))
    confirm_launch(request.plan, request.name, request.ttl, yes)
    return request.for_box().with_caller_cidr()
