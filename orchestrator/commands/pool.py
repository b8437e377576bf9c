"""`orch pool`: a warm pool of GPU boxes that CI jobs lease in seconds and never leak."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import click

from orchestrator.commands.check_options import (
    DAY_S,
    DURATION_RANGES,
    bounded_duration,
    check_timeout_option,
    ssh_config_option,
)
from orchestrator.commands.console import make_progress, make_say
from orchestrator.durations import parse_seconds
from orchestrator.errors import OrchError, UsageError
from orchestrator.textui import counted

store_option = click.option(
    "--store",
    "store_url",
    metavar="s3://BUCKET/PREFIX",
    help="Where the pool's record lives (default: this machine's ORCH_HOME). CI: S3.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _seconds(option: str, text: str, low: float, high: float) -> float:
    """A duration (30s, 10m, 2h, 1d; a bare number is seconds); "0" where low allows it."""
    value = parse_seconds(text, option, "s", allow_zero=low == 0)
    return bounded_duration(option, value, low=low, high=high)


def _open(name: str, store_url: str | None, as_json: bool, **kwargs: Any):  # noqa: ANN202
    from orchestrator.check.transport import resolve_ssh_config
    from orchestrator.pool.manager import open_pool

    if "ssh_config" in kwargs:
        kwargs["ssh_config"] = resolve_ssh_config(kwargs["ssh_config"])
    return open_pool(name, store_url, make_say(False), progress=make_progress(as_json), **kwargs)


@click.group("pool")
def pool() -> None:
    """A warm pool of checked boxes: `lease` hands one out in seconds.

    \b
    Examples:
      orch pool create gpu --plan plan.json --min 2 --max 6 --idle 30m --ttl 8h
      orch pool lease gpu --wait 10m --lease-ttl 2h --json
      orch pool release gpu gpu-1a2b3c --lease 0f1e2d3c4b5a6978
      orch pool reconcile gpu
    """


@pool.command("create")
@click.argument("name")
@click.option("--plan", "plan_path", required=True, type=click.Path(dir_okay=False),
              help="plan.json the pool's boxes are created from (`orch plan -o`).")  # fmt: skip
@click.option("--min", "minimum", type=int, default=1, show_default=True, help="Boxes kept warm.")
@click.option("--max", "maximum", type=int, default=4, show_default=True, help="Most boxes.")
@click.option("--idle", default="30m", metavar="DURATION", show_default=True,
              help="Destroy boxes idle longer than this, above --min (`reconcile`).")  # fmt: skip
@click.option(
    "--ttl",
    default="8h",
    metavar="DURATION",
    show_default=True,
    help="Each box's lifetime (its expiry).",
)
@click.option(
    "--lease-ttl", default="2h", metavar="DURATION", show_default=True, help="Default lease length."
)
@click.option("--ssh-cidr", "ssh_cidrs", multiple=True, help="IPv4 block allowed to SSH in.")
@click.option("--allow-world-ssh", is_flag=True, help="Permit --ssh-cidr wider than a /8.")
@click.option("--spot-bid", type=float, metavar="USD/h", help="Most to pay per hour (spot).")
@check_timeout_option("--check-timeout", "check_timeout")
@store_option
@ssh_config_option()
@json_option
def create(name: str, plan_path: str, minimum: int, maximum: int, idle: str, ttl: str,
           lease_ttl: str, ssh_cidrs: tuple[str, ...], allow_world_ssh: bool,
           spot_bid: float | None, check_timeout: float, store_url: str | None,
           ssh_config: str | None, as_json: bool) -> None:  # fmt: skip
    """Create pool NAME from a plan and start --min boxes.

    \b
    Examples:
      orch pool create gpu --plan plan.json --min 2 --max 6 --idle 30m --ttl 8h
      orch pool create ci --plan plan.json --store s3://my-bucket/pools --ssh-cidr 203.0.113.0/24
    """
    from orchestrator.plan import read_plan
    from orchestrator.pool.record import new_box_name, validate_pool_name
    from orchestrator.provision import inputs
    from orchestrator.provision.request import build_request
    from orchestrator.provision.state_backend import parse_state_url

    validate_pool_name(name)
    inputs.check_ttl(ttl)
    if inputs.no_expiry(ttl):
        raise UsageError("pool boxes need an expiry: --ttl none is not allowed for a pool")
    ttl_s = inputs.parse_ttl(ttl).total_seconds()
    idle_s = _seconds("--idle", idle, 60, 30 * DAY_S)
    lease_s = _seconds("--lease-ttl", lease_ttl, 60, 7 * DAY_S)
    if lease_s >= ttl_s:
        raise UsageError("--lease-ttl must be shorter than the boxes' --ttl")
    bounded_duration("--check-timeout", check_timeout, **DURATION_RANGES["check_timeout"])
    request = build_request(
        lambda: read_plan(plan_path),
        name=new_box_name(name),  # each box gets its own name when it starts
        ttl=ttl,
        ssh_cidrs=ssh_cidrs,
        allow_world_ssh=allow_world_ssh,
        spot_bid=spot_bid,
    )
    handle = _open(name, store_url, as_json, ssh_config=ssh_config, check_timeout=check_timeout)
    request = request.with_caller_cidr()
    if handle.store.kind.shared:
        # Boxes keep their Terraform state next to the record, so any runner can destroy them.
        state_url = handle.store.url.rstrip("/") + f"/pools/{name}/state"
        request = replace(request, state=parse_state_url(state_url))
    settings = dict(
        minimum=minimum,
        maximum=maximum,
        idle_s=idle_s,
        ttl=ttl,
        lease_ttl_s=lease_s,
        up=request.to_dict(),
    )
    from orchestrator.pool.manager import create as create_pool

    result = create_pool(handle, request.plan, settings)
    _echo(result, as_json, f"pool {name}: started {len(result['started'])} of {minimum} boxes")


@pool.command("lease")
@click.argument("name")
@click.option(
    "--wait",
    default="10m",
    metavar="DURATION",
    show_default=True,
    help="How long to wait for a box.",
)
@click.option("--lease-ttl", metavar="DURATION", help="Lease length (default: the pool's).")
@store_option
@ssh_config_option()
@check_timeout_option("--check-timeout", "check_timeout")
@json_option
def lease(name: str, wait: str, lease_ttl: str | None, store_url: str | None,
          ssh_config: str | None, check_timeout: float, as_json: bool) -> None:  # fmt: skip
    """Lease a checked box from pool NAME (a new one starts while the pool is under --max).

    \b
    Examples:
      orch pool lease gpu --json
      orch pool lease gpu --wait 10m --lease-ttl 2h --json
    """
    from orchestrator.pool.manager import lease as lease_box

    wait_s = _seconds("--wait", wait, 0, DAY_S)
    lease_s = _seconds("--lease-ttl", lease_ttl, 60, 7 * DAY_S) if lease_ttl else None
    handle = _open(name, store_url, as_json, ssh_config=ssh_config, check_timeout=check_timeout)
    result = lease_box(handle, wait_s, lease_s)
    _echo(
        result,
        as_json,
        f"leased {result['box']} until {result['lease_expires_at']} "
        f"(lease {result['lease_id']}); release: orch pool release {name} {result['box']} "
        f"--lease {result['lease_id']}",
    )


@pool.command("release")
@click.argument("name")
@click.argument("box")
@click.option("--dirty", is_flag=True, help="Destroy the box instead of resetting it.")
@click.option("--lease", "lease_id", help="The lease id `orch pool lease` printed; refused "
              "unless the box is still under this lease.")  # fmt: skip
@click.option("--force", is_flag=True, help="Release a box leased by someone else, without "
              "its lease id (resets it under its holder).")  # fmt: skip
@store_option
@ssh_config_option()
@json_option
def release(name: str, box: str, dirty: bool, lease_id: str | None, force: bool,
            store_url: str | None, ssh_config: str | None, as_json: bool) -> None:  # fmt: skip
    """Give BOX back to pool NAME: reset and ready again, or destroyed (--dirty, or when the
    reset fails).

    \b
    Examples:
      orch pool release gpu gpu-1a2b3c --lease 0f1e2d3c4b5a6978
      orch pool release gpu gpu-1a2b3c --lease 0f1e2d3c4b5a6978 --dirty
      orch pool release gpu gpu-1a2b3c --force   # a holder that died; `reconcile` does it too
    """
    from orchestrator.pool.manager import release as release_box
    from orchestrator.provision.boxes import validate_box_name

    validate_box_name(box)
    handle = _open(name, store_url, as_json, ssh_config=ssh_config)
    outcome = release_box(handle, box, lease_id, dirty, force)
    _echo({"pool": name, "box": box, "outcome": outcome}, as_json, f"box {box}: {outcome}")


@pool.command("status")
@click.argument("name")
@store_option
@json_option
def status(name: str, store_url: str | None, as_json: bool) -> None:
    """Boxes, leases and idle cost of pool NAME.

    \b
    Examples:
      orch pool status gpu
      orch pool status gpu --json
    """
    from orchestrator.pool.manager import status as pool_status

    result = pool_status(_open(name, store_url, as_json))
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"pool {name} ({result['store']}): min {result['min']}, max {result['max']}, "
               f"idle cost ${result['idle_cost_per_hour']:.3f}/h")  # fmt: skip
    for row in result["boxes"]:
        lease = ""
        if row["lease_holder"]:
            lease = f"  lease until {row['lease_expires_at']} ({row['lease_holder']})"
            lease += " EXPIRED" if row["lease_expired"] else ""
        click.echo(f"  {row['box']:<16} {row['state']:<12} {row['instance_type'] or '-':<14}"
                   f" {row['public_ip'] or '-':<15}{lease}")  # fmt: skip
    for row in result["skipped"]:
        click.echo(f"  {row['box']:<16} skipped: it {row['why']}")


@pool.command("reconcile")
@click.argument("name")
@store_option
@ssh_config_option()
@check_timeout_option("--check-timeout", "check_timeout")
@json_option
def reconcile(name: str, store_url: str | None, ssh_config: str | None, check_timeout: float,
              as_json: bool) -> None:  # fmt: skip
    """Recover expired leases, replace lost or silent boxes, retire idle ones above --min,
    top up to --min. Run it from a schedule.

    \b
    Examples:
      orch pool reconcile gpu
      orch pool reconcile ci --store s3://my-bucket/orch-pools --json
    """
    from orchestrator.pool.manager import reconcile as reconcile_pool

    handle = _open(name, store_url, as_json, ssh_config=ssh_config, check_timeout=check_timeout)
    result = reconcile_pool(handle)
    done = {k: v for k, v in result["actions"].items() if v}
    _echo(
        result,
        as_json,
        f"pool {name}: "
        + (
            ", ".join(f"{k.replace('_', ' ')} {', '.join(v)}" for k, v in done.items())
            or "nothing to do"
        ),
    )
    if result["actions"]["failed"]:
        failed = counted(len(result["actions"]["failed"]), "box", "boxes")
        raise OrchError(f"pool {name}: {failed} failed to reconcile; the others were reconciled")


@pool.command("delete")
@click.argument("name")
@click.option("--force", is_flag=True, help="Also destroy boxes under a lease.")
@store_option
@json_option
def delete(name: str, force: bool, store_url: str | None, as_json: bool) -> None:
    """Destroy every box of pool NAME and its record.

    \b
    Examples:
      orch pool delete gpu
      orch pool delete ci --store s3://my-bucket/orch-pools --force
    """
    from orchestrator.pool.manager import delete as delete_pool

    result = delete_pool(_open(name, store_url, as_json), force)
    _echo(result, as_json, f"pool {name} deleted ({len(result['destroyed'])} boxes destroyed)")


@pool.command("_provision", hidden=True)
@click.argument("name")
@click.argument("box")
@store_option
@ssh_config_option()
@check_timeout_option("--check-timeout", "check_timeout")
def provision(name: str, box: str, store_url: str | None, ssh_config: str | None,
              check_timeout: float) -> None:  # fmt: skip
    """Start one box whose entry is `provisioning` (run by create, lease and reconcile)."""
    from orchestrator.pool.manager import provision_entry

    handle = _open(name, store_url, False, ssh_config=ssh_config, check_timeout=check_timeout)
    provision_entry(handle, box)


@pool.command("_destroy", hidden=True)
@click.argument("name")
@click.argument("box")
@store_option
def destroy(name: str, box: str, store_url: str | None) -> None:
    """Destroy one box whose entry is `destroying` (run by delete and reconcile); exit 3: it
    is not this pool's."""
    from orchestrator.pool.members import NOT_OURS_EXIT
    from orchestrator.pool.members import destroy as destroy_box

    if not destroy_box(_open(name, store_url, False), box):
        raise SystemExit(NOT_OURS_EXIT)


def _echo(result: dict[str, Any], as_json: bool, text: str) -> None:
    click.echo(json.dumps(result, indent=2) if as_json else text)
