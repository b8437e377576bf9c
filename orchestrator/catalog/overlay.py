"""User price overlay: prices fetched from a cloud's API, kept outside the package.

`orch catalog refresh` writes `$XDG_DATA_HOME/orch/prices/<cloud>.toml` (default
`~/.local/share/orch/prices/`); the loader lays it over the shipped prices when it builds
`InstanceType.prices`. An overlay entry replaces the shipped price of that type in that region;
types and regions the overlay does not name keep the shipped figures. Deleting the file goes
back to the shipped catalog.

File format (written by `render_overlay`, one inline table per type and region):

    cloud = "aliyun"
    [prices."ecs.gn7i-c8g1.2xlarge"]
    "cn-hangzhou" = { on_demand = 1.83, spot = 0.55, date = "2026-12-02",
                      source = "Alibaba Cloud DescribePrice API (region cn-hangzhou)" }

`kept = ["spot"]` in an entry names a market the API gave no figure for on `date`, whose
previous figure was carried over.

Start-up: `read_overlay` costs one `os.path.exists` when there is no overlay; a present one is
parsed through the same data-only parse cache as the shipped files (`toml_cache`).
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from orchestrator.catalog.schema import Price, Source
from orchestrator.catalog.toml_cache import read_toml_cached
from orchestrator.errors import OrchError

MARKETS = ("on_demand", "spot")


class OverlayEntry(NamedTuple):
    """One instance type's price in one region, as an API reported it on `date`."""

    price: Price
    date: str  # ISO date (UTC) of the refresh
    source: str  # "Alibaba Cloud DescribePrice API (region cn-hangzhou)"
    kept: tuple[str, ...] = ()  # markets carried over from the previous figure


Overlay = dict[str, dict[str, OverlayEntry]]  # instance type -> region -> entry


def overlay_path(cloud: str) -> Path:
    """$XDG_DATA_HOME/orch/prices/<cloud>.toml (XDG_DATA_HOME defaults to ~/.local/share)."""
    base = os.environ.get("XDG_DATA_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative path is invalid and is ignored
        base = os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "orch" / "prices" / f"{cloud}.toml"


def _bad(path: Path, what: str) -> OrchError:
    return OrchError(
        f"price overlay {path}: {what}",
        hint="fix it, or delete it to go back to the shipped prices"
        " (`orch catalog refresh` then writes a new one)",
    )


def read_overlay(cloud: str) -> Overlay:
    """The overlay of `cloud`; empty when the file does not exist."""
    path = overlay_path(cloud)
    if not os.path.exists(path):
        return {}
    # The parse cache is keyed by name, mtime and size: the name carries the whole path, so
    # that two overlays (two XDG_DATA_HOMEs) never share an entry.
    cache_name = "price-overlay" + "".join(c if c.isalnum() else "_" for c in str(path)) + ".toml"
    try:
        data = read_toml_cached(path, cache_name)
    except OSError as exc:
        raise _bad(path, f"cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:  # tomllib.TOMLDecodeError
        raise _bad(path, f"is not valid TOML ({exc})") from None
    if data.get("cloud", cloud) != cloud:
        raise _bad(path, f"is for cloud {data.get('cloud')!r}, not {cloud!r}")
    raw_prices = data.get("prices", {})
    if not isinstance(raw_prices, dict):
        raise _bad(path, "`prices` must be a table")
    overlay: Overlay = {}
    for instance_type, regions in raw_prices.items():
        if not isinstance(regions, dict):
            raise _bad(path, f"prices.{instance_type!r} must be a table of regions")
        for region, raw in regions.items():
            overlay.setdefault(instance_type, {})[region] = _entry(
                path, f"{instance_type} {region}", raw
            )
    return overlay


def _entry(path: Path, where: str, raw: Any) -> OverlayEntry:
    if not isinstance(raw, dict):
        raise _bad(path, f"{where}: expected a table")
    values: dict[str, float | None] = {}
    for market in MARKETS:
        value = raw.get(market)
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise _bad(path, f"{where}: {market} must be a positive number")
        values[market] = None if value is None else float(value)
    if values["on_demand"] is None and values["spot"] is None:
        raise _bad(path, f"{where}: no price")
    date = str(raw.get("date", ""))
    try:
        _dt.date.fromisoformat(date)
    except ValueError:
        raise _bad(path, f"{where}: date {date!r} is not an ISO date") from None
    kept = raw.get("kept", [])
    if not isinstance(kept, list) or not all(m in MARKETS for m in kept):
        raise _bad(path, f"{where}: kept must list markets ({', '.join(MARKETS)})")
    return OverlayEntry(
        Price(on_demand=values["on_demand"], spot=values["spot"]),
        date,
        str(raw.get("source", "")),
        tuple(kept),
    )


# ---------------------------------------------------------------------------- merging


def apply_overlay(
    cloud: str,
    prices: dict[str, Price],
    price_source: Source,
    entries: dict[str, OverlayEntry] | None,
    api_url: str | None = None,
) -> tuple[dict[str, Price], Source]:
    """Shipped prices and source of one instance type, with its overlay entries laid over.

    `api_url`: the reference of the price API that wrote the entries (the source's URL).
    """
    if not entries:
        return prices, price_source
    merged = dict(prices)
    merged.update({region: entry.price for region, entry in entries.items()})
    sources = sorted({entry.source for entry in entries.values() if entry.source})
    note = "; ".join(sources) or "price API"
    note += f" (price overlay {overlay_path(cloud)}, written by `orch catalog refresh`)"
    shipped_only = sorted(set(prices) - set(entries))
    if shipped_only:
        note += (
            f"; {', '.join(shipped_only)}: shipped catalog prices"
            f" ({price_source.url}, {price_source.date})"
        )
    source = Source(
        url=api_url or price_source.url,
        date=max(entry.date for entry in entries.values()),
        note=note,
    )
    return merged, source


# ---------------------------------------------------------------------------- writing


def _toml_string(text: str) -> str:
    import json

    return json.dumps(text)  # a JSON string (ASCII, escaped) is a valid TOML basic string


def _toml_number(value: float) -> str:
    return repr(float(value))


def render_overlay(cloud: str, overlay: Overlay, written: str) -> str:
    """The overlay as TOML text, types and regions sorted."""
    lines = [
        f"# Prices fetched by `orch catalog refresh --cloud {cloud}` (last run {written}).",
        "# USD per hour. They replace the shipped catalog's prices for the same type and region;",
        "# delete this file to go back to the shipped prices.",
        "",
        f"cloud = {_toml_string(cloud)}",
    ]
    for instance_type in sorted(overlay):
        lines += ["", f"[prices.{_toml_string(instance_type)}]"]
        for region in sorted(overlay[instance_type]):
            entry = overlay[instance_type][region]
            fields = [
                f"{market} = {_toml_number(value)}"
                for market in MARKETS
                if (value := getattr(entry.price, market)) is not None
            ]
            fields += [
                f"date = {_toml_string(entry.date)}",
                f"source = {_toml_string(entry.source)}",
            ]
            if entry.kept:
                fields.append(f"kept = [{', '.join(_toml_string(m) for m in entry.kept)}]")
            lines.append(f"{_toml_string(region)} = {{ {', '.join(fields)} }}")
    return "\n".join(lines) + "\n"


def write_overlay(cloud: str, overlay: Overlay, written: str) -> Path:
    """Write the overlay atomically (a reader sees the old file or the new one)."""
    import tempfile

    path = overlay_path(cloud)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{cloud}-", suffix=".toml")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(render_overlay(cloud, overlay, written))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise OrchError(
            f"cannot write the price overlay {path}: {exc.strerror or exc}",
            hint="set XDG_DATA_HOME to a writable directory",
        ) from None
    return path


# ---------------------------------------------------------------------------- refreshing


class PriceChange(NamedTuple):
    """What a refresh did to one type in one region."""

    instance_type: str
    region: str
    old: Price | None  # the price in effect before (overlay or shipped); None: no price
    new: Price | None  # the price in effect after
    status: str  # "changed" | "unchanged" | "new" | "unavailable" (API gave nothing: kept)

    def to_dict(self) -> dict[str, Any]:
        def prices(price: Price | None) -> dict[str, float | None]:
            return {m: getattr(price, m) if price else None for m in MARKETS}

        return {
            "instance_type": self.instance_type,
            "region": self.region,
            "status": self.status,
            "old": prices(self.old),
            "new": prices(self.new),
        }


def _same(a: Price | None, b: Price | None) -> bool:
    def key(p: Price | None) -> tuple[float | None, ...]:
        return tuple(
            None if (v := getattr(p, m) if p else None) is None else round(v, 6) for m in MARKETS
        )

    return key(a) == key(b)


def merge_refresh(
    overlay: Overlay,
    current: dict[str, dict[str, Price]],
    fetched: dict[str, dict[str, dict[str, float | None]]],
    *,
    date: str,
    source_for_region: Callable[[str], str],
) -> tuple[Overlay, list[PriceChange]]:
    """Lay freshly fetched prices over `overlay`.

    `current` holds the prices in effect now (type -> region -> Price); `fetched` is what the
    price API returned (type -> region -> {"on_demand": x | None, "spot": y | None}); None,
    or a figure that is not a positive number (a TradePrice of 0 after a discount), keeps the
    figure in effect: the overlay's reader refuses it, which would stop every later plan.
    `source_for_region(region)` names the API call.
    Returns the new overlay and one PriceChange per fetched type and region.
    """
    result: Overlay = {t: dict(regions) for t, regions in overlay.items()}
    changes: list[PriceChange] = []
    for instance_type in sorted(fetched):
        for region in sorted(fetched[instance_type]):
            row = {m: _usable(fetched[instance_type][region].get(m)) for m in MARKETS}
            old = current.get(instance_type, {}).get(region)
            if all(row.get(m) is None for m in MARKETS):
                changes.append(PriceChange(instance_type, region, old, old, "unavailable"))
                continue
            values: dict[str, float | None] = {}
            kept: list[str] = []
            for market in MARKETS:
                value = row.get(market)
                if value is None:
                    value = getattr(old, market) if old else None
                    if value is not None:
                        kept.append(market)
                values[market] = value
            new = Price(on_demand=values["on_demand"], spot=values["spot"])
            result.setdefault(instance_type, {})[region] = OverlayEntry(
                new, date, source_for_region(region), tuple(kept)
            )
            status = "new" if old is None else "unchanged" if _same(old, new) else "changed"
            changes.append(PriceChange(instance_type, region, old, new, status))
    return result, changes


def _usable(value: Any) -> float | None:
    """A fetched price the overlay can hold (a positive finite number), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None
