"""`orch doctor`: tools, credentials and regions per cloud; with --online, vCPU quotas."""

from __future__ import annotations

import json
from typing import Any

import click

from orchestrator.errors import UsageError


@click.command("doctor")
@click.option(
    "--online", is_flag=True, help="Also read each cloud's vCPU quotas (API calls, no changes)."
)
@click.option(
    "--plan",
    "plan_path",
    type=click.Path(dir_okay=False),
    help="With --online: compare the quotas with what this plan's rows need.",
)
@click.option(
    "--region", help="With --online and no --plan: read quotas here (default: configured one)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def doctor(ctx, online: bool, plan_path: str | None, region: str | None, as_json: bool) -> None:
    """Say what this machine can do before anything is created: Terraform core, ssh and
    rsync; per cloud, credentials and the configured region; with --online, the account's
    GPU vCPU quotas against what a plan (or the catalog's types in a region) needs.

    \b
    Exit codes: 0 the tools are there and at least one cloud has credentials (and, with
    --online --plan, the plan's choice is within its quota); 1 otherwise; 2 usage.

    \b
    Examples:
      orch doctor
      orch doctor --online --region us-east-1
      orch doctor --online --plan plan.json --json
    """
    from orchestrator import clouds
    from orchestrator import doctor as checks
    from orchestrator.plan import read_plan

    if (plan_path or region) and not online:
        raise UsageError("--plan and --region choose what --online compares; add --online")
    if plan_path and region:
        raise UsageError("--plan names its regions; drop --region")
    plan = read_plan(plan_path) if plan_path else None
    if plan is not None:
        from orchestrator.plan_validate import validate_plan

        validate_plan(plan)
    tools = checks.tool_checks()
    reports = [checks.cloud_report(name) for name in clouds.names()]
    for report in reports:
        if online and report.usable:
            report.checks += _quotas(checks, report.cloud, plan, region)
    choice_ok = plan is None or all(
        c.ok for r in reports if r.cloud == plan.choice.cloud for c in r.checks
    )
    ok = all(t.ok for t in tools) and any(r.usable for r in reports) and choice_ok
    if as_json:
        payload = {
            "ok": ok,
            "tools": [t.to_dict() for t in tools],
            "clouds": [r.to_dict() for r in reports],
        }
        click.echo(json.dumps(payload, indent=2))
    else:
        _print(tools, reports)
    ctx.exit(0 if ok else 1)


def _quotas(checks: Any, cloud: str, plan: Any, region: str | None) -> list[Any]:
    from orchestrator import clouds

    if plan is not None:
        return checks.quota_checks(cloud, plan.candidates())
    where = region or clouds.get(cloud).local_setup().region
    if not where:
        return [checks.Check("quota", True, "no region configured: give --region")]
    return checks.quota_summary(cloud, where)


def _print(tools: list[Any], reports: list[Any]) -> None:
    def line(check: Any) -> str:
        return f"  {check.name:12} {'ok  ' if check.ok else 'FAIL'}  {check.detail}"

    click.echo("tools:")
    for check in tools:
        click.echo(line(check))
    for report in reports:
        click.echo(f"{report.cloud} ({report.title}):")
        for check in report.checks:
            click.echo(line(check))
