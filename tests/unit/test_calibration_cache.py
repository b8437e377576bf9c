"""The throughput calibration is kept in the parse cache: a hit gives the same table as
calibrating, and it is keyed by the data files and sizing code it came from."""

from __future__ import annotations

import os

from orchestrator.sizing import throughput


def fresh_table() -> dict:
    throughput.calibrated_efficiency.cache_clear()
    return throughput.calibrated_efficiency()


def test_cached_calibration_equals_a_fresh_one(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    from orchestrator.catalog.interconnect import load_llm_measurements

    computed = throughput.calibrate(throughput.load_measurements(), load_llm_measurements())
    first = fresh_table()  # computes and writes
    [cached] = list((tmp_path / "orch" / "catalog").glob("calibration.*.json"))
    second = fresh_table()  # reads the file
    assert first == second == computed
    cached.write_text("[[1, 2]]")  # a corrupt entry is recomputed, not trusted
    assert fresh_table() == computed


def test_a_changed_data_file_changes_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    data = throughput.Path(throughput.__file__).resolve().parents[1] / "catalog" / "data"
    gpus = data / "gpus.toml"
    before = throughput._calibration_key()
    stat = gpus.stat()
    try:
        os.utime(gpus, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        assert throughput._calibration_key() != before
    finally:
        os.utime(gpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert throughput._calibration_key() == before
    throughput.calibrated_efficiency.cache_clear()
