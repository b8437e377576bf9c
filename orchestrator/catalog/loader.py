"""Read and validate the catalog TOML files in `orchestrator/catalog/data/`.

Each file is parsed once per process (functools.cache, an unbounded lru_cache) with the
stdlib `tomllib`. A file may declare shared sources in a top-level `[sources]` table; an entry
then names one by key (`source = "aws-g5"`) instead of repeating the URL and date. Every fact
must end up with a `Source` that has a URL and an ISO date; `validate.validate_catalog()`
checks that and the cross-file references (every instance's GPU exists, every measurement's GPU
and model exist).
"""

from __future__ import annotations

import datetime as _dt
import math
from functools import cache
from pathlib import Path
from typing import Any

from orchestrator.catalog.overlay import apply_overlay, read_overlay
from orchestrator.catalog.schema import (
    Gpu,
    InstanceType,
    ModelEntry,
    Price,
    Source,
)
from orchestrator.catalog.toml_cache import read_toml_cached
from orchestrator.clouds import names as cloud_names
from orchestrator.clouds.registry import catalog_file
from orchestrator.errors import OrchError, UsageError

DATA_DIR = Path(__file__).resolve().parent / "data"
CLOUDS = cloud_names()  # the registry's clouds when this loads (for CLI choices)
PRECISION_KEYS = ("fp32", "tf32", "fp16", "bf16")
MEASUREMENT_PRECISIONS = ("fp32", "tf32", "amp-fp16", "amp-bf16", "bf16")


class CatalogError(OrchError):
    """The shipped data files are broken: a bug in the package, not in the user's input."""


# ---------------------------------------------------------------------------- file reading


@cache
def _read(filename: str) -> dict[str, Any]:
    path = DATA_DIR / filename
    try:
        return read_toml_cached(path, filename)
    except FileNotFoundError as exc:
        raise CatalogError(f"catalog data file missing: {path}") from exc
    except ValueError as exc:  # tomllib.TOMLDecodeError
        raise CatalogError(f"catalog data file {filename} is not valid TOML: {exc}") from exc


def _source(raw: Any, shared: dict[str, Any], where: str) -> Source:
    """Build a Source from an inline table or from the name of an entry in `[sources]`."""
    if isinstance(raw, str):
        if raw not in shared:
            raise CatalogError(f"{where}: unknown source key {raw!r}")
        raw = shared[raw]
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: missing source")
    url, date = raw.get("url", ""), str(raw.get("date", ""))
    # repo:PATH names a file of this repository: the project's own measurements, kept raw there.
    if not url or not str(url).startswith(("http://", "https://", "repo:")):
        raise CatalogError(f"{where}: source needs an http(s) url (or repo:PATH)")
    try:
        _dt.date.fromisoformat(date)
    except ValueError as exc:
        raise CatalogError(f"{where}: source date {date!r} is not an ISO date") from exc
    verified = raw.get("verified", True)
    if not isinstance(verified, bool):
        raise CatalogError(f"{where}: source `verified` must be true or false")
    return Source(url=url, date=date, note=raw.get("note", ""), verified=verified)


# ------------------------------------------------------------------------------------ GPUs


@cache
def load_gpus() -> dict[str, Gpu]:
    """All GPUs, keyed by canonical name ("T4", "A10G", "A100-80GB")."""
    data = _read("gpus.toml")
    shared = data.get("sources", {})
    gpus: dict[str, Gpu] = {}
    for raw in data.get("gpu", []):
        where = f"gpus.toml gpu {raw.get('name')!r}"
        gpu = Gpu(
            name=raw["name"],
            memory_gib=float(raw["memory_gib"]),
            peak_tflops={k: float(v) for k, v in raw["peak_tflops"].items()},
            memory_bandwidth_gbps=float(raw["memory_bandwidth_gbps"]),
            interconnect=raw["interconnect"],
            efficiency={k: float(v) for k, v in raw["efficiency"].items()},
            source=_source(raw.get("source"), shared, where),
            efficiency_source=_source(raw.get("efficiency_source"), shared, where),
            nvidia_smi_names=tuple(raw.get("nvidia_smi_names", ())),
            architecture=raw.get("architecture", ""),
            sustained_tflops={k: float(v) for k, v in raw.get("sustained_tflops", {}).items()},
            sustained_source=(
                _source(raw["sustained_source"], shared, where)
                if "sustained_source" in raw
                else None
            ),
        )
        if gpu.sustained_tflops and gpu.sustained_source is None:
            raise CatalogError(f"{where}: sustained_tflops needs a sustained_source")
        if gpu.name in gpus:
            raise CatalogError(f"{where}: duplicate GPU name")
        gpus[gpu.name] = gpu
    return gpus


# ------------------------------------------------------------------------------- instances


def _cloud_catalog(cloud: str) -> dict[str, Any]:
    """The shipped data/<cloud>.toml, or the file a registered (plugin) cloud brings."""
    own = catalog_file(cloud)
    if own is None:
        return _read(f"{cloud}.toml")
    cache_name = f"cloud-{cloud}" + "".join(c if c.isalnum() else "_" for c in str(own)) + ".toml"
    try:
        return read_toml_cached(Path(own), cache_name)
    except (OSError, ValueError) as exc:
        raise CatalogError(f"catalog of cloud {cloud} ({own}) cannot be read: {exc}") from exc


def _instances_of(cloud: str) -> tuple[InstanceType, ...]:
    data = _cloud_catalog(cloud)
    shared = data.get("sources", {})
    defaults = data.get("defaults", {})
    overlay = read_overlay(cloud)  # {} unless `orch catalog refresh` wrote one
    # The reference of the API behind `orch catalog refresh`: what an overlay price cites.
    api_url = data.get("price_api", {}).get("reference_url")
    rows = []
    for raw in data.get("instance", []):
        where = f"{cloud}.toml instance {raw.get('name')!r}"
        prices = _prices(raw.get("prices", {}), where)
        price_source = _source(raw.get("price_source", defaults.get("price_source")), shared, where)
        refreshed = overlay.get(raw["name"]) or {}
        # A shipped price without a dated authoritative source stays unverified until the
        # user's overlay (`orch catalog refresh`) replaces it for that region.
        unverified = frozenset(() if price_source.verified else set(prices) - set(refreshed))
        prices, price_source = apply_overlay(cloud, prices, price_source, refreshed, api_url)
        rows.append(
            InstanceType(
                cloud=cloud,
                name=raw["name"],
                family=raw["family"],
                vcpus=int(raw["vcpus"]),
                memory_gib=float(raw["memory_gib"]),
                gpu=raw["gpu"],
                gpu_count=int(raw["gpu_count"]),
                network=raw.get("network", ""),
                efa=bool(raw.get("efa", False)),
                prices=prices,
                source=_source(raw.get("source", defaults.get("source")), shared, where),
                price_source=price_source,
                local_nvme_gib=int(raw.get("local_nvme_gib", 0)),
                efa_interfaces=_efa_interfaces(raw, shared, where),
                legacy=bool(raw.get("legacy", False)),
                legacy_note=raw.get("legacy_note", ""),
                unverified_prices=unverified,
            )
        )
    return tuple(rows)


def _prices(raw: Any, where: str) -> dict[str, Price]:
    """A row's prices: a table of regions, each a table with a positive finite `on_demand`
    and/or `spot` (a plugin cloud's own catalog file is read here too, unchecked otherwise:
    a zero, negative or NaN price would win every plan)."""
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: prices must be a table of regions")
    prices = {}
    for region, entry in raw.items():
        if not isinstance(entry, dict):
            raise CatalogError(f"{where}: prices.{region} must be a table (on_demand, spot)")
        values: dict[str, float | None] = {}
        for market in ("on_demand", "spot"):
            value = entry.get(market)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise CatalogError(
                    f"{where}: prices.{region}.{market} must be a positive number, not {value!r}"
                )
            values[market] = None if value is None else float(value)
        prices[region] = Price(on_demand=values["on_demand"], spot=values["spot"])
    return prices


def _efa_interfaces(raw: dict[str, Any], shared: dict[str, Any], where: str) -> int:
    """A row's efa_interfaces: a whole number 0..32 (EC2's most is 32, on P5), 0 without EFA."""
    value = raw.get("efa_interfaces", 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 32:
        raise CatalogError(f"{where}: efa_interfaces must be a whole number 0..32, not {value!r}")
    if value and not raw.get("efa", False):
        raise CatalogError(f"{where}: efa_interfaces {value} on a type without efa = true")
    if value:  # a catalog fact carries its source: `efa_source`, a key of [sources]
        _source(raw.get("efa_source"), shared, f"{where} efa_source")
    return value


@cache
def _all_instances() -> tuple[InstanceType, ...]:
    return tuple(row for cloud in cloud_names() for row in _instances_of(cloud))


def _check_cloud(cloud: str) -> None:
    if cloud not in cloud_names():
        raise UsageError(f"unknown cloud {cloud!r} (choose from {', '.join(cloud_names())})")


def load_instances(cloud: str | None = None) -> list[InstanceType]:
    """Instance types of one cloud, or of all clouds when `cloud` is None, in file order."""
    if cloud is not None:
        _check_cloud(cloud)
    return [row for row in _all_instances() if cloud is None or row.cloud == cloud]


def find_instance(cloud: str, name: str) -> InstanceType:
    """The instance type `name` of `cloud`; UsageError naming close matches when unknown."""
    _check_cloud(cloud)
    rows = {row.name: row for row in load_instances(cloud)}
    if name in rows:
        return rows[name]
    lowered = {key.lower(): row for key, row in rows.items()}
    if name.lower() in lowered:
        return lowered[name.lower()]
    import difflib  # only on a miss

    close = difflib.get_close_matches(name, list(rows), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}?" if close else "see `orch catalog instances`"
    raise UsageError(f"unknown {cloud} instance type {name!r}", hint=hint)


def price_of(cloud: str, instance_type: str, region: str, spot: bool = False) -> float | None:
    """The catalog's hourly price of `instance_type` in `region` (the price overlay included);
    None when the catalog does not know it. The by-name form of `InstanceType.price`, the one
    price lookup: plan ranks (sizing/select.py, planning.py) with `InstanceType.price`, `orch
    run` prices its on-demand fallbacks with this, and a pool keeps the prices of its plan."""
    from orchestrator.errors import OrchError

    try:
        return find_instance(cloud, instance_type).price(region, spot=spot)
    except OrchError:
        return None


# ---------------------------------------------------------------------------------- models


@cache
def load_models() -> dict[str, ModelEntry]:
    """All catalog models keyed by canonical name ("bert-large-uncased")."""
    data = _read("models.toml")
    shared = data.get("sources", {})
    models: dict[str, ModelEntry] = {}
    for raw in data.get("model", []):
        where = f"models.toml model {raw.get('name')!r}"
        # The Hub id ("google-bert/bert-large-uncased") is accepted as one more alias.
        hf_id = raw.get("hf_id")
        entry = ModelEntry(
            name=raw["name"],
            aliases=tuple(raw.get("aliases", ())) + ((hf_id,) if hf_id else ()),
            config=dict(raw["config"]),
            source=_source(raw.get("source"), shared, where),
            parameters=raw.get("parameters"),
            description=raw.get("description", ""),
            tags=tuple(raw.get("tags", ())),
        )
        if entry.name in models:
            raise CatalogError(f"{where}: duplicate model name")
        models[entry.name] = entry
    return models


@cache
def _model_index() -> dict[str, str]:
    """Lower-cased canonical names and aliases -> canonical name."""
    index: dict[str, str] = {}
    for entry in load_models().values():
        for key in (entry.name, *entry.aliases):
            if key.lower() in index and index[key.lower()] != entry.name:
                raise CatalogError(f"models.toml: name {key!r} is used by two models")
            index[key.lower()] = entry.name
    return index


def find_model(name: str) -> ModelEntry:
    """Look a model up by name or alias, case-insensitively; UsageError with close names."""
    index = _model_index()
    key = name.strip().lower()
    if key in index:
        return load_models()[index[key]]
    # Hugging Face ids such as "google-bert/bert-large-uncased" or "meta-llama/Llama-2-7b-hf".
    tail = key.rsplit("/", 1)[-1]
    for candidate in (tail, tail.removesuffix("-hf")):
        if candidate in index:
            return load_models()[index[candidate]]
    import difflib  # only on a miss

    close = difflib.get_close_matches(key, list(index), n=2, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}?" if close else "see `orch catalog models`"
    raise UsageError(f"unknown model {name!r}", hint=hint)


def clear_cache() -> None:
    """Forget parsed files (for tests that point DATA_DIR elsewhere)."""
    for cached in (_read, load_gpus, _all_instances, load_models, _model_index):
        cached.cache_clear()
