"""`orch up`, `orch down`, `orch status`, `orch list`: create, destroy and show boxes."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click

from orchestrator.commands.job_options import job_from_options, job_options
from orchestrator.commands.selection_options import (
    explicit,
    selection_from_options,
    selection_options,
)
from orchestrator.errors import EXIT_CHECK_FAILED, OrchError, UsageError
from orchestrator.plan import Plan, read_plan

RESERVED_TAG_PREFIXES = ("orch:", "aws:", "acs:", "aliyun")  # cloud-reserved or ours
MAX_TAGS = 30


def _say(quiet: bool) -> Callable[[str], None]:
    def say(message: str) -> None:
        if not quiet:
            click.echo(f"orch: {message}", err=True)

    return say


def _progress(quiet: bool) -> Callable[[str], None]:
    def progress(line: str) -> None:
        if not quiet:
            click.echo(f"  {line}", err=True)

    return progress


def parse_tags(values: tuple[str, ...]) -> dict[str, str]:
    """--tag KEY=VALUE (repeatable). Values may hold anything: they travel as JSON."""
    tags: dict[str, str] = {}
    for value in values:
        key, sep, text = value.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--tag expects KEY=VALUE, got {value!r}")
        if key.lower().startswith(RESERVED_TAG_PREFIXES):
            raise UsageError(
                f"--tag {key!r}: the prefixes orch:, aws:, acs: and aliyun are reserved"
            )
        if len(key) > 128 or len(text) > 256:
            raise UsageError(f"--tag {key[:40]!r}: keys hold at most 128, values 256 characters")
        tags[key] = text
    if len(tags) > MAX_TAGS:
        raise UsageError(f"at most {MAX_TAGS} --tag options")
    return tags


def _plan_from_options(plan_path: str | None, kwargs: dict[str, Any]) -> Plan:
    """The plan to create: read from --plan, or made now from the same options as `orch plan`."""
    model_given = any(kwargs.get(k) for k in ("model", "hf_config", "params_m"))
    if plan_path:
        # --max-price stays allowed: with a plan it is the spot bid.
        steering = ("region", "spot", "deadline", "throughput")
        if model_given or any(kwargs.get(k) for k in steering) or explicit("gpus"):
            raise UsageError("give either --plan or plan options (--model ...), not both")
        return read_plan(plan_path)
    if not model_given:
        raise UsageError("give --plan plan.json, or a model to plan for (--model ...)")
    from orchestrator.sizing.select import plan_job

    job = job_from_options(**kwargs)
    return plan_job(job, selection_from_options(job, **kwargs))


@click.command("up")
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False), help="plan.json to use.")
@click.option("--name", required=True, help="Box name: a-z, 0-9, '-', at most 39 characters.")
@click.option("--ttl", help="Box lifetime (30m, 2h, 1d): sets orch:expires-at and a timer.")
@click.option(
    "--ssh-cidr",
    "ssh_cidrs",
    multiple=True,
    help="IPv4 block allowed to SSH in (repeatable). Default: this machine's address /32.",
)
@click.option("--allow-world-ssh", is_flag=True, help="Permit --ssh-cidr 0.0.0.0/0.")
@click.option("--state", "state_url", help="Keep Terraform state in s3://bucket/prefix.")
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help="Extra tag (repeatable).")
@click.option("--subnet-id", help="Launch in this subnet instead of the default VPC.")
@click.option("--no-check", is_flag=True, help="Skip the GPU check after the box is up.")
@click.option(
    "--check-via",
    type=click.Choice(["ssh", "ssm", "cloud-assistant"]),
    default="ssh",
    show_default=True,
    help="How the post-boot check reaches the box (cloud agents need no SSH ingress).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the box as one JSON object.")
@job_options
@selection_options
def up(
    plan_path: str | None,
    name: str,
    ttl: str | None,
    ssh_cidrs: tuple[str, ...],
    allow_world_ssh: bool,
    state_url: str | None,
    tags: tuple[str, ...],
    subnet_id: str | None,
    no_check: bool,
    check_via: str,
    as_json: bool,
    **kwargs: Any,
) -> None:
    """Create a box from a plan (the choice, then its alternatives on capacity errors).

    \b
    orch up --plan plan.json --name exp1 --ttl 2h
    orch up --model bert-large --spot --name exp1 --ssh-cidr 203.0.113.7/32 --json
    """
    from orchestrator.provision import lifecycle, state_backend
    from orchestrator.provision.boxes import validate_box_name

    # Everything the user typed is checked before anything touches a cloud.
    validate_box_name(name)
    if ttl:
        lifecycle.parse_ttl(ttl)
    cidrs = lifecycle.normalise_cidrs(list(ssh_cidrs), allow_world_ssh)
    extra_tags = parse_tags(tags)
    if state_url:
        state_backend.parse_state_url(state_url)
    plan = _plan_from_options(plan_path, kwargs)
    if not cidrs:
        cidrs = [lifecycle.discover_caller_cidr()]
    options = lifecycle.UpOptions(
        name=name,
        ssh_cidrs=cidrs,
        ttl=ttl,
        allow_world_ssh=allow_world_ssh,
        state_url=state_url,
        tags=extra_tags,
        spot_max_price=kwargs.get("max_price"),
        subnet_id=subnet_id,
    )
    box = lifecycle.up(plan, options, _say(as_json), _progress(as_json))
    summary = lifecycle.box_summary(box)
    if not no_check:
        _check(box, as_json, check_via)
    if as_json:
        keys = (
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
            "box_dir",
            "state_url",
            "attempts",
        )
        click.echo(json.dumps({k: summary[k] for k in keys}, indent=2))
        return
    click.echo(f"box {box.name} is up: {summary['instance_type']} {summary['instance_id']}")
    if summary["ssh_command"]:
        click.echo(f"  ssh: {summary['ssh_command']}")
    if box.expires_at:
        click.echo(f"  expires at {box.expires_at}")
    click.echo(
        f"  destroy with: orch down {box.name}" + (f" --state {state_url}" * bool(state_url))
    )


def _check(box: Any, quiet: bool, via: str) -> None:
    from orchestrator.check.untrusted import printable
    from orchestrator.check.verify import check_box

    if not quiet:
        click.echo(f"orch: checking the GPUs of box {box.name} (up to 10 minutes)...", err=True)
    report = check_box(box, ssh_config=None, timeout=600, via=via)
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
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def down(name: str, state_url: str | None, as_json: bool) -> None:
    """Destroy box NAME and everything it created (also after a failed or interrupted up)."""
    from orchestrator.provision import lifecycle

    box = lifecycle.down(name, state_url, _say(as_json), _progress(as_json))
    if as_json:
        click.echo(json.dumps({"name": box.name, "state": box.state, "cloud": box.cloud}))
        return
    click.echo(f"box {box.name} destroyed")


def _rows(boxes: list[Any]) -> list[list[str]]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    rows = []
    for box in boxes:
        expires = box.expires_at or "-"
        if box.expires_at and box.expires_at < now:
            expires += " (expired)"
        rows.append(
            [
                box.name,
                box.state,
                box.cloud,
                box.region,
                box.candidate.instance_type,
                box.candidate.market,
                str((box.outputs or {}).get("public_ip") or "-"),
                expires,
            ]
        )
    return rows


def _show(name: str | None, as_json: bool) -> None:
    from orchestrator.provision import lifecycle
    from orchestrator.provision.boxes import list_boxes, load_box
    from orchestrator.textui import table

    boxes = [load_box(name)] if name else list_boxes()
    summaries = [lifecycle.box_summary(b) for b in boxes]
    if as_json:
        click.echo(json.dumps(summaries[0] if name else summaries, indent=2))
        return
    if not boxes:
        click.echo("no boxes (create one with `orch up`)")
        return
    headers = ["name", "state", "cloud", "region", "instance", "market", "public ip", "expires"]
    click.echo(table(headers, _rows(boxes)))
    if name:
        summary = summaries[0]
        for label, key in (
            ("instance id", "instance_id"),
            ("ssh", "ssh_command"),
            ("state", "state_url"),
            ("error", "error"),
            ("directory", "box_dir"),
        ):
            if summary.get(key):
                click.echo(f"{label}: {summary[key]}")


@click.command("status")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(name: str | None, as_json: bool) -> None:
    """Show box NAME, or every box, from the local registry."""
    _show(name, as_json)


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_boxes(as_json: bool) -> None:
    """List every box (same as `orch status` without a name)."""
    _show(None, as_json)
