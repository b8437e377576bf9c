"""`orch sweep`: destroy expired boxes found by tag, even when their local state is gone."""

from __future__ import annotations

import json

import click

from orchestrator import clouds
from orchestrator.commands.aliases import AliasedChoice


@click.command()
@click.option(
    "--cloud",
    # `all` was this option's word for `any` (as in plan and up): still accepted, hidden.
    type=AliasedChoice([*clouds.names(), "any"], {"all": "any"}, "--cloud"),
    default="any",
    show_default=True,
    help="Which cloud to sweep; with `any`, a cloud without credentials is skipped.",
)
@click.option(
    "--region",
    "regions",
    multiple=True,
    help="Region to sweep (repeatable). Default: every catalog region plus local boxes'.",
)
@click.option("--dry-run", is_flag=True, help="Only list what would be destroyed.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report.")
@click.pass_context
def sweep(ctx, cloud, regions, dry_run, as_json) -> None:
    """Destroy boxes whose orch:expires-at has passed, with their security groups and keys
    (and, on Aliyun, their tagged VPCs and vSwitches).

    \b
    Boxes are found by their orch:box tag in the cloud itself, so boxes whose local
    state was lost (a cancelled CI job, a deleted runner) are found too. Boxes that are
    not expired, or have no expiry, are left alone. Run it on a schedule.
    A cloud without credentials is skipped ("aws: skipped: no credentials").
    Exit codes: 0 done, 1 some box could not be destroyed or no cloud could be swept,
    2 usage.

    \b
    Examples:
      orch sweep --dry-run
      orch sweep --cloud aws --region us-east-1 --region eu-west-1
      orch sweep --cloud aliyun --json
    """
    from orchestrator.sweep import clouds_for
    from orchestrator.sweep import sweep as run_sweep

    report = run_sweep(clouds_for(cloud), list(regions) or None, dry_run=dry_run)
    for group in report.failed:
        click.echo(f"orch: sweep of {group.box} failed: {group.error}", err=True)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        for skipped, why in report.skipped.items():
            click.echo(f"{skipped}: skipped: {why}")
        for group in report.groups:
            kinds = ", ".join(f"{r.kind} {r.id}" for r in group.resources)
            expiry = group.expires_at or "no expiry"
            line = f"{group.action:13} {group.cloud}/{group.region} {group.box} ({expiry}): {kinds}"
            click.echo(line + (f" -- {group.error}" if group.error else ""))
        counts = report.counts()
        summary = ", ".join(f"{n} {action}" for action, n in sorted(counts.items())) or "no boxes"
        click.echo(f"{'dry run: ' if dry_run else ''}{summary}")
    if report.nothing_swept:
        missing = ", ".join(report.skipped)
        why = "; ".join(f"{name}: {reason}" for name, reason in report.skipped.items())
        click.echo(
            f"orch: error: nothing was swept: no credentials for {missing} ({why})", err=True
        )
    ctx.exit(1 if report.failed or report.nothing_swept else 0)
