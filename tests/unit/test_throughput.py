"""Throughput model: calibration against the catalog's published measurements."""

from __future__ import annotations

import statistics

import pytest

from orchestrator.catalog import load_gpus, load_measurements
from orchestrator.sizing.flops import training_flops_per_sample
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.resolve import resolve_architecture
from orchestrator.sizing.throughput import (
    calibrate,
    calibrated_efficiency,
    gpu_rate,
    samples_per_second,
    shape_of,
    workload_of,
)

GPUS = load_gpus()


def job_of(m) -> JobSpec:
    return JobSpec(
        model=m.model,
        batch=m.batch,
        seq=m.seq or 512,
        image_size=m.image_size or None,
        precision="fp32" if m.precision == "tf32" else m.precision,
    )


def test_calibrated_efficiencies_are_physical() -> None:
    table = calibrated_efficiency()
    assert len(table) >= 8
    assert all(0.05 < value <= 1.0 for value in table.values()), table


def test_held_out_transformer_measurements_are_predicted() -> None:
    """Leave one out: calibrate without a measurement, then predict it."""
    measurements = load_measurements()
    errors = []
    for i, m in enumerate(measurements):
        arch, _ = resolve_architecture(job_of(m))
        if workload_of(arch) != "transformer":
            continue
        table = calibrate(measurements[:i] + measurements[i + 1 :])
        precision = "tf32" if m.precision == "tf32" else m.precision
        rate = gpu_rate(GPUS[m.gpu], precision, "transformer", table, shape_of(arch, job_of(m)))
        predicted = rate.peak_tflops * 1e12 * rate.efficiency
        predicted /= training_flops_per_sample(arch, job_of(m))
        errors.append(abs(predicted - m.samples_per_s) / m.samples_per_s)
    assert len(errors) >= 10
    assert statistics.median(errors) < 0.25, errors
    assert max(errors) < 0.6, errors


def test_faster_gpus_train_faster() -> None:
    arch, _ = resolve_architecture(JobSpec(model="bert-large"))
    flops = training_flops_per_sample(arch, JobSpec(model="bert-large"))
    rates = {
        name: samples_per_second(flops, GPUS[name], 1, "amp-bf16")
        for name in ("T4", "V100-16GB", "A10G", "A100-40GB", "H100-80GB")
    }
    assert rates["T4"] < rates["V100-16GB"] < rates["A100-40GB"] < rates["H100-80GB"]
    assert rates["T4"] < rates["A10G"] < rates["A100-40GB"]


def test_bf16_on_a_gpu_without_it_runs_fp16() -> None:
    rate = gpu_rate(GPUS["T4"], "amp-bf16")
    assert rate.precision_used == "amp-fp16"
    assert "bf16" in rate.note


def test_every_gpu_has_a_rate_for_every_supported_precision() -> None:
    for gpu in GPUS.values():
        for precision in ("fp32", "amp-fp16", "amp-bf16"):
            rate = gpu_rate(gpu, precision)
            assert rate.basis in ("measured", "transferred", "prior")
            assert 0 < rate.efficiency <= 1


def test_several_gpus_scale_sublinearly_and_overrides_are_exact() -> None:
    gpu = GPUS["A100-40GB"]
    one = samples_per_second(1e12, gpu, 1, "amp-bf16")
    eight = samples_per_second(1e12, gpu, 8, "amp-bf16")
    assert one * 7 < eight < one * 8
    assert samples_per_second(1e12, gpu, 1, "amp-bf16", override=42.0) == pytest.approx(42.0)
