"""The parsed-catalog cache: used when fresh, ignored when the data file changes."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest

from orchestrator.catalog import loader, toml_cache


@pytest.fixture
def private_catalog(tmp_path, monkeypatch):
    data = tmp_path / "data"
    shutil.copytree(loader.DATA_DIR, data)
    monkeypatch.setattr(loader, "DATA_DIR", data)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    loader.clear_cache()
    yield data
    loader.clear_cache()


def test_parsed_files_are_cached_and_reused(private_catalog, tmp_path) -> None:
    first = loader.load_gpus()
    cached = list((tmp_path / "cache" / "orch" / "catalog").glob("gpus.toml.*.json"))
    assert len(cached) == 1
    loader.clear_cache()
    assert loader.load_gpus() == first


def test_an_edited_data_file_is_parsed_again(private_catalog, tmp_path) -> None:
    loader.load_gpus()
    gpus = private_catalog / "gpus.toml"
    text = gpus.read_text()
    assert 'name = "T4"' in text
    gpus.write_text(text.replace('name = "T4"', 'name = "T4-edited"', 1))
    loader.clear_cache()
    assert "T4-edited" in loader.load_gpus()
    cached = list((tmp_path / "cache" / "orch" / "catalog").glob("gpus.toml.*.json"))
    assert len(cached) == 1  # the stale entry was replaced, not kept beside the new one


def test_an_unwritable_cache_still_loads(private_catalog, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/orch-cannot-write-here")
    assert loader.load_models()


def test_the_cache_is_plain_json(private_catalog, tmp_path) -> None:
    loader.load_gpus()
    (cached,) = (tmp_path / "cache" / "orch" / "catalog").glob("gpus.toml.*.json")
    data = json.loads(cached.read_text())
    assert [gpu["name"] for gpu in data["gpu"]][:1] == [next(iter(loader.load_gpus()))]


def test_a_planted_pickle_is_never_loaded(private_catalog, tmp_path) -> None:
    """A restored or shared cache directory must not run code: a pickle there is ignored."""
    marker = tmp_path / "pwned"
    gpus = private_catalog / "gpus.toml"
    stat = gpus.stat()

    class Exploit:
        def __reduce__(self):
            return (Path.touch, (marker,))

    payload = pickle.dumps(Exploit())
    cache_dir = tmp_path / "cache" / "orch" / "catalog"
    cache_dir.mkdir(parents=True)
    # The name earlier releases loaded, and the name of today's entry, both holding a pickle.
    (cache_dir / f"gpus.toml.{stat.st_mtime_ns}.{stat.st_size}.pickle").write_bytes(payload)
    json_entry = toml_cache.cache_path("gpus.toml", gpus, stat.st_mtime_ns, stat.st_size)
    json_entry.write_bytes(payload)
    assert "T4" in loader.load_gpus()
    assert not marker.exists()
    assert not list(cache_dir.glob("*.pickle"))  # the old format is cleaned away
    json.loads(json_entry.read_text())  # and the entry was rewritten as JSON


@pytest.mark.parametrize("junk", [b"", b"[1, 2]", b"{not json", b"\xff\xfe"])
def test_a_corrupt_entry_is_parsed_again(private_catalog, tmp_path, junk) -> None:
    first = loader.load_models()
    (cached,) = (tmp_path / "cache" / "orch" / "catalog").glob("models.toml.*.json")
    cached.write_bytes(junk)
    loader.clear_cache()
    assert loader.load_models() == first


def test_toml_dates_read_the_same_from_a_hit_and_a_miss(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = tmp_path / "dated.toml"
    source.write_text("day = 2025-06-01\nwhen = 2025-06-01T12:30:00Z\nat = 07:45:00\nn = inf\n")
    miss = toml_cache.read_toml_cached(source, "dated.toml")
    hit = toml_cache.read_toml_cached(source, "dated.toml")
    assert miss == hit
    assert miss["day"] == "2025-06-01" and miss["at"] == "07:45:00"
    assert miss["when"] == "2025-06-01T12:30:00+00:00" and miss["n"] == float("inf")


def _imports(module_file: str) -> set[str]:
    import ast

    tree = ast.parse(Path(module_file).read_text())
    return {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }


def test_no_import_circle_between_loader_and_overlay() -> None:
    """The loader uses the overlay; the overlay (and the TOML cache) never import the loader."""
    from orchestrator.catalog import overlay

    assert "orchestrator.catalog.overlay" in _imports(loader.__file__)
    assert "orchestrator.catalog.loader" not in _imports(overlay.__file__)
    assert not [m for m in _imports(toml_cache.__file__) if m.startswith("orchestrator")]


def test_two_installs_keep_their_own_entries(private_catalog, tmp_path, monkeypatch) -> None:
    """Two venvs or checkouts (same file names, other mtimes) must not replace each other's
    entries on every run: each would parse the catalog on every start."""
    other = tmp_path / "other-install" / "data"
    shutil.copytree(private_catalog, other)
    cache = tmp_path / "cache" / "orch" / "catalog"

    def load_from(data: Path) -> dict:
        monkeypatch.setattr(loader, "DATA_DIR", data)
        loader.clear_cache()
        return loader.load_gpus()

    assert load_from(private_catalog) == load_from(other)
    entries = {p: p.stat().st_mtime_ns for p in cache.glob("gpus.toml.*.json")}
    assert len(entries) == 2
    load_from(private_catalog)
    load_from(other)
    # Both hits: neither entry was deleted or written again.
    assert {p: p.stat().st_mtime_ns for p in cache.glob("gpus.toml.*.json")} == entries


def test_an_entry_of_an_earlier_release_is_cleaned_away(private_catalog, tmp_path) -> None:
    gpus = private_catalog / "gpus.toml"
    stat = gpus.stat()
    cache = tmp_path / "cache" / "orch" / "catalog"
    cache.mkdir(parents=True)
    legacy = cache / f"gpus.toml.{stat.st_mtime_ns}.{stat.st_size}.json"  # no place tag
    legacy.write_text("{}")
    assert "T4" in loader.load_gpus()
    assert not legacy.exists()
    assert len(list(cache.glob("gpus.toml.*.json"))) == 1


def test_entries_of_at_most_max_places_are_kept(private_catalog, tmp_path) -> None:
    """Each deleted checkout or venv would leave its entries behind: the least recently
    written places beyond MAX_PLACES go when an entry is written."""
    cache = tmp_path / "cache" / "orch" / "catalog"
    cache.mkdir(parents=True)
    others = []
    for n in range(toml_cache.MAX_PLACES + 2):
        entry = cache / f"gpus.toml.p{n:08x}.1.1.json"
        entry.write_text("{}")
        os.utime(entry, ns=(n * 10**9, n * 10**9))  # p00000000 is the oldest
        others.append(entry)
    other_name = cache / "models.toml.p00000000.1.1.json"
    other_name.write_text("{}")
    assert "T4" in loader.load_gpus()
    kept = sorted(p.name for p in cache.glob("gpus.toml.*.json"))
    assert len(kept) == toml_cache.MAX_PLACES
    newest = {e.name for e in others[-(toml_cache.MAX_PLACES - 1) :]}
    assert newest <= set(kept)  # the newest other places stay, the oldest three went
    assert other_name.exists()  # another file's entries are not touched
