"""`orch run`: a working directory to a finished job on a GPU box, and nothing left running."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from orchestrator.commands.boxes import _plan_from_options
from orchestrator.commands.check_options import (
    DURATION_RANGES,
    bounded_duration,
    check_timeout_option,
    ssh_config_option,
)
from orchestrator.commands.console import make_progress, make_say
from orchestrator.commands.duration_type import DURATION, DURATION_OR_ZERO
from orchestrator.commands.identity_options import box_identity, instance_profile_option
from orchestrator.commands.job_options import job_options
from orchestrator.commands.launch_guard import DEFAULT_TTL, ready_to_launch, yes_option
from orchestrator.commands.selection_options import up_selection_options
from orchestrator.errors import OrchError, UsageError
from orchestrator.jobfile.command import JobFileCommand, file_setting, job_file_option

DEFAULT_RUN_TTL = DEFAULT_TTL


@click.command(
    "run",
    cls=JobFileCommand,
    context_settings={"allow_interspersed_args": False},
)
@job_file_option
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False), help="plan.json to use.")
@click.option("--box", "box_name", help="Run on this existing box (kept afterwards).")
@click.option("--pool", help="Lease a box from this pool, run, release it (dirty on failure).")
@click.option("--pool-store", metavar="s3://BUCKET/PREFIX", help="Where the pool's record is.")
@click.option(
    "--lease-wait",
    type=DURATION_OR_ZERO,
    default="10m",
    show_default=True,
    help="With --pool: how long to wait for a free box (as `orch pool lease --wait`).",
)
@click.option("--name", help="Name of the box the run creates (default: the run id).")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    default=".",
    show_default=True,
    help="Folder synced to the box; the command runs there.",
)
@click.option("--setup", help="Shell command run on the box before CMD (e.g. pip install ...).")
@click.option(
    "--env",
    "env",
    multiple=True,
    metavar="K=V|K",
    help="Environment for CMD (repeatable); K alone takes K's value from orch's environment.",
)
@click.option(
    "--exclude",
    "excludes",
    multiple=True,
    metavar="PATTERN",
    help="rsync exclude pattern, besides .gitignore and .git (repeatable).",
)
@click.option(
    "--include",
    "includes",
    multiple=True,
    metavar="PATTERN",
    help="rsync pattern synced even if ignored or a secret (.env, *.pem, id_*, .aws/).",
)
@click.option(
    "--fetch",
    "fetch",
    multiple=True,
    metavar="PATH",
    help="Path (relative to the working directory) copied back at the end (repeatable).",
)
@click.option("--keep", is_flag=True, help="Keep the box the run created (default: destroy it).")
@click.option(
    "--detach",
    is_flag=True,
    help="Return once CMD runs; `orch logs/wait/stop NAME` attach, finish, cancel.",
)
@click.option("--checkpoint-dir", help="Folder (relative) CMD writes checkpoints to.")
@click.option("--store", help="s3://bucket/prefix the checkpoints are uploaded to (S3 or OSS).")
@instance_profile_option()
@click.option(
    "--checkpoint-interval",
    type=DURATION,
    default="5m",
    show_default=True,
    help="How often the box uploads a changed checkpoint folder.",
)
@click.option(
    "--spot-recovery",
    type=int,
    default=0,
    show_default=True,
    metavar="N",
    help="Replace a reclaimed box up to N times and resume from the checkpoint.",
)
@click.option(
    "--fallback-on-demand",
    is_flag=True,
    help="After N spot losses, recover once more on an on-demand box.",
)
@click.option(
    "--watch-interval",
    type=DURATION,
    help="How often the cloud is asked whether the box still runs (default 15s, 5s with"
    " --spot-recovery).",
)
@click.option(
    "--ssh-lost-after",
    type=DURATION,
    default="5m",
    show_default=True,
    help="SSH silent this long (and the cloud says the box runs): give up.",
)
@click.option(
    "--ttl",
    metavar="DURATION",
    help=f"Lifetime of a box the run creates (default {DEFAULT_RUN_TTL}; `none`: it never"
    " expires, warned about).",
)
@click.option("--ssh-cidr", "ssh_cidrs", multiple=True, help="IPv4 block allowed to SSH in.")
@click.option("--allow-world-ssh", is_flag=True, help="Permit --ssh-cidr wider than a /8.")
@click.option("--state", "state_url", help="Keep Terraform state in s3://bucket/prefix.")
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help="Extra tag (repeatable).")
@click.option("--subnet-id", help="Launch in this subnet instead of the default VPC.")
@click.option("--spot-bid", type=float, metavar="USD/h", help="Most to pay per hour (spot).")
@click.option(
    "--launcher",
    type=click.Choice(["auto", "torchrun", "none"]),
    default="auto",
    show_default=True,
    help="torchrun: CMD under torchrun on every node (--nproc-per-node = GPUs); none: CMD as"
    " written, with ORCH_NODE_RANK, MASTER_ADDR, ... set; auto: torchrun with >1 GPU or node.",
)
@click.option(
    "--rendezvous-timeout",
    type=DURATION,
    default="10m",
    show_default=True,
    help="torchrun: how long the nodes wait for each other to join before the run fails.",
)
@click.option("--no-check", is_flag=True, help="Skip the GPU check before the job starts.")
@check_timeout_option("--check-timeout", "check_timeout")
@ssh_config_option()
@click.option("--ssh-alias", is_flag=True, help="Write `Host orch-NAME` to your ssh_config.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the report as JSON on stdout (CMD's output goes to stderr).",
)
@yes_option
@job_options
@up_selection_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run(command: tuple[str, ...], **options: Any) -> None:
    """Sync the working directory to a box, run CMD there detached, stream its output, fetch
    outputs, and destroy the box the run created; exits with CMD's exit status.

    \b
    Examples:
      orch run                                  everything from ./orch.yaml (run.command too)
      orch run -f examples/orch.yaml --spot -- python train.py --epochs 1
      orch run --plan plan.json -- python train.py --epochs 3
      orch run --model bert-large --fetch outputs -- python train.py
      orch run --box exp1 --setup 'pip install -r requirements.txt' -- python train.py
      orch run --plan p.json --checkpoint-dir ck --store s3://bkt/ck --spot-recovery 3 -- ./t.sh
      orch run --plan plan.json --detach --name exp2 -- python train.py
      orch run --pool gpu --fetch outputs -- python train.py
      orch run --box cluster1 --fetch outputs -- python train.py   torchrun on every node
      orch run --box cluster1 --launcher none -- ./deepspeed.sh     ORCH_NODE_RANK, MASTER_ADDR
    """
    from orchestrator.run.session import Run
    from orchestrator.run.terminal import for_terminal

    if not command:
        command = tuple(file_setting("command") or ())  # orch.yaml's run.command
    request = _request(command, options)
    as_json = options["as_json"]
    stream = sys.stderr if as_json else sys.stdout
    sink = for_terminal(stream.buffer, stream)  # box text escaped on a terminal
    if options["pool"]:
        report = _run_on_pool(request, options, sink)
    else:
        report = Run(request, make_say(False), make_progress(as_json), sink).execute()
    _print_report(report, as_json, request.detach)
    if report.exit_code:
        sys.exit(report.exit_code)


def _request(command: tuple[str, ...], options: dict[str, Any]):  # noqa: ANN202
    """Every option checked before any cloud, Terraform or SSH call."""
    from orchestrator.provision.request import build_request
    from orchestrator.run.session import RunRequest
    from orchestrator.run.spec import RunSpec, parse_env, parse_store

    spec = RunSpec(
        command=list(command),
        workdir=Path(options["workdir"]),
        setup=options["setup"],
        env=parse_env(options["env"]),
        excludes=list(options["excludes"]),
        includes=list(options["includes"]),
        fetch=list(options["fetch"]),
        checkpoint_dir=options["checkpoint_dir"],
        store=parse_store(options["store"]) if options["store"] else None,
        checkpoint_interval_s=bounded_duration(
            "--checkpoint-interval",
            options["checkpoint_interval"],
            **DURATION_RANGES["checkpoint_interval"],
        ),
    )
    if options["watch_interval"] is None:
        # A reclaim is noticed within this; spot runs pay for every second of it.
        options["watch_interval"] = 5.0 if options["spot_recovery"] else 15.0
    for param in ("check_timeout", "ssh_lost_after", "watch_interval"):
        flag = "--" + param.replace("_", "-")
        bounded_duration(flag, options[param], **DURATION_RANGES[param])
    from orchestrator.check.transport import resolve_ssh_config

    ssh_config = resolve_ssh_config(options["ssh_config"])
    common = dict(
        spec=spec,
        keep=options["keep"],
        detach=options["detach"],
        check=not options["no_check"],
        check_timeout=options["check_timeout"],
        ssh_config=ssh_config,
        spot_recovery=options["spot_recovery"],
        fallback_on_demand=options["fallback_on_demand"],
        watch_interval_s=options["watch_interval"],
        ssh_lost_after_s=options["ssh_lost_after"],
        launcher=options["launcher"],
        join_timeout_s=int(
            bounded_duration(
                "--rendezvous-timeout",
                options["rendezvous_timeout"],
                **DURATION_RANGES["rendezvous_timeout"],
            )
        ),
    )
    if options["box_name"] or options["pool"]:
        return _existing_box_request(options, common)
    if options["fallback_on_demand"] and not options["spot_recovery"]:
        raise UsageError("--fallback-on-demand goes with --spot-recovery N")
    up = build_request(
        lambda: _plan_from_options(options["plan_path"], options, options["subnet_id"]),
        name=options["name"] or spec.run_id,
        ttl=options["ttl"] if options["ttl"] is not None else DEFAULT_RUN_TTL,
        ssh_cidrs=options["ssh_cidrs"],
        allow_world_ssh=options["allow_world_ssh"],
        state_url=options["state_url"],
        tags=options["tags"],
        spot_bid=options["spot_bid"],
        subnet_id=options["subnet_id"],
        ssh_alias=options["ssh_alias"],
        identity=box_identity(
            options["instance_profile"],
            stores=(spec.store.for_run(spec.run_id),) if spec.store else (),
        ),
        say=make_say(False),
    )
    if options["detach"] and any(c.nodes > 1 for c in up.plan.candidates()):
        raise UsageError("--detach works on one box: a cluster run stays attached")
    up = ready_to_launch(up, options["yes"], options["as_json"])
    return RunRequest(box_name=up.name, up_options=up, **common)


def _existing_box_request(options: dict[str, Any], common: dict[str, Any]):  # noqa: ANN202
    """`--box NAME` or `--pool NAME`: no option that creates a box may be given."""
    from orchestrator.provision.boxes import validate_box_name
    from orchestrator.run.session import RunRequest

    where = "--box runs on an existing box" if options["box_name"] else "--pool leases a box"
    if options["box_name"] and options["pool"]:
        raise UsageError("give --box or --pool, not both")
    creating = ("plan_path", "name", "ttl", "ssh_cidrs", "state_url", "tags", "spot_bid")
    creating += ("instance_profile", "nodes")
    given = [k for k in creating if options.get(k)]
    if given:
        raise UsageError(f"{where}: drop --{given[0].replace('_', '-')}")
    if options["pool"]:
        from orchestrator.pool.record import validate_pool_name

        validate_pool_name(options["pool"])
        if options["spot_recovery"] or options["detach"]:
            raise UsageError("--pool runs attached, without --spot-recovery")
        # The leased box's name replaces this placeholder (a valid name) once leased.
        return RunRequest(box_name="pool-box", **common)
    return RunRequest(box_name=validate_box_name(options["box_name"]), **common)


def _run_on_pool(request: Any, options: dict[str, Any], sink: Any) -> Any:
    """Lease a box from the pool, run there, release it (dirty when the run failed)."""
    from dataclasses import replace

    from orchestrator.pool import manager
    from orchestrator.run.session import Run

    as_json = options["as_json"]
    pool = manager.open_pool(
        options["pool"],
        options["pool_store"],
        make_say(False),
        progress=make_progress(as_json),
        ssh_config=request.ssh_config,
        check_timeout=request.check_timeout,
    )
    wait_s = bounded_duration(
        "--lease-wait", options["lease_wait"], **DURATION_RANGES["lease_wait"]
    )
    leased = manager.lease(pool, wait_s, None)
    request = replace(request, box_name=leased["box"], check=False)
    try:
        report = Run(request, make_say(False), make_progress(as_json), sink).execute()
    except BaseException:  # not orch's own error (execute() stopped the job first)
        try:  # the box goes back dirty, not held until its lease runs out
            manager.release(pool, leased["box"], leased["lease_id"], True)
        except OrchError as exc:
            from orchestrator.check.untrusted import printable

            why = printable(exc.one_line(), None)
            make_say(False)(f"box {leased['box']} could not go back to its pool: {why}")
        raise
    dirty = report.exit_code != 0
    outcome = manager.release(pool, leased["box"], leased["lease_id"], dirty)
    make_say(False)(f"box {leased['box']} went back to pool {options['pool']}: {outcome}")
    return report


def _node_losses(node: str, counts: dict[str, int]) -> str:
    """`node 1 2x (node replaced 1x, cluster re-provisioned 1x)`."""
    done = ", ".join(f"{what} {n}x" for what, n in counts.items() if what != "lost")
    return f"node {node} {counts['lost']}x" + (f" ({done})" if done else "")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _money(value: float | None) -> str:
    return "?" if value is None else f"${value:.4f}" if value < 1 else f"${value:.2f}"


def _checkpoint(outcome: dict[str, Any]) -> str:
    from orchestrator.run.checkpoints import AgentOutcome

    return AgentOutcome(outcome["state"], outcome["checkpoint"], outcome["error"]).summary()


def _print_report(report: Any, as_json: bool, detached: bool) -> None:
    from orchestrator.check.untrusted import printable

    data = report.to_dict()
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    # Errors and reasons may quote the box (a script's last line, rsync's): escaped, as
    # cli.py escapes every other command's error line.
    error = printable(report.error, limit=None) if report.error else None
    if detached and report.exit_code == 0:
        click.echo(
            f"orch: run {report.run_id} is running on box {report.box}: `orch logs {report.box} "
            f"-f` attaches, `orch wait {report.box}` finishes it, `orch stop {report.box}` "
            "cancels it",
            err=True,
        )
        return
    attempts = report.attempts
    if error and not any(a.job_started for a in attempts):
        # The job never ran (bad input, no box): the error is the whole story.
        click.echo(f"orch: error: {error}", err=True)
        return
    head = (
        f"orch: run {report.run_id} on box {report.box}: exit {report.exit_code}; "
        f"{len(attempts)} attempt{'s' * (len(attempts) != 1)}"
    )
    if report.recoveries:
        head += f" ({report.recoveries} recovered), time lost {_duration(report.time_lost_s())}"
    head += f"; cost {_money(report.cost())}"
    if report.on_demand_cost() is not None:
        head += f" (on-demand {_money(report.on_demand_cost())})"
    click.echo(head, err=True)
    for attempt in attempts:
        span = None if attempt.ended is None else attempt.ended - attempt.started
        where = attempt.zone or attempt.region
        reason = f" ({printable(attempt.reason, limit=None)})" if attempt.reason else ""
        saved = f"  {_checkpoint(attempt.checkpoint)}" if attempt.checkpoint else ""
        click.echo(
            f"  {attempt.number}  {attempt.instance_type:<14} {attempt.market:<9} {where:<16}"
            f" {attempt.outcome}{reason}  {_duration(span)}  {_money(attempt.cost())}{saved}",
            err=True,
        )
    losses = report.recoveries_by_node()
    if losses:
        shown = ", ".join(_node_losses(node, counts) for node, counts in sorted(losses.items()))
        click.echo(f"  nodes lost: {shown}", err=True)
    if report.node_logs:
        folder = Path(report.node_logs[0]).parent.parent  # $ORCH_HOME/runs/RUN_ID
        click.echo(f"  node logs ({len(report.node_logs)}) in {folder}", err=True)
    if error:
        click.echo(f"orch: error: {error}", err=True)
