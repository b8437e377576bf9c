"""The parsed-catalog cache: used when fresh, ignored when the data file changes."""

from __future__ import annotations

import shutil

import pytest

from orchestrator.catalog import loader


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
    cached = list((tmp_path / "cache" / "orch" / "catalog").glob("gpus.toml.*.pickle"))
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
    cached = list((tmp_path / "cache" / "orch" / "catalog").glob("gpus.toml.*.pickle"))
    assert len(cached) == 1  # the stale entry was replaced, not kept beside the new one


def test_an_unwritable_cache_still_loads(private_catalog, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/orch-cannot-write-here")
    assert loader.load_models()
