"""Parsing nvidia-smi CSV (captured outputs and N/A fields), name mapping, plan comparison."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.check import nvidia_smi
from orchestrator.check.verify import Expected, evaluate
from orchestrator.check.watch import UsageMonitor, window_samples

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia-smi"
CAPTURES = ["t4", "v100", "a10g", "a100-40gb", "a100-80gb-mig", "h100", "l4"]


def fixture_rows(name: str) -> list[dict[str, str]]:
    lines = [
        line
        for line in (FIXTURES / f"{name}.csv").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    return list(csv.DictReader(lines))


def fake_smi(name: str, fields: tuple[str, ...], tmp_path: Path, fmt: str) -> str:
    """What the stub nvidia-smi prints for a capture (the same bytes the e2e tests see)."""
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    (state / "fixture").write_text(str(FIXTURES / f"{name}.csv"))
    argv = [f"--query-gpu={','.join(fields)}", f"--format={fmt}"]
    return subprocess.run(
        [sys.executable, str(FIXTURES / "fake_nvidia_smi.py"), *argv],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "FAKE_NVIDIA_SMI_STATE": str(state)},
    ).stdout


@pytest.mark.parametrize("name", CAPTURES)
def test_parse_inventory_of_each_capture(name, tmp_path):
    output = fake_smi(name, nvidia_smi.INVENTORY_FIELDS, tmp_path, "csv,noheader,nounits")
    gpus = nvidia_smi.parse_inventory(output)
    rows = fixture_rows(name)
    assert [g.name for g in gpus] == [r["name"] for r in rows]
    assert [g.memory_total_mib for g in gpus] == [int(r["memory.total"]) for r in rows]
    assert [g.driver_version for g in gpus] == [r["driver_version"] for r in rows]
    for gpu, row in zip(gpus, rows, strict=True):
        assert (gpu.uuid is None) == (row["uuid"] == "[N/A]")
        ecc = row["ecc.errors.uncorrected.volatile.total"]
        assert gpu.ecc_uncorrected == (None if ecc == "[N/A]" else int(ecc))
        # Every capture maps to a catalog GPU.
        assert nvidia_smi.canonical_gpu_name(gpu.name) is not None


def test_not_available_spellings_become_none():
    output = (
        "0, Tesla T4, 15360, 515.105.01, [N/A], 00000000:00:1E.0, [Not Supported]\n"
        "1, Tesla T4, 15360, 515.105.01, N/A, 00000000:00:1F.0, [Unknown Error]\n"
    )
    gpus = nvidia_smi.parse_inventory(output)
    assert [g.ecc_uncorrected for g in gpus] == [None, None]
    assert [g.uuid for g in gpus] == [None, None]
    assert [g.index for g in gpus] == [0, 1]


def test_units_are_tolerated_when_nounits_was_not_honoured(tmp_path):
    output = fake_smi("t4", nvidia_smi.INVENTORY_FIELDS, tmp_path, "csv,noheader")
    assert "MiB" in output
    assert nvidia_smi.parse_inventory(output)[0].memory_total_mib == 15360


def test_wrong_number_of_fields_is_a_parse_error():
    with pytest.raises(nvidia_smi.NvidiaSmiParseError, match="has 2 fields, expected 7"):
        nvidia_smi.parse_inventory("0, Tesla T4\n")


def test_non_numeric_memory_is_a_parse_error():
    with pytest.raises(nvidia_smi.NvidiaSmiParseError, match="memory.total"):
        nvidia_smi.parse_inventory("0, Tesla T4, lots, 515, 0, 00:1E.0, GPU-1\n")


def test_blank_output_means_no_gpus():
    assert nvidia_smi.parse_inventory("\n\n") == []


def test_usage_with_mig_utilisation_not_available(tmp_path):
    output = fake_smi("a100-80gb-mig", nvidia_smi.USAGE_FIELDS, tmp_path, "csv,noheader,nounits")
    (usage,) = nvidia_smi.parse_usage(output)
    assert usage.utilization_pct is None
    assert usage.memory_used_mib == 50 and usage.memory_total_mib == 81920
    assert usage.memory_fraction == pytest.approx(50 / 81920)


def test_header_line_is_printed_without_noheader(tmp_path):
    output = fake_smi("h100", ("name", "memory.total"), tmp_path, "csv")
    assert output.splitlines() == ["name, memory.total [MiB]", "NVIDIA H100 80GB HBM3, 81559 MiB"]


def test_name_mapping_prefers_catalog_and_normalises():
    table = {"Tesla T4": "T4", "NVIDIA A10G": "A10G"}
    assert nvidia_smi.canonical_gpu_name("Tesla T4", table) == "T4"
    assert nvidia_smi.canonical_gpu_name("nvidia a10g", table) == "A10G"
    assert nvidia_smi.canonical_gpu_name("NVIDIA A10G", {**table, "NVIDIA A10G": "X"}) == "X"
    assert nvidia_smi.canonical_gpu_name("NVIDIA GeForce RTX 4090", table) is None
    # The catalog's nvidia_smi_names are part of the table.
    from orchestrator.catalog import load_gpus

    for gpu in load_gpus().values():
        for smi_name in gpu.nvidia_smi_names:
            assert nvidia_smi.name_table()[smi_name] == gpu.name


# ------------------------------------------------------------------------- plan comparison


def inventory(name: str) -> list[nvidia_smi.GpuInventory]:
    rows = fixture_rows(name)
    text = "\n".join(",".join(r[f] for f in nvidia_smi.INVENTORY_FIELDS) for r in rows)
    return nvidia_smi.parse_inventory(text)


def verdicts(name: str, expected: Expected) -> dict[str, bool]:
    return {c.name: c.ok for c in evaluate(inventory(name), expected)}


def test_memory_tolerance_accepts_reported_sizes_and_rejects_other_cards():
    assert verdicts("t4", Expected("T4", 1, 16))["gpu_memory"]  # 15360 of 16384 MiB
    assert verdicts("h100", Expected("H100-80GB", 1, 80))["gpu_memory"]  # 81559 of 81920
    assert verdicts("a100-40gb", Expected("A100-40GB", 2, 40))["gpu_memory"]
    wrong = verdicts("a100-40gb", Expected("A100-80GB", 2, 80))
    assert not wrong["gpu_memory"] and not wrong["gpu_model"]


def test_ecc_not_reported_passes_with_a_note():
    checks = {c.name: c for c in evaluate(inventory("v100"), Expected("V100-16GB", 1, 16))}
    assert checks["ecc"].ok and "without ECC reporting" in checks["ecc"].message


def test_no_gpus_fails_driver_check():
    checks = {c.name: c.ok for c in evaluate([], Expected("T4", 1, 16))}
    assert checks == {"driver": False, "gpu_count": False}


# ----------------------------------------------------------------------- usage warnings


def usage(util: int | None, used: int = 1000, total: int = 23028) -> nvidia_smi.GpuUsage:
    return nvidia_smi.GpuUsage(0, util, used, total)


def test_low_utilisation_warns_once_per_idle_spell():
    monitor = UsageMonitor(window_samples=3)
    out = [monitor.add([usage(u)]) for u in (10, 10, 10, 10, 80, 5, 5, 5)]
    assert [bool(w) for w in out] == [False, False, True, False, False, False, False, True]


def test_one_busy_sample_in_the_window_prevents_the_warning():
    monitor = UsageMonitor(window_samples=3)
    assert not any(monitor.add([usage(u)]) for u in (10, 50, 10, 10))


def test_mig_gpus_are_not_judged_on_utilisation():
    monitor = UsageMonitor(window_samples=1)
    assert monitor.add([usage(None)]) == []


def test_memory_threshold_is_strictly_above_95_percent():
    monitor = UsageMonitor(window_samples=100)
    assert monitor.add([usage(90, used=95, total=100)]) == []
    assert monitor.add([usage(90, used=96, total=100)])


def test_window_samples_rounds_up():
    assert window_samples(300, 5) == 60
    assert window_samples(7, 5) == 2
    assert window_samples(0, 5) == 1
