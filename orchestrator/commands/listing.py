"""`orch list`: every box in the local registry, one line each.

Its own module, so that listing boxes loads neither the planning options nor the launch code
(commands/boxes.py pulls in the CI-runner clients, provision/launch and selection):
issue 23's target is at most 3x bare Python start-up (benchmarks/startup.py).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click


def _rows(boxes: list[Any]) -> list[list[str]]:
    from orchestrator.check.untrusted import printable

    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    rows = []
    for box in boxes:
        expires = box.expires_at or "-"
        if box.expires_at and box.expires_at < now:
            expires += " (expired)"
        cells = [
            box.name,
            _state_cell(box),
            box.cloud,
            box.region,
            box.candidate.instance_type,
            box.candidate.market,
            str((box.outputs or {}).get("public_ip") or "-"),
            expires,
        ]
        rows.append([printable(cell, limit=100) for cell in cells])  # a record's words
    return rows


def _state_cell(box: Any) -> str:
    """The state, with whether a "creating"/"destroying" box is still being worked on."""
    from orchestrator.provision.liveness import activity

    text = activity(box.name, box.state, box.runner)
    if text is None:
        return box.state
    return f"{box.state} (orch gone)" if "is gone" in text else f"{box.state} (running)"


def _warn_damaged(damaged: dict[str, str]) -> None:
    """A record orch cannot read still names a box that may be running and billing: say so
    on stderr, one line each, rather than leave it out of the list unseen."""
    from orchestrator.check.untrusted import printable

    for name, why in damaged.items():
        click.echo(
            f"orch: warning: box {name} is not listed: {printable(why, limit=300)}"
            f" (what it created carries the tag orch:box={name})",
            err=True,
        )


def show_list(as_json: bool) -> None:
    """Every box: a table, or (--json) a list of `orch up --json` objects."""
    from orchestrator.provision.boxes import read_boxes
    from orchestrator.textui import table

    boxes, damaged = read_boxes()
    _warn_damaged(damaged)
    if as_json:
        from orchestrator.provision.display import box_summary

        click.echo(json.dumps([box_summary(b) for b in boxes], indent=2))
        return
    if not boxes and not damaged:
        click.echo("no boxes (create one with `orch up`)")
        return
    headers = ["name", "state", "cloud", "region", "instance", "market", "public ip", "expires"]
    click.echo(table(headers, _rows(boxes)))


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def list_boxes(as_json: bool) -> None:
    """List every box in the local registry: state, cloud, region, instance, IP, expiry.

    \b
    Examples:
      orch list
      orch list --json
    """
    show_list(as_json)
