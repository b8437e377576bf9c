"""`orch plan`: rank instances by cost per job; print a table or JSON; write plan.json."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from orchestrator.commands.job_options import JOB_OPTIONS, job_from_options
from orchestrator.commands.option_spec import CommandSpec, Option
from orchestrator.commands.plan_table import (
    assumed_line,
    fitted_table,
    job_header,
    mark,
    three_figures,  # noqa: F401 - part of this module's interface (tests, benchmarks)
    wrap,
)
from orchestrator.commands.selection_options import SELECTION_OPTIONS, selection_from_options
from orchestrator.errors import UsageError
from orchestrator.plan import Candidate, write_plan
from orchestrator.sizing.levers import Lever, cheaper_if
from orchestrator.sizing.planning import nothing_fits_message, plan_from_ranking
from orchestrator.sizing.select import SETUP_HOURS, Ranking, node_scaling, rank, winners
from orchestrator.sizing.stacks import STACK_TEXT
from orchestrator.textui import terminal_width

HELP = """Pick the instance with the lowest cost per job that fits in GPU memory.

    Ranks every (cloud, region, instance type, market) whose per-GPU memory estimate stays
    within --headroom of GPU memory, by the cost of the whole job (--samples, or --epochs
    with --dataset-size; 100,000 samples when neither is given), then by time. With --gpus N
    only boxes with exactly N GPUs are considered; without it, any GPU count.

    \b
    Examples:
      orch plan --model bert-large
      orch plan --model llama-3-8b --lora-rank 16 --gpus 1 -o plan.json
      orch plan --hf-config config.json --cloud aws --region us-east-1 --spot --json
      orch plan --model bert-large --epochs 3 --dataset-size 120000 --max-price 2 --deadline 6h
      orch plan -f examples/orch.yaml --spot -o plan.json    the job file, a flag on top
    """

OPTIONS = (
    *JOB_OPTIONS,
    *SELECTION_OPTIONS,
    Option(
        ("--top",),
        "top",
        "int",
        8,
        minimum=1,
        show_default=True,
        help="How many instance types to show.",
    ),
    Option(
        ("-o", "--output"),
        "output",
        "path",
        help="Write the decision to this plan.json for `orch up`.",
    ),
    Option(("--json",), "as_json", "flag", help="Print the plan as JSON."),
)


def run_plan(
    given: frozenset[str], top: int, output: str | None, as_json: bool, **kwargs: Any
) -> None:
    job = job_from_options(**kwargs)
    options = selection_from_options(job, "gpus" in given, **kwargs)
    ranking = rank(job, options, given)
    if not winners(ranking, options):
        raise UsageError(nothing_fits_message(job, options, ranking))
    result = plan_from_ranking(ranking, options)
    levers = cheaper_if(job, options, ranking)
    result.cheaper_if = [lever.to_dict() for lever in levers]
    result.source = job_file_source()
    if output or as_json:  # the table does not show it
        result.scaling = node_scaling(job, options, result.choice)
    if output:
        write_plan(result, output)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
        return
    print(render_ranking(ranking, top, levers))
    if output:
        print(f"Wrote {output}: `orch up --plan {output} --name NAME` creates the box.")


# A click command built from these declarations (commands/option_spec.py).
COMMAND = CommandSpec("plan", HELP, OPTIONS, run_plan, job_file=True)


def job_file_source() -> dict[str, Any]:
    """Which job file (and revision) this plan came from; {} without one."""
    from orchestrator.jobfile.command import loaded_job_file

    loaded = loaded_job_file()
    if loaded is None:
        return {}
    from orchestrator.jobfile.source import describe  # only with a job file: it runs git

    return describe(loaded["job"])


def best_per_type(candidates: list[Candidate]) -> list[Candidate]:
    """The best-ranked row of each (cloud, instance type, market, nodes), in rank order."""
    seen: set[tuple[str, str, str, int]] = set()
    rows = []
    for c in candidates:
        key = (c.cloud, c.instance_type, c.market, c.nodes)
        if key not in seen:
            seen.add(key)
            rows.append(c)
    return rows


def render_ranking(ranking: Ranking, top: int, levers: Sequence[Lever] = ()) -> str:
    job = ranking.job
    width = terminal_width()
    rows = best_per_type(ranking.candidates)[:top]
    stack = f"throughput assumes {STACK_TEXT[job.stack]}"
    if job.stack != "optimised":
        stack += "; --stack optimised for compiled/fused kernels"
    body, narrow = fitted_table(rows, job, width)
    lines = [job_header(ranking), "", body, *([narrow] * bool(narrow)), stack]
    lines.append(assumed_line(SETUP_HOURS, rows))
    if any(_mark(c) for c in rows):
        lines.append("? = price NOT RE-VERIFIED: ranked after verified prices")
    lines += ["", why_winner(rows)]
    lines += [f"cheaper if {lever.describe()}" for lever in levers]
    if ranking.clouds is not None:
        lines.append(ranking.clouds.describe())
    lines += [f"warning: {w}" for w in (*ranking.warnings, *rows[0].warnings)]
    # The table is fitted to the width already; every other line is wrapped to it.
    return "\n".join(line if i == 2 else wrap(line, width) for i, line in enumerate(lines))


_mark = mark


def why_winner(rows: list[Candidate]) -> str:
    win = rows[0]
    text = (
        f"Winner: {win.label} ({win.cloud} {win.region}, {win.market}): "
        f"${win.cost:,.2f} for the job in {win.hours:.1f} h, "
        f"using {win.memory_fraction:.0%} of {win.gpu} memory"
    )
    runner_up = next((c for c in rows[1:] if c.cost is not None), None)
    if runner_up is not None and win.cost:
        extra = (runner_up.cost - win.cost) / win.cost
        if extra < 0:  # ranked after the winner for its cloud or region (see the clouds: line)
            text += (
                f"; {runner_up.label} ({runner_up.cloud} {runner_up.region}) costs"
                f" {-extra:.0%} less but is ranked after it"
            )
        else:
            text += f"; next best {runner_up.label} costs {extra:.0%} more"
            if runner_up.hours < win.hours:
                text += f" but finishes in {runner_up.hours:.1f} h"
    return text + "."
