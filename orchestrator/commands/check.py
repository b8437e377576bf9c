"""`orch check` and `orch watch`: verify and observe a box's GPUs."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from orchestrator.errors import UsageError

if TYPE_CHECKING:
    from orchestrator.check.verify import CheckReport, Expected
    from orchestrator.check.watch import Sample
    from orchestrator.provision.boxes import Box

VIA_CHOICE = click.Choice(["ssh", "ssm", "cloud-assistant"])


def _load_box(name: str) -> Box:
    from orchestrator.provision.boxes import load_box

    return load_box(name)


def _print_report(report: CheckReport) -> None:
    title = f"box {report.box}" if report.box else "this machine"
    click.echo(f"{title} ({report.transport}): {'OK' if report.ok else 'MISMATCH'}")
    for gpu in report.gpus:
        memory = f"{gpu.memory_total_mib} MiB" if gpu.memory_total_mib is not None else "? MiB"
        click.echo(f"  GPU {gpu.index}: {gpu.name}, {memory}, driver {gpu.driver_version or '?'}")
    for check in report.checks:
        click.echo(f"  [{'pass' if check.ok else 'FAIL'}] {check.name}: {check.message}")


def _expected_from_plan(plan_path: str | None) -> Expected:
    from orchestrator.check.verify import Expected

    if plan_path is None:
        return Expected()
    from orchestrator.plan import read_plan

    return Expected.from_candidate(read_plan(plan_path).choice)


@click.command()
@click.argument("name", required=False)
@click.option("--local", is_flag=True, help="Check the machine this runs on instead of a box.")
@click.option(
    "--plan",
    "plan_path",
    type=click.Path(dir_okay=False),
    help="With --local: compare against this plan's choice.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=600,
    show_default=True,
    help="Seconds to keep retrying while the box boots.",
)
@click.option(
    "--ssh-config",
    type=click.Path(dir_okay=False),
    help="ssh_config file passed to ssh -F (default: $ORCH_SSH_CONFIG, else ssh's own).",
)
@click.option("--via", type=VIA_CHOICE, default="ssh", show_default=True, help="Transport.")
@click.pass_context
def check(ctx, name, local, plan_path, as_json, timeout, ssh_config, via) -> None:
    """Verify that a box's GPUs (count, model, memory, driver, ECC) match its plan.

    \b
    Exit codes: 0 match, 3 mismatch (or no driver), 1 unreachable, 2 usage.
    """
    from orchestrator.check.verify import check_box, check_local
    from orchestrator.errors import OrchError

    if local == bool(name):
        raise UsageError("give a box NAME or --local (not both)")
    if plan_path and not local:
        raise UsageError("--plan goes with --local; a box is checked against its own plan")
    try:
        if local:
            report = check_local(_expected_from_plan(plan_path), timeout=timeout)
        else:
            box = _load_box(name)
            report = check_box(box, ssh_config=ssh_config, timeout=timeout, via=via)
            _record(box, report)
    except OrchError as exc:
        if as_json:
            click.echo(
                json.dumps(
                    {"box": name, "ok": False, "error": exc.one_line(), "exit_code": exc.exit_code},
                    indent=2,
                )
            )
        raise
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        _print_report(report)
    ctx.exit(report.exit_code)


def _record(box: Box, report: CheckReport) -> None:
    """Keep the report in the box's directory: sizing reads its driver version
    (`--cuda-context-gib box:NAME`). Best effort: a read-only state home loses nothing else."""
    import contextlib

    from orchestrator.check.record import save_check

    with contextlib.suppress(OSError):
        save_check(box.directory, report.to_dict())


def _format_sample(sample: Sample) -> list[str]:
    stamp = sample.to_dict()["time"]
    if sample.error:
        return [f"{stamp}  unreachable: {sample.error}"]
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


@click.command()
@click.argument("name", required=False)
@click.option("--local", is_flag=True, help="Watch the machine this runs on.")
@click.option(
    "--interval", type=click.FloatRange(min=0.1), default=5, show_default=True, help="Seconds."
)
@click.option("--count", type=click.IntRange(min=1), help="Stop after N samples (default: ^C).")
@click.option(
    "--window",
    type=click.FloatRange(min=0),
    default=300,
    show_default=True,
    help="Seconds of utilisation under --low-util before warning.",
)
@click.option(
    "--low-util",
    type=click.FloatRange(min=0, max=100),
    default=30,
    show_default=True,
    help="Utilisation percentage counted as idle.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per sample (JSON lines).")
@click.option("--ssh-config", type=click.Path(dir_okay=False), help="ssh_config for ssh -F.")
@click.option("--via", type=VIA_CHOICE, default="ssh", show_default=True, help="Transport.")
def watch(name, local, interval, count, window, low_util, as_json, ssh_config, via) -> None:
    """Show GPU utilisation and memory every few seconds; warn about idle or full GPUs."""
    from orchestrator.check.transport import LocalTransport, transport_for_box
    from orchestrator.check.watch import UsageMonitor, window_samples
    from orchestrator.check.watch import watch as run_watch

    if local == bool(name):
        raise UsageError("give a box NAME or --local (not both)")
    transport = (
        LocalTransport()
        if local
        else transport_for_box(_load_box(name), via=via, ssh_config=ssh_config)
    )
    monitor = UsageMonitor(window_samples=window_samples(window, interval), low_util_pct=low_util)
    for sample in run_watch(transport, interval=interval, count=count, monitor=monitor):
        if as_json:
            click.echo(json.dumps(sample.to_dict()))
        else:
            for line in _format_sample(sample):
                click.echo(line)
