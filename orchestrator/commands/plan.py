"""`orch plan`: rank instances by cost per job; print a table or JSON; write plan.json."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from orchestrator.commands.job_options import JOB_OPTIONS, job_from_options
from orchestrator.commands.option_spec import Option, QuickCommand
from orchestrator.commands.selection_options import SELECTION_OPTIONS, selection_from_options
from orchestrator.errors import UsageError
from orchestrator.plan import Candidate, write_plan
from orchestrator.sizing.levers import Lever, cheaper_if
from orchestrator.sizing.select import (
    Ranking,
    nothing_fits_message,
    plan_from_ranking,
    rank,
    winners,
)
from orchestrator.sizing.stacks import STACK_TEXT
from orchestrator.textui import fit_bar, gib, table

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
    ranking = rank(job, options)
    if not winners(ranking, options):
        raise UsageError(nothing_fits_message(job, options, ranking))
    result = plan_from_ranking(ranking, options)
    levers = cheaper_if(job, options, ranking)
    result.cheaper_if = [lever.to_dict() for lever in levers]
    if output:
        write_plan(result, output)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
        return
    print(render_ranking(ranking, top, levers))
    if output:
        print(f"Wrote {output}: `orch up --plan {output} --name NAME` creates the box.")


# Run without click on a plain command line (commands/quick_parse.py); `orch plan --help` and
# any command line the quick parser declines go through click with the same options.
COMMAND = QuickCommand("plan", HELP, OPTIONS, run_plan)


def best_per_type(candidates: list[Candidate]) -> list[Candidate]:
    """The best-ranked row of each (cloud, instance type, market), in rank order."""
    seen: set[tuple[str, str, str]] = set()
    rows = []
    for c in candidates:
        key = (c.cloud, c.instance_type, c.market)
        if key not in seen:
            seen.add(key)
            rows.append(c)
    return rows


def render_ranking(ranking: Ranking, top: int, levers: Sequence[Lever] = ()) -> str:
    job = ranking.job
    samples_note = " (assumed: set --samples or --epochs/--dataset-size)" * ranking.samples_assumed
    header = (
        f"{job.model or job.hf_config or f'{job.params_m:g}M-param model'}: "
        f"{ranking.parameters / 1e6:,.0f}M parameters, batch {job.batch}/GPU, seq {job.seq}, "
        f"{job.precision}, {job.optimizer}; {ranking.samples:,} samples{samples_note}"
    )
    rows = best_per_type(ranking.candidates)[:top]
    llm = any(c.mfu is not None for c in rows)
    # A precision column only when some box runs another precision than asked (amp-bf16 on
    # T4/V100 runs amp-fp16); "$/h" carries a "?" for a price NOT RE-VERIFIED.
    fallback = any(c.precision_used and c.precision_used != job.precision for c in rows)
    body = table(
        [
            "#",
            "cloud",
            "region",
            "instance",
            "GPUs",
            "market",
            "$/h",
            "samples/s",
            *(["tok/s/GPU", "MFU"] * llm),
            "hours",
            "job cost",
            "memory per GPU",
            *(["precision"] * fallback),
        ],
        [
            [
                str(i),
                c.cloud,
                c.region,
                c.instance_type,
                f"{c.gpu_count}x{c.gpu}",
                c.market,
                "-" if c.price_per_hour is None else f"{c.price_per_hour:.3f}" + _mark(c),
                three_figures(c.samples_per_s),
                *([three_figures(c.tokens_per_s_per_gpu or 0.0), f"{c.mfu or 0:.0%}"] * llm),
                f"{c.hours:.2f}",
                "-" if c.cost is None else f"${c.cost:,.2f}",
                f"{fit_bar(c.memory_fraction)} {c.memory_fraction:4.0%} "
                f"{gib(c.memory_per_gpu_bytes)}/{c.gpu_memory_gib:g} GiB",
                *([c.precision_used or job.precision] * fallback),
            ]
            for i, c in enumerate(rows, 1)
        ],
        right={0, 6, 7, 8, 9, *([10, 11] * llm)},
    )
    stack = f"throughput assumes {STACK_TEXT[job.stack]}"
    if job.stack != "optimised":
        stack += "; --stack optimised for compiled/fused kernels"
    lines = [header, "", body, stack]
    if any(_mark(c) for c in rows):
        lines.append("? = price NOT RE-VERIFIED: ranked after verified prices")
    lines += ["", why_winner(rows)]
    lines += [f"cheaper if {lever.describe()}" for lever in levers]
    if ranking.clouds is not None:
        lines.append(ranking.clouds.describe())
    lines += [f"warning: {w}" for w in (*ranking.warnings, *rows[0].warnings)]
    return "\n".join(lines)


def three_figures(value: float) -> str:
    """A rate to three significant figures, with thousands separators: 0.0123, 12.3, 1,230."""
    if value >= 100:
        return f"{float(f'{value:.3g}'):,.0f}"
    return f"{value:#.3g}".rstrip(".")


def _mark(c: Candidate) -> str:
    return "" if c.price_verified else "?"


def why_winner(rows: list[Candidate]) -> str:
    win = rows[0]
    text = (
        f"Winner: {win.instance_type} ({win.cloud} {win.region}, {win.market}): "
        f"${win.cost:,.2f} for the job in {win.hours:.1f} h, "
        f"using {win.memory_fraction:.0%} of {win.gpu} memory"
    )
    runner_up = next((c for c in rows[1:] if c.cost is not None), None)
    if runner_up is not None and win.cost:
        extra = (runner_up.cost - win.cost) / win.cost
        if extra < 0:  # ranked after the winner for its cloud or region (see the clouds: line)
            text += (
                f"; {runner_up.instance_type} ({runner_up.cloud} {runner_up.region}) costs"
                f" {-extra:.0%} less but is ranked after it"
            )
        else:
            text += f"; next best {runner_up.instance_type} costs {extra:.0%} more"
            if runner_up.hours < win.hours:
                text += f" but finishes in {runner_up.hours:.1f} h"
    return text + "."
