"""The text of `orch plan`: the job header, the ranked table fitted to the terminal's width
(shorter headers and cells, then columns dropped, least needed first; `#`, instance, `$/h` and
job cost always stay), and the line of what the figures assume (set-up time, price dates)."""

from __future__ import annotations

from typing import Any

from orchestrator.plan import Candidate
from orchestrator.sizing.assumptions import price_dates
from orchestrator.textui import Column, fit_bar, fit_table, gib


def three_figures(value: float) -> str:
    """A rate to three significant figures, with thousands separators: 0.0123, 12.3, 1,230."""
    if value >= 100:
        return f"{float(f'{value:.3g}'):,.0f}"
    return f"{value:#.3g}".rstrip(".")


def mark(c: Candidate) -> str:
    return "" if c.price_verified else "?"


def shape_text(shape: dict[str, int], job: Any) -> str:
    """The input size as planned: "224px images" for vision, "seq 512" otherwise."""
    if "image_size" in shape:
        return f"{shape['image_size']}px images"
    text = f"seq {shape.get('seq', job.seq)}"
    if "target_seq" in shape:
        text += f", target seq {shape['target_seq']}"
    return text


def job_header(ranking: Any) -> str:
    job = ranking.job
    name = job.model or job.hf_config or f"{job.params_m:g}M-param model"
    note = " (assumed: set --samples or --epochs/--dataset-size)" * ranking.samples_assumed
    return (
        f"{name}: {ranking.parameters / 1e6:,.0f}M parameters, batch {job.batch}/GPU, "
        f"{shape_text(ranking.shape, job)}, {job.precision}, {job.optimizer}; "
        f"{ranking.samples:,} samples{note}"
    )


def assumed_line(setup_hours: float, rows: list[Candidate]) -> str:
    dates = ", ".join(f"{cloud} {date}" for cloud, date in price_dates(rows).items())
    text = f"hours include {setup_hours * 60:.0f} min of set-up per box"
    return text + (f"; prices as read: {dates}" if dates else "")


def ranking_columns(rows: list[Candidate], job: Any) -> list[Column]:
    """The table's columns; `drop` orders what goes first when the terminal is narrow."""
    llm = any(c.mfu is not None for c in rows)
    # A precision column only when some box runs another precision than asked (amp-bf16 on
    # T4/V100 runs amp-fp16); "$/h" carries a "?" for a price NOT RE-VERIFIED.
    fallback = any(c.precision_used and c.precision_used != job.precision for c in rows)

    def cells(fn: Any) -> list[str]:
        return [fn(i, c) for i, c in enumerate(rows, 1)]

    columns = [
        Column("#", cells(lambda i, c: str(i)), right=True),
        Column("cloud", cells(lambda i, c: c.cloud), drop=4),
        Column("region", cells(lambda i, c: c.region), drop=8),
        Column("instance", cells(lambda i, c: c.label)),
        Column("GPUs", cells(lambda i, c: f"{c.gpu_count}x{c.gpu}"), drop=7),
        Column("market", cells(lambda i, c: c.market), drop=5),
        Column(
            "$/h",
            cells(
                lambda i, c: (
                    "-"
                    if c.cluster_price_per_hour is None
                    else f"{c.cluster_price_per_hour:.3f}" + mark(c)
                )
            ),  # fmt: skip
            right=True,
        ),
        Column("samples/s", cells(lambda i, c: three_figures(c.samples_per_s)), True, 6, "smp/s"),
    ]
    if llm:
        columns += [
            Column(
                "tok/s/GPU",
                cells(lambda i, c: three_figures(c.tokens_per_s_per_gpu or 0.0)),
                True,
                3,
                "tok/s",
            ),
            Column("MFU", cells(lambda i, c: f"{c.mfu or 0:.0%}"), True, 2),
        ]
    columns += [
        Column("hours", cells(lambda i, c: f"{c.hours:.2f}"), True, 10, "h"),
        Column(
            "job cost",
            cells(lambda i, c: "-" if c.cost is None else f"${c.cost:,.2f}"),
            True,
            short="cost",
        ),  # fmt: skip
        Column(
            "memory per GPU",
            cells(
                lambda i, c: (
                    f"{fit_bar(c.memory_fraction)} {c.memory_fraction:4.0%} "
                    f"{gib(c.memory_per_gpu_bytes)}/{c.gpu_memory_gib:g} GiB"
                )
            ),
            drop=9,
            short="mem/GPU",
            compact=cells(
                lambda i, c: (
                    f"{c.memory_fraction:.0%} {gib(c.memory_per_gpu_bytes)}/{c.gpu_memory_gib:g}G"
                )
            ),
        ),
    ]
    if fallback:
        columns.append(
            Column("precision", cells(lambda i, c: c.precision_used or job.precision), drop=1)
        )
    return columns


def fitted_table(rows: list[Candidate], job: Any, width: int | None) -> tuple[str, str]:
    """The table within `width`, and a line naming the columns left out for lack of room
    ("" when none was)."""
    text, dropped = fit_table(ranking_columns(rows, job), width)
    if not dropped:
        return text, ""
    return text, f"(too narrow for: {', '.join(dropped)}; widen the terminal or use --json)"


def wrap(text: str, width: int | None) -> str:
    """A long line wrapped to `width` (indented continuation), unchanged without a width."""
    if width is None or len(text) <= width:
        return text
    import textwrap  # only for a line too long: a plan written to a pipe or file never wraps

    return "\n".join(textwrap.wrap(text, width=max(width, 20), subsequent_indent="  "))
