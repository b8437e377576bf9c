"""`orch catalog gpus|instances|models`: show the catalog as aligned tables or JSON;
`orch catalog refresh`: fetch current prices into the user's price overlay.

gpus/instances/models are offline: they read only the TOML data files and the price overlay
(no cloud SDK, no Terraform). `refresh` imports the cloud SDK inside its own body.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from orchestrator import clouds
from orchestrator.catalog import load_gpus, load_instances, load_models
from orchestrator.catalog.loader import CLOUDS
from orchestrator.catalog.schema import InstanceType, ModelEntry
from orchestrator.clouds.registry import price_api_of
from orchestrator.errors import UsageError
from orchestrator.textui import counted

PRECISION_COLUMNS = ("fp32", "tf32", "fp16", "bf16")
UNVERIFIED_MARK = "price NOT RE-VERIFIED"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces; no trailing blanks."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = []
    for row in (headers, *rows):
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        lines.append(line.rstrip())
    return "\n".join(lines)


def _number(value: float) -> str:
    return f"{value:g}"


def _emit(as_json: bool, payload: list[dict[str, Any]], table: str) -> None:
    if as_json:
        click.echo(json.dumps(payload, indent=2))
    else:
        click.echo(table)


@click.group(name="catalog", invoke_without_command=True)
@click.pass_context
def catalog(ctx: click.Context) -> None:
    """List the GPUs, instance types (with prices) and models orch knows about.

    \b
    Examples:
      orch catalog instances --cloud aws --region us-east-1
      orch catalog models --json
      orch catalog refresh --cloud aliyun      fetch current prices (DescribePrice)
      orch catalog refresh --cloud aws         Price List API + spot price history
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


# ------------------------------------------------------------------------------------ gpus


@catalog.command(name="gpus")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def gpus_command(as_json: bool) -> None:
    """GPUs with memory, dense peak TFLOPS and memory bandwidth.

    \b
    Examples:
      orch catalog gpus
      orch catalog gpus --json
    """
    gpus = list(load_gpus().values())
    headers = ["GPU", "ARCH", "MEMORY", *[f"{p.upper()} TF" for p in PRECISION_COLUMNS]]
    headers += ["BW GB/s", "INTERCONNECT"]
    rows = []
    for gpu in gpus:
        peaks = [
            _number(gpu.peak_tflops[p]) if p in gpu.peak_tflops else "-" for p in PRECISION_COLUMNS
        ]
        rows.append(
            [
                gpu.name,
                gpu.architecture,
                f"{_number(gpu.memory_gib)} GiB",
                *peaks,
                _number(gpu.memory_bandwidth_gbps),
                gpu.interconnect,
            ]
        )
    _emit(as_json, [asdict(gpu) for gpu in gpus], format_table(headers, rows))


# ------------------------------------------------------------------------------- instances


def _pick_price(
    instance: InstanceType, region: str | None, spot: bool
) -> tuple[str | None, float | None]:
    """The price to show: in `region`, or the cheapest region with a price."""
    if region is not None:
        return region, instance.price(region, spot=spot)
    best: tuple[str | None, float | None] = (None, None)
    for name in sorted(instance.prices):
        value = instance.price(name, spot=spot)
        if value is not None and (best[1] is None or value < best[1]):
            best = (name, value)
    return best


def _known_regions(instances: Sequence[InstanceType]) -> set[str]:
    return {region for row in instances for region in row.prices}


@catalog.command(name="instances")
@click.option("--cloud", type=click.Choice(CLOUDS), help="Only this cloud.")
@click.option("--region", help="Show prices in this region (default: each type's cheapest).")
@click.option("--spot", is_flag=True, help="Show spot prices instead of on-demand.")
@click.option("--gpu", "gpu_name", help="Only instances with this GPU (e.g. A10G).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def instances_command(
    cloud: str | None, region: str | None, spot: bool, gpu_name: str | None, as_json: bool
) -> None:
    """GPU instance types with specs and USD/hour prices.

    \b
    Examples:
      orch catalog instances --cloud aws --region us-east-1
      orch catalog instances --gpu A10G --spot
      orch catalog instances --json
    """
    instances = load_instances(cloud)
    if region is not None and region not in _known_regions(instances):
        known = ", ".join(sorted(_known_regions(instances)))
        raise UsageError(f"no prices for region {region!r}", hint=f"regions with prices: {known}")
    gpus = load_gpus()
    if gpu_name is not None:
        from orchestrator.catalog.gpu_names import resolve_gpu

        wanted = resolve_gpu(gpu_name, gpus)  # H100 -> H100-80GB; ambiguous or unknown: exit 2
        instances = [row for row in instances if row.gpu == wanted]

    headers = ["CLOUD", "TYPE", "GPUS", "GPU MEM", "VCPU", "RAM", "$/H", "REGION", "NOTE"]
    rows, payload = [], []
    for row in instances:
        shown_region, price = _pick_price(row, region, spot)
        gpu_memory = gpus[row.gpu].memory_gib * row.gpu_count
        verified = price is None or shown_region is None or row.price_verified(shown_region)
        note = ", ".join(n for n in ("legacy" * row.legacy, UNVERIFIED_MARK * (not verified)) if n)
        rows.append(
            [
                row.cloud,
                row.name,
                f"{row.gpu_count}x {row.gpu}",
                f"{_number(gpu_memory)} GiB",
                str(row.vcpus),
                f"{_number(row.memory_gib)} GiB",
                f"{price:.3f}" if price is not None else "-",
                shown_region or "-",
                note,
            ]
        )
        record = asdict(row)
        record["unverified_prices"] = sorted(row.unverified_prices)
        record.update(
            gpu_memory_gib=gpu_memory,
            market="spot" if spot else "on-demand",
            region=shown_region,
            price_per_hour=price,
            price_verified=verified,
        )
        payload.append(record)
    table = format_table(headers, rows)
    legacy = [row for row in instances if row.legacy]
    if legacy and not as_json:
        table += f"\n\nlegacy: {legacy[0].legacy_note}"
    if not as_json and any(UNVERIFIED_MARK in r[8] for r in rows):
        table += (
            f"\n{UNVERIFIED_MARK}: no dated authoritative source for this price; it never wins"
            " a plan unless refreshed (`orch catalog refresh`) or allowed"
            " (`orch plan --allow-unverified-prices`)."
        )
    if not as_json and any(r[6] == "-" for r in rows):
        table += (
            "\n'-' = no price there (not offered in that region, or no public price):"
            " listed, but not ranked by cost."
        )
    _emit(as_json, payload, table)


# ---------------------------------------------------------------------------------- models


def _first(config: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return None


def _model_shape(entry: ModelEntry) -> tuple[str, str, str]:
    """(layers, hidden, heads) for display, whatever the HF config calls them."""
    config = entry.config
    layers = _first(config, "num_hidden_layers", "n_layer", "num_layers", "n_layers", "depths")
    if isinstance(layers, list):
        layers = sum(layers)
    hidden = _first(config, "hidden_size", "n_embd", "d_model", "dim", "hidden_sizes")
    if isinstance(hidden, list):
        hidden = hidden[-1]
    heads = _first(config, "num_attention_heads", "n_head", "num_heads", "n_heads")
    return tuple("-" if v is None else str(v) for v in (layers, hidden, heads))  # type: ignore[return-value]


def _params(count: int | None) -> str:
    if count is None:
        return "-"
    if count >= 1_000_000_000:
        return f"{count / 1e9:.3g}B"
    return f"{count / 1e6:.3g}M"


@catalog.command(name="models")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def models_command(as_json: bool) -> None:
    """Models with their architecture shape (from their Hugging Face config).

    \b
    Examples:
      orch catalog models
      orch catalog models --json
    """
    models = list(load_models().values())
    headers = ["MODEL", "TYPE", "PARAMS", "LAYERS", "HIDDEN", "HEADS", "ALIASES"]
    rows = []
    for entry in models:
        short_aliases = [a for a in entry.aliases if "/" not in a]
        rows.append(
            [
                entry.name,
                str(entry.config.get("model_type", "-")),
                _params(entry.parameters),
                *_model_shape(entry),
                ", ".join(short_aliases),
            ]
        )
    _emit(as_json, [asdict(entry) for entry in models], format_table(headers, rows))


# --------------------------------------------------------------------------------- refresh

REGION_PATTERN = r"[a-z]{2}(-[a-z0-9]+)+"


def _price_cell(old: float | None, new: float | None) -> str:
    def show(value: float | None) -> str:
        return "-" if value is None else f"{value:g}"

    return show(new) if old == new else f"{show(old)} -> {show(new)}"


def _refresh_regions(cloud: str, given: Sequence[str]) -> list[str]:
    import re

    for region in given:
        if not re.fullmatch(REGION_PATTERN, region):
            raise UsageError(f"{region!r} is not a region id", hint="e.g. cn-hangzhou")
    if given:
        return sorted(set(given))
    regions = sorted(_known_regions(load_instances(cloud)))
    if not regions:
        raise UsageError(f"the catalog lists no {cloud} region", hint="name one with --region")
    return regions


@dataclass(slots=True)
class RefreshResult:
    cloud: str
    date: str
    regions: list[str]
    path: Path
    dry_run: bool
    written: bool
    changes: list[Any]  # overlay.PriceChange

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for change in self.changes:
            counts[change.status] = counts.get(change.status, 0) + 1
        return counts


def _refresh_targets(
    cloud: str, regions: Sequence[str], types: Sequence[str]
) -> tuple[list[InstanceType], list[str], list[str]]:
    """The cloud's catalog types, the type names to price, and the regions to price them in."""
    from orchestrator.catalog import find_instance

    instances = load_instances(cloud)
    names = list(dict.fromkeys(find_instance(cloud, t).name for t in types)) or [
        row.name for row in instances
    ]
    return instances, names, _refresh_regions(cloud, regions)


def _merge_and_write(
    cloud: str,
    instances: Sequence[InstanceType],
    fetched: dict[str, dict[str, dict[str, float | None]]],
    api: clouds.base.PriceApi,
    dry_run: bool,
    regions: list[str],
) -> RefreshResult:
    """Lay the fetched figures over the user's overlay; write it unless nothing was priced."""
    import datetime as dt

    from orchestrator.catalog import overlay as price_overlay

    today = dt.datetime.now(dt.UTC).date().isoformat()
    updated, changes = price_overlay.merge_refresh(
        price_overlay.read_overlay(cloud),
        {row.name: dict(row.prices) for row in instances},
        fetched,
        date=today,
        source_for_region=api.source,
    )
    written = any(c.status != "unavailable" for c in changes) and not dry_run
    if written:
        price_overlay.write_overlay(cloud, updated, today)
    path = price_overlay.overlay_path(cloud)
    return RefreshResult(cloud, today, regions, path, dry_run, written, changes)


def _print_refresh(result: RefreshResult, as_json: bool) -> None:
    counts = result.counts()
    if as_json:
        payload = {
            "cloud": result.cloud,
            "date": result.date,
            "regions": result.regions,
            "overlay": str(result.path),
            "dry_run": result.dry_run,
            "written": result.written,
            "counts": counts,
            "prices": [change.to_dict() for change in result.changes],
        }
        click.echo(json.dumps(payload, indent=2))
        return
    shown = [c for c in result.changes if c.status in ("changed", "new")]
    if shown:
        rows = [
            [
                c.instance_type,
                c.region,
                _price_cell(*(getattr(p, "on_demand", None) for p in (c.old, c.new))),
                _price_cell(*(getattr(p, "spot", None) for p in (c.old, c.new))),
            ]
            for c in shown
        ]
        click.echo(format_table(["TYPE", "REGION", "ON-DEMAND $/H", "SPOT $/H"], rows))
        click.echo("")
    order = ("changed", "new", "unchanged", "unavailable")
    words = {"unavailable": "not priced by the API (old figure kept)"}
    summary = ", ".join(f"{counts[s]} {words.get(s, s)}" for s in order if counts.get(s))
    click.echo(summary or "nothing to price")
    if result.written:
        click.echo(f"wrote {result.path}")
    elif result.dry_run and any(c.status != "unavailable" for c in result.changes):
        click.echo(f"dry run: {result.path} not written")


@catalog.command(name="refresh")
@click.option("--cloud", type=click.Choice(CLOUDS), required=True, help="Whose prices to fetch.")
@click.option(
    "--region",
    "regions",
    multiple=True,
    help="Region to price (repeatable). Default: every region the catalog has prices for.",
)
@click.option(
    "--type",
    "types",
    multiple=True,
    help="Instance type to price (repeatable). Default: all of the cloud's catalog types.",
)
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report instead of a table.")
def refresh_command(
    cloud: str, regions: tuple[str, ...], types: tuple[str, ...], dry_run: bool, as_json: bool
) -> None:
    """Fetch current prices from the cloud's price API into your price overlay.

    \b
    Alibaba Cloud: ECS DescribePrice (pay-as-you-go and spot, USD per hour, the instance
    without its system disk), with the standard credentials (ALIBABA_CLOUD_ACCESS_KEY_ID,
    ...). AWS: the Price List API (GetProducts, Linux on-demand, shared tenancy) and
    DescribeSpotPriceHistory (lowest zone's current spot price), with the standard AWS
    credential chain (AWS_PROFILE, AWS_ACCESS_KEY_ID, ...). The prices go to
    $XDG_DATA_HOME/orch/prices/<cloud>.toml, never into the package; `orch catalog` and
    `orch plan` then use them over the shipped ones. A type the API cannot price keeps its
    old figure. Delete the file to go back to the shipped prices.

    \b
    Examples:
      orch catalog refresh --cloud aliyun --dry-run
      orch catalog refresh --cloud aliyun --region cn-hangzhou --type ecs.gn7i-c8g1.2xlarge
      orch catalog refresh --cloud aws --region us-east-1 --type p5.48xlarge
    """
    api = price_api_of(clouds.get(cloud))
    if api is None:
        raise UsageError(f"{cloud} has no price API to refresh from")
    instances, names, wanted_regions = _refresh_targets(cloud, regions, types)
    if not as_json:
        click.echo(
            f"asking {api.name} for {counted(len(names), 'type')}"
            f" in {', '.join(wanted_regions)} ...",
            err=True,
        )
    fetched = api.fetch(wanted_regions, names)
    result = _merge_and_write(cloud, instances, fetched, api, dry_run, wanted_regions)
    _print_refresh(result, as_json)
