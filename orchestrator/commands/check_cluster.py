"""`orch check CLUSTER`: the options that only a cluster takes, and its text report.

--backend and --expect-busbw are diagnostic knobs: a real cluster is checked with NCCL
against its type's network figure. They exist so that CPU-only nodes (the test suite's
loopback "nodes", a cluster whose GPUs are in doubt) can run the same all_reduce over gloo
and be judged against a figure the user states.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from orchestrator.check.untrusted import printable
from orchestrator.commands.check_options import bounded
from orchestrator.errors import EXIT_OK

if TYPE_CHECKING:
    from orchestrator.check.cluster import ClusterReport
    from orchestrator.provision.boxes import Box

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_SIZE_MIB = 256
MAX_SIZE_MIB = 16384
_FLAGS = {
    "backend": "--backend",
    "expect_busbw": "--expect-busbw",
    "allreduce_size": "--allreduce-size",
}


def cluster_check_options() -> Callable[[F], F]:
    def decorate(command: F) -> F:
        options = [
            click.option(
                "--allreduce-size",
                type=click.IntRange(min=1, max=MAX_SIZE_MIB),
                help=f"Cluster: MiB reduced per all_reduce (default {DEFAULT_SIZE_MIB}; "
                "nccl-tests reaches its peak from about 256).",
            ),
            click.option(
                "--expect-busbw",
                type=float,
                metavar="GB/S",
                help="Cluster, diagnostic: judge the all_reduce against this bus bandwidth "
                "instead of the catalog's figure for the type (CPU test nodes, a known "
                "fabric).",
            ),
            click.option(
                "--backend",
                type=click.Choice(("nccl", "gloo")),
                help="Cluster, diagnostic: the all_reduce's torch.distributed backend "
                "(default nccl, on the GPUs; gloo runs it on CPUs, for nodes without GPUs).",
            ),
        ]
        for option in options:
            command = option(command)
        return command

    return decorate


def cluster_options_given(values: dict[str, Any]) -> list[str]:
    """The cluster-only flags the user gave, as typed."""
    return [flag for key, flag in _FLAGS.items() if values.get(key) is not None]


def allreduce_bytes(size_mib: int | None) -> int:
    return (size_mib or DEFAULT_SIZE_MIB) * 2**20


def is_cluster(box: Box) -> bool:
    from orchestrator.check.cluster import is_cluster as several_nodes

    return several_nodes(box)


def check_expect_busbw(value: float | None) -> None:
    if value is not None:
        bounded("--expect-busbw", value, low=1e-6, high=1e6)


def print_cluster_report(report: ClusterReport) -> None:
    state = "OK" if report.ok else "FAILED"
    click.echo(f"cluster {report.box} ({len(report.nodes)} nodes): {state}")
    for node in report.nodes:
        if node.report is None:
            click.echo(f"  node {node.node.index} ({node.transport}): UNREACHABLE")
            click.echo(f"    {node.unreachable}")
            continue
        verdict = "OK" if node.report.ok else "MISMATCH"
        click.echo(f"  node {node.node.index} ({node.transport}): {verdict}")
        for gpu in node.report.gpus:
            memory = f"{gpu.memory_total_mib} MiB" if gpu.memory_total_mib is not None else "?"
            click.echo(f"    GPU {gpu.index}: {printable(gpu.name, 100)}, {memory}")
        for check in node.report.checks:
            mark = "pass" if check.ok else "FAIL"
            click.echo(f"    [{mark}] {check.name}: {printable(check.message)}")
    check = report.allreduce
    if check is not None:
        mark = "skip" if check.skipped else ("pass" if check.exit_code == EXIT_OK else "FAIL")
        click.echo(f"  [{mark}] all_reduce: {printable(check.line, 2000)}")
    if not report.ok:
        click.echo(f"orch: error: cluster {report.box}: {summary(report)}", err=True)


def summary(report: ClusterReport) -> str:
    """One line: why the cluster failed its check."""
    parts = []
    for node in report.nodes:
        if node.report is None:
            parts.append(f"node {node.node.index} unreachable")
        elif not node.report.ok:
            failed = ", ".join(c.name for c in node.report.failures())
            parts.append(f"node {node.node.index} failed {failed}")
    check = report.allreduce
    if check is not None and not check.skipped and check.exit_code != EXIT_OK:
        parts.append(check.line)
    return printable("; ".join(parts) or "failed", 2000)
