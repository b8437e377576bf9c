"""`orch check` and `orch watch`: verify and observe a box's GPUs."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from orchestrator.check.untrusted import printable
from orchestrator.commands.check_cluster import (
    allreduce_bytes,
    check_expect_busbw,
    cluster_check_options,
    cluster_options_given,
    is_cluster,
    print_cluster_report,
)
from orchestrator.commands.check_options import (
    DAY_S,
    bounded,
    bounded_duration,
    check_timeout_option,
    ssh_config_option,
    via_option,
)
from orchestrator.commands.duration_type import DURATION, DURATION_OR_ZERO
from orchestrator.errors import EXIT_FAILURE, OrchError, UsageError

if TYPE_CHECKING:
    from orchestrator.check.cluster import ClusterReport
    from orchestrator.check.verify import CheckReport, Expected
    from orchestrator.check.watch import Sample
    from orchestrator.provision.boxes import Box


class JsonErrors(click.Command):
    """A command whose every error, click's own usage errors included, honours --json.

    With --json the error is also printed on stdout as one JSON object (`ok` false, `error`,
    `exit_code`), so a script reading stdout never gets nothing; the `orch: error:` line on
    stderr and the exit code stay as for every command. The message is escaped (it can carry
    text a box sent) before either is printed.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)  # click's parser consumes the list it is given
        try:
            return super().parse_args(ctx, args)
        except click.ClickException as exc:
            if "--json" in given:
                _echo_error(ctx, exc.format_message(), exc.exit_code)
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OrchError as exc:
            safe = printable(exc.one_line(), limit=2000)
            if ctx.params.get("as_json"):
                _echo_error(ctx, safe, exc.exit_code)
            raise OrchError(safe, exit_code=exc.exit_code) from None
        except click.ClickException as exc:
            if ctx.params.get("as_json"):
                _echo_error(ctx, exc.format_message(), exc.exit_code)
            raise


def _echo_error(ctx: click.Context, message: str, exit_code: int) -> None:
    name = ctx.params.get("name")
    error = {"box": name, "ok": False, "error": " ".join(message.split()), "exit_code": exit_code}
    click.echo(json.dumps(error, indent=2 if ctx.info_name == "check" else None))


def _load_box(name: str) -> Box:
    from orchestrator.provision.boxes import load_box

    return load_box(name)


def _print_report(report: CheckReport) -> None:
    title = f"box {report.box}" if report.box else "this machine"
    click.echo(f"{title} ({report.transport}): {'OK' if report.ok else 'MISMATCH'}")
    for gpu in report.gpus:
        memory = f"{gpu.memory_total_mib} MiB" if gpu.memory_total_mib is not None else "? MiB"
        name, driver = printable(gpu.name, 100), printable(gpu.driver_version or "?", 40)
        click.echo(f"  GPU {gpu.index}: {name}, {memory}, driver {driver}")
    for check in report.checks:
        click.echo(f"  [{'pass' if check.ok else 'FAIL'}] {check.name}: {printable(check.message)}")


def _expected_from_plan(plan_path: str | None) -> Expected:
    from orchestrator.check.verify import Expected

    if plan_path is None:
        return Expected()
    from orchestrator.plan import read_plan

    return Expected.from_candidate(read_plan(plan_path).choice)


@click.command(cls=JsonErrors)
@click.argument("name", required=False)
@click.option("--local", is_flag=True, help="Check the machine this runs on instead of a box.")
@click.option(
    "--plan",
    "plan_path",
    type=click.Path(dir_okay=False),
    help="With --local: compare against this plan's choice.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report.")
@check_timeout_option()
@ssh_config_option()
@via_option()
@cluster_check_options()
@click.pass_context
def check(ctx, name, local, plan_path, as_json, timeout, ssh_config, via, **cluster) -> None:
    """Verify that a box's GPUs (count, model, memory, driver, ECC) match its plan.

    A cluster: every node's GPUs in parallel, then a short all_reduce across the nodes whose
    bus bandwidth is compared with what the type's network should give (docs/multi-node.md).

    \b
    Examples:
      orch check exp1
      orch check exp1 --via ssm --timeout 300 --json
      orch check exp1 --ssh-config ~/.ssh/orch_config
      orch check --local --plan plan.json
      orch check cluster1 --allreduce-size 1024

    \b
    Exit codes: 0 match, 3 mismatch (or no driver, or a cluster's all_reduce far below its
    network), 1 unreachable, 2 usage.
    """
    from orchestrator.check.verify import check_box, check_local

    if local == bool(name):
        raise UsageError("give a box NAME or --local (not both)")
    if plan_path and not local:
        raise UsageError("--plan goes with --local; a box is checked against its own plan")
    bounded_duration("--timeout", timeout, low=1, high=DAY_S)
    given = cluster_options_given(cluster)
    if local and given:
        raise UsageError(f"{given[0]} goes with a cluster, not --local")
    if local:
        report = check_local(_expected_from_plan(plan_path), timeout=timeout)
    else:
        box = _load_box(name)
        if is_cluster(box):
            _check_cluster(ctx, box, as_json, timeout, ssh_config, via, cluster)
            return
        if given:
            raise UsageError(f"{given[0]} goes with a cluster; box {name} has one node")
        report = check_box(box, ssh_config=ssh_config, timeout=timeout, via=via)
        _record(box, report)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        _print_report(report)
    ctx.exit(report.exit_code)


def _check_cluster(ctx, box, as_json, timeout, ssh_config, via, cluster) -> None:
    from orchestrator.check.cluster import check_cluster

    if via != "ssh":
        raise UsageError(f"a cluster is checked over ssh (its nodes reach each other), not {via}")
    check_expect_busbw(cluster["expect_busbw"])
    report = check_cluster(
        box,
        ssh_config=ssh_config,
        timeout=timeout,
        backend=cluster["backend"] or "nccl",
        size_bytes=allreduce_bytes(cluster["allreduce_size"]),
        expect_busbw=cluster["expect_busbw"],
    )
    _record(box, report)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        print_cluster_report(report)
    ctx.exit(report.exit_code)


def _record(box: Box, report: CheckReport | ClusterReport) -> None:
    """Keep the report in the box's directory: sizing reads its driver version
    (`--cuda-context-gib box:NAME`). Best effort: a read-only state home loses nothing else."""
    import contextlib

    from orchestrator.check.record import save_check

    with contextlib.suppress(OSError):
        save_check(box.directory, report.to_dict())


def _format_sample(sample: Sample) -> list[str]:
    stamp = sample.to_dict()["time"]
    if sample.error:
        return [f"{stamp}  {sample.error_kind or 'unreachable'}: {printable(sample.error)}"]
    lines = []
    for gpu in sample.gpus:
        util = f"{gpu.utilization_pct:3d}%" if gpu.utilization_pct is not None else " N/A"
        fraction = gpu.memory_fraction
        memory = (
            f"{gpu.memory_used_mib}/{gpu.memory_total_mib} MiB ({fraction:.0%})"
            if fraction is not None
            else "memory N/A"
        )
        lines.append(f"{stamp}  GPU {gpu.index}  util {util}  mem {memory}")
    return lines + [f"{stamp}  warning: {w}" for w in sample.warnings]


@click.command(cls=JsonErrors)
@click.argument("name", required=False)
@click.option("--local", is_flag=True, help="Watch the machine this runs on.")
@click.option(
    "--interval",
    type=DURATION,
    default="5s",
    show_default=True,
    help="Time between samples (at least 0.1s).",
)
@click.option("--count", type=click.IntRange(min=1), help="Stop after N samples (default: ^C).")
@click.option(
    "--window",
    type=DURATION_OR_ZERO,
    default="5m",
    show_default=True,
    help="How long utilisation stays under --low-util before a warning.",
)
@click.option(
    "--low-util",
    type=click.FloatRange(min=0, max=100),
    default=30,
    show_default=True,
    help="Utilisation percentage counted as idle.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per sample (JSON lines).")
@ssh_config_option()
@via_option()
def watch(name, local, interval, count, window, low_util, as_json, ssh_config, via) -> None:
    """Show GPU utilisation and memory every few seconds; warn about idle or full GPUs.

    \b
    Examples:
      orch watch exp1
      orch watch exp1 --interval 10s --count 6 --json
      orch watch exp1 --low-util 50 --window 10m
      orch watch --local
    """
    from orchestrator.check.transport import LocalTransport, transport_for_box
    from orchestrator.check.watch import UsageMonitor, window_samples
    from orchestrator.check.watch import watch as run_watch

    if local == bool(name):
        raise UsageError("give a box NAME or --local (not both)")
    bounded_duration("--interval", interval, low=0.1, high=DAY_S)
    bounded_duration("--window", window, low=0, high=7 * DAY_S)
    bounded("--low-util", low_util, low=0, high=100)
    transport = (
        LocalTransport()
        if local
        else transport_for_box(_load_box(name), via=via, ssh_config=ssh_config)
    )
    monitor = UsageMonitor(window_samples=window_samples(window, interval), low_util_pct=low_util)
    taken = answered = 0
    for sample in run_watch(transport, interval=interval, count=count, monitor=monitor):
        taken += 1
        answered += sample.error is None
        if as_json:
            click.echo(json.dumps(sample.to_dict()))
        else:
            for line in _format_sample(sample):
                click.echo(line)
    if taken and not answered:
        # Not one reading: a watch that saw nothing must not look like a healthy one.
        raise OrchError(
            f"no sample of {taken} gave a reading ({sample.error_kind}: {sample.error})",
            exit_code=EXIT_FAILURE,
        )
