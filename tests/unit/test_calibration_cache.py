"""The throughput calibration is kept in the parse cache: a hit gives the same table as
calibrating, and it is keyed by the data files and sizing code it came from."""

from __future__ import annotations

import os

import pytest

from orchestrator.sizing import throughput


def fresh_table() -> dict:
    throughput.calibrated_efficiency.cache_clear()
    return throughput.calibrated_efficiency()


def test_cached_calibration_equals_a_fresh_one(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    from orchestrator.catalog.measurements import (
        load_llm_measurements,
        load_measurements,
        load_single_gpu_runs,
    )

    computed = throughput.calibrate(
        load_measurements(), load_llm_measurements(), runs=load_single_gpu_runs()
    )
    first = fresh_table()  # computes and writes
    [cached] = list((tmp_path / "orch" / "catalog").glob("calibration.*.json"))
    second = fresh_table()  # reads the file
    assert first == second == computed
    cached.write_text("[[1, 2]]")  # a corrupt entry is recomputed, not trusted
    assert fresh_table() == computed


@pytest.mark.parametrize(
    "relative",
    ["catalog/data/gpus.toml", "sizing/flops.py", "sizing/architectures/encoders.py"],
)
def test_a_changed_data_file_or_sizing_module_changes_the_key(tmp_path, monkeypatch, relative):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    changed = throughput.Path(throughput.__file__).resolve().parents[1] / relative
    before = throughput._calibration_key()
    stat = changed.stat()
    try:
        os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        assert throughput._calibration_key() != before
    finally:
        os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert throughput._calibration_key() == before
    throughput.calibrated_efficiency.cache_clear()
