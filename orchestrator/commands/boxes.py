"""`orch up`, `orch down`, `orch status`, `orch list`: create, destroy and show boxes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from orchestrator.commands.aliases import deprecated_option, take_deprecated, warn_deprecated
from orchestrator.commands.check_options import (
    DURATION_RANGES,
    VIA_CHOICES,
    bounded_duration,
    check_timeout_option,
    ssh_config_option,
    via_option,
)
from orchestrator.commands.ci_runner_options import ci_runner_options, runner_from_options
from orchestrator.commands.console import make_progress, make_say
from orchestrator.commands.identity_options import box_identity, instance_profile_option
from orchestrator.commands.job_options import job_from_options, job_options
from orchestrator.commands.launch_guard import DEFAULT_TTL, ready_to_launch, yes_option
from orchestrator.commands.selection_options import (
    explicit,
    selection_from_options,
    up_selection_options,
)
from orchestrator.errors import EXIT_CHECK_FAILED, OrchError, UsageError
from orchestrator.jobfile.command import JobFileCommand, job_file_option
from orchestrator.plan import Plan, read_plan


def parse_tags(values: tuple[str, ...]) -> dict[str, str]:
    """--tag KEY=VALUE (repeatable): provision.inputs.parse_tags."""
    from orchestrator.provision.inputs import parse_tags as parse

    return parse(values)


def _plan_from_options(
    plan_path: str | None, kwargs: dict[str, Any], subnet_id: str | None = None
) -> Plan:
    """The plan to create: read from --plan, or made now from the same options as `orch plan`
    (with `subnet_id`, in the one cloud that takes it and in one region: provision/subnet.py;
    build_request keeps a plan file's candidates in its choice's cloud and region)."""
    model_given = any(kwargs.get(k) for k in ("model", "hf_config", "params_m"))
    if plan_path:
        # --max-price stays allowed: with a plan it is the spot bid.
        steering = ("region", "spot", "deadline", "throughput", "nodes")
        if model_given or any(kwargs.get(k) for k in steering) or explicit("gpus"):
            raise UsageError("give either --plan or plan options (--model ...), not both")
        return read_plan(plan_path)
    if not model_given:
        raise UsageError("give --plan plan.json, or a model to plan for (--model ...)")
    from orchestrator.jobfile.command import file_setting
    from orchestrator.sizing.planning import plan_job

    if kwargs.get("max_price") is None:  # the job file's price cap filters here too
        kwargs = {**kwargs, "max_price": file_setting("max_price")}

    if subnet_id:
        from orchestrator.provision.subnet import subnet_cloud

        kwargs = {**kwargs, "cloud": subnet_cloud(kwargs.get("cloud") or "any", subnet_id)}
    job = job_from_options(**kwargs)
    plan = plan_job(job, selection_from_options(job, explicit("gpus"), **kwargs))
    if subnet_id:
        from orchestrator.provision.subnet import require_one_region

        require_one_region(plan, kwargs.get("region"))
    return plan


@click.command("up", cls=JobFileCommand)
@job_file_option
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False), help="plan.json to use.")
@click.option("--name", required=True, help="Box name: a-z, 0-9, '-', at most 39 characters.")
@click.option(
    "--ttl",
    default=DEFAULT_TTL,
    show_default=True,
    metavar="DURATION",
    help="Box lifetime (30m, 2h, 1d; at most 30d): sets orch:expires-at and a timer."
    " `--ttl none` for no expiry (warned about; an empty value is an error).",
)
@click.option(
    "--ssh-cidr",
    "ssh_cidrs",
    multiple=True,
    help="IPv4 block allowed to SSH in (repeatable). Default: this machine's address /32."
    " Together at most a /8's worth of addresses.",
)
@click.option(
    "--allow-world-ssh", is_flag=True, help="Permit --ssh-cidr blocks wider than a /8 (0.0.0.0/0)."
)
@click.option("--state", "state_url", help="Keep Terraform state in s3://bucket/prefix.")
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help="Extra tag (repeatable).")
@click.option("--subnet-id", help="Launch in this subnet instead of the default VPC.")
@instance_profile_option()
@click.option(
    "--spot-bid",
    type=float,
    metavar="USD/h",
    help="Spot boxes: the most to pay per hour for the instance (default: the going spot"
    " price, up to on-demand).",
)
@deprecated_option("--max-price", "--spot-bid", "max_price", type=float)
@click.option("--no-check", is_flag=True, help="Skip the GPU check after the box is up.")
@via_option("How the check after boot reaches the box.")
@deprecated_option("--check-via", "--via", "check_via", type=click.Choice(VIA_CHOICES))
@check_timeout_option("--check-timeout", "check_timeout")
@ssh_config_option()
@click.option(
    "--ssh-alias", is_flag=True, help="Write `Host orch-NAME` into your ssh_config (~/.ssh/config)."
)
@ci_runner_options
@click.option("--json", "as_json", is_flag=True, help="Print the box as one JSON object.")
@yes_option
@job_options
@up_selection_options
def up(
    plan_path: str | None,
    name: str,
    ttl: str | None,
    ssh_cidrs: tuple[str, ...],
    allow_world_ssh: bool,
    state_url: str | None,
    tags: tuple[str, ...],
    subnet_id: str | None,
    spot_bid: float | None,
    no_check: bool,
    via: str,
    check_via: str | None,
    check_timeout: float,
    ssh_config: str | None,
    ssh_alias: bool,
    as_json: bool,
    yes: bool,
    **kwargs: Any,
) -> None:
    """Create a box from a plan (the choice, then its alternatives on capacity errors), then
    check that its GPUs match the plan (as `orch check` does; --no-check skips it).

    \b
    Examples:
      orch up --name exp1                      model, resources, box from ./orch.yaml
      orch up --plan plan.json --name exp1 --ttl 2h
      orch up --model bert-large --spot --spot-bid 0.40 --name exp1 --ttl 90m
      orch up --plan plan.json --name exp1 --ssh-cidr 203.0.113.7/32 --json
      orch up --plan plan.json --name exp1 --via ssm --check-timeout 900
      orch up --plan plan.json --name exp1 --state s3://my-bucket/orch --no-check
      orch up --plan plan.json --name exp1 --ssh-alias     # then: ssh orch-exp1
      orch up --plan plan.json --name gpu-7 --ttl 2h --ci-runner github --ci-repo octo/app
    """
    from orchestrator.provision import launch
    from orchestrator.provision.display import box_summary
    from orchestrator.provision.request import build_request

    # Everything the user typed is checked before anything touches a cloud.
    ci = runner_from_options(kwargs, name)  # --ci-*: validated, token from the environment
    via = take_deprecated("--via", via, "--check-via", check_via, explicit("via"))
    # --max-price is up's old name of the bid (planning inline, it also filters, as it did).
    old_bid = kwargs.get("max_price")
    bid = take_deprecated("--spot-bid", spot_bid, "--max-price", old_bid, explicit("spot_bid"))
    bounded_duration("--check-timeout", check_timeout, **DURATION_RANGES["check_timeout"])
    if not no_check and via == "ssh":
        from orchestrator.check.transport import resolve_ssh_config

        ssh_config = resolve_ssh_config(ssh_config)  # --ssh-config, else $ORCH_SSH_CONFIG
    request = build_request(
        lambda: _plan_from_options(plan_path, kwargs, subnet_id),
        name=name,
        ttl=ttl,
        ssh_cidrs=ssh_cidrs,
        allow_world_ssh=allow_world_ssh,
        state_url=state_url,
        tags=tags,
        spot_bid=bid,
        subnet_id=subnet_id,
        ssh_alias=ssh_alias,
        identity=box_identity(kwargs.get("instance_profile"), agent=via != "ssh"),
        say=make_say(as_json),
    )
    request = ready_to_launch(request, yes, as_json)
    from orchestrator import ci_runner

    # Registers before Terraform; the request it gives back carries the runner's section.
    with ci_runner.registered(ci, request, make_say(as_json)) as request:
        box = launch.up(request, make_say(as_json), make_progress(as_json)).box
    summary = box_summary(box)
    if not no_check:
        _check(box, as_json, via, check_timeout, ssh_config)
    _print_up(box, summary, as_json, ci_runner.json_fields(box), state_url)


UP_JSON_KEYS = (
    "name",
    "cloud",
    "region",
    "instance_type",
    "market",
    "instance_id",
    "public_ip",
    "private_ip",
    "ssh_user",
    "ssh_command",
    "expires_at",
    "ttl",
    "box_dir",
    "state_url",
    "attempts",
)


def _print_up(
    box: Any, summary: dict[str, Any], as_json: bool, ci: dict[str, Any], state_url: str | None
) -> None:
    if as_json:
        shown = {**{k: summary[k] for k in UP_JSON_KEYS}, **ci}
        click.echo(json.dumps(shown, indent=2))
        return
    click.echo(f"box {box.name} is up: {summary['instance_type']} {summary['instance_id']}")
    if summary["ssh_command"]:
        click.echo(f"  ssh: {summary['ssh_command']}")
    if box.expires_at:
        click.echo(f"  expires at {box.expires_at}")
    if box.ci_runner:
        record = box.ci_runner
        click.echo(f"  CI runner: label {record['label']} on {record['repo']} (one job)")
    click.echo(
        f"  destroy with: orch down {box.name}" + (f" --state {state_url}" * bool(state_url))
    )


def _check(box: Any, quiet: bool, via: str, timeout: float, ssh_config: str | None) -> None:
    from orchestrator.check.untrusted import printable
    from orchestrator.check.verify import check_box

    if not quiet:
        click.echo(f"orch: checking the GPUs of box {box.name} (up to {timeout:g} s)...", err=True)
    if via == "ssh":
        from orchestrator.check.cluster import gpu_verdict, is_cluster, node_transports

        if is_cluster(box):  # every node's GPUs, in parallel (`orch check` adds the all_reduce)
            code, why = gpu_verdict(box, node_transports(box, ssh_config), timeout)
            if why:
                raise OrchError(
                    f"cluster {box.name} is up but not every node matches its plan: {why}",
                    exit_code=code,
                    hint=f"`orch down {box.name}` destroys it",
                )
            return
    report = check_box(box, ssh_config=ssh_config, timeout=timeout, via=via)
    if not report.ok:
        # The messages quote what the box said: escape it before it reaches the terminal.
        problems = "; ".join(printable(check.message) for check in report.failures())
        raise OrchError(
            f"box {box.name} is up but does not match its plan: {problems}",
            exit_code=EXIT_CHECK_FAILED,
            hint=f"`orch down {box.name}` destroys it",
        )


@click.command("down")
@click.argument("name")
@click.option("--state", "state_url", help="s3://bucket/prefix the box's state was kept in.")
@click.option(
    "--missing-ok",
    is_flag=True,
    help="No record of the box (here or under --state): nothing to do, exit 0. For CI"
    " clean-up steps after `orch run`, which destroys its box itself.",
)
@click.option(
    "--forget",
    is_flag=True,
    help="Remove the local record without Terraform, once the cloud lists nothing tagged with"
    " the box's name.",
)
@click.option(
    "--force",
    is_flag=True,
    help="With --forget: forget it even when the cloud cannot be asked (warns what may remain).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def down(
    name: str, state_url: str | None, missing_ok: bool, forget: bool, force: bool, as_json: bool
) -> None:
    """Destroy box NAME and everything it created (also after a failed or interrupted up).

    \b
    Examples:
      orch down exp1
      orch down exp1 --state s3://my-bucket/orch --json
      orch down ci-123 --state s3://my-bucket/orch --missing-ok
      orch down exp1 --forget            # a record whose box the cloud no longer has
      orch down exp1 --forget --force    # the cloud cannot be asked (credentials gone)
    """
    from orchestrator.provision import teardown

    if force and not forget:
        raise UsageError("--force goes with --forget (it forgets without asking the cloud)")
    if forget:
        _forget(name, state_url, force, as_json)
        return

    from orchestrator.ci_runner import forget as forget_runner
    from orchestrator.clouds.base import NoCredentials

    try:
        box = teardown.down(
            name, state_url, make_say(as_json), make_progress(as_json), forget_runner
        )
    except NoCredentials as exc:
        raise NoCredentials(
            f"box {name}: {exc.message}", hint=f"or `orch down {name} --forget --force`"
        ) from None
    except teardown.NoSuchBox as exc:
        if not missing_ok:
            raise
        if as_json:
            click.echo(json.dumps({"name": name, "state": "absent", "cloud": None}))
        else:
            click.echo(f"box {name}: {exc.message}; nothing to destroy")
        return
    if as_json:
        click.echo(json.dumps({"name": box.name, "state": box.state, "cloud": box.cloud}))
        return
    click.echo(f"box {box.name} destroyed")


def _forget(name: str, state_url: str | None, force: bool, as_json: bool) -> None:
    from orchestrator.provision.forget import forget

    if state_url:
        raise UsageError("--forget removes a local record; drop --state")
    box = forget(name, force, lambda text: click.echo(f"orch: warning: {text}", err=True))
    if as_json:
        click.echo(json.dumps({"name": box.name, "state": "forgotten", "cloud": box.cloud}))
        return
    click.echo(f"box {box.name} forgotten (its record is removed)")


def _expiry(expires_at: str | None) -> str:
    """The expiry with the time left (or how long ago it passed)."""
    if not expires_at:
        return "never (--ttl none)"
    try:
        when = datetime.strptime(expires_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return expires_at
    seconds = int((when - datetime.now(UTC)).total_seconds())
    hours, minutes = divmod(abs(seconds) // 60, 60)
    left = f"{hours}h{minutes:02d}m"
    return f"{expires_at} (in {left})" if seconds > 0 else f"{expires_at} (expired {left} ago)"


def box_detail(box: Any) -> dict[str, Any]:
    """`orch status NAME --json`: the summary `orch up --json` prints, plus the plan row."""
    from orchestrator.provision.display import box_summary

    detail = dict(box_summary(box))
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    detail["expired"] = bool(box.expires_at and box.expires_at < now)
    detail["candidate"] = box.candidate.to_dict()
    return detail


def _detail(name: str, as_json: bool) -> None:
    from orchestrator.check.untrusted import printable_lines
    from orchestrator.provision.boxes import load_box

    box = load_box(name)
    detail = box_detail(box)
    if as_json:
        click.echo(json.dumps(detail, indent=2))
        return
    c = box.candidate
    price = "-" if c.price_per_hour is None else f"${c.price_per_hour:.3f}/h"
    cost = "-" if c.cost is None else f"${c.cost:,.2f}"
    rows = [
        ("state", detail["activity"] or box.state),
        ("cloud", f"{box.cloud} {box.region}"),
        ("instance", f"{c.instance_type} ({c.gpu_count}x{c.gpu}, {c.market}, {price})"),
        ("instance id", detail["instance_id"]),
        ("public ip", detail["public_ip"]),
        ("private ip", detail["private_ip"]),
        ("ssh", detail["ssh_command"]),
        ("created", box.created_at),
        ("expires", _expiry(box.expires_at)),
        (
            "plan",
            f"{c.samples_per_s:,.1f} samples/s, {c.hours:.2f} h, job cost {cost}, "
            f"{c.memory_fraction:.0%} of {c.gpu_memory_gib:g} GiB per GPU",
        ),
        ("attempts", "; ".join(_attempt(a) for a in box.attempts)),
        ("state url", box.state_url),
        ("error", box.error),
        ("directory", detail["box_dir"]),
    ]
    click.echo(f"box {box.name}")
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        if value:  # the record's and the cloud's words (outputs, errors): escaped, line by line
            click.echo(f"  {label:{width}}  {printable_lines(value)}")


def _attempt(attempt: dict[str, Any]) -> str:
    where = " ".join(str(attempt.get(k, "")) for k in ("instance_type", "region", "market"))
    return f"{where.strip()}: {attempt.get('error', 'failed')}"


@click.command("status")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def status(name: str | None, as_json: bool) -> None:
    """Show box NAME in detail: state, cloud and region, instance, addresses, expiry, and
    the plan row it was created from. `orch list` shows every box.

    \b
    Examples:
      orch status exp1
      orch status exp1 --json
    """
    if name is None:
        # Earlier releases listed every box here: keep that working for old scripts.
        warn_deprecated("`orch status` without a NAME", "`orch list`")
        from orchestrator.commands.listing import show_list

        show_list(as_json)
        return
    _detail(name, as_json)
