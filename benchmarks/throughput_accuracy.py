"""Throughput model accuracy: leave-one-out over the catalog's published measurements.

For each measurement, the model is calibrated on all the *other* measurements and predicts
the held-out one; this is how well `orch plan` predicts a GPU/job it has not seen measured.

    python benchmarks/throughput_accuracy.py
"""

from __future__ import annotations

import statistics

from orchestrator.catalog import load_gpus, load_measurements
from orchestrator.sizing.flops import training_flops_per_sample
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.resolve import resolve_architecture
from orchestrator.sizing.throughput import calibrate, gpu_rate, workload_of


def held_out_prediction(index: int) -> tuple[float, str]:
    measurements = load_measurements()
    m = measurements[index]
    table = calibrate(measurements[:index] + measurements[index + 1 :])
    job = JobSpec(
        model=m.model,
        batch=m.batch,
        seq=m.seq or 512,
        image_size=m.image_size or None,
        precision="fp32" if m.precision == "tf32" else m.precision,
    )
    arch, _ = resolve_architecture(job)
    precision = "tf32" if m.precision == "tf32" else job.precision
    rate = gpu_rate(load_gpus()[m.gpu], precision, workload_of(arch), table)
    flops = training_flops_per_sample(arch, job)
    return rate.peak_tflops * 1e12 * rate.efficiency / flops, rate.basis


def leave_one_out_errors() -> list[float]:
    measurements = load_measurements()
    return [
        abs(held_out_prediction(i)[0] - m.samples_per_s) / m.samples_per_s
        for i, m in enumerate(measurements)
    ]


def main() -> None:
    measurements = load_measurements()
    print(
        f"{'gpu':10} {'precision':9} {'model':20} {'seq':>4} {'batch':>5} "
        f"{'measured':>9} {'predicted':>9} {'error':>6}  basis"
    )
    errors = []
    for i, m in enumerate(measurements):
        predicted, basis = held_out_prediction(i)
        error = abs(predicted - m.samples_per_s) / m.samples_per_s
        errors.append(error)
        print(
            f"{m.gpu:10} {m.precision:9} {m.model:20} {m.seq:4} {m.batch:5} "
            f"{m.samples_per_s:9.1f} {predicted:9.1f} {error:6.0%}  {basis}"
        )
    print(
        f"\n{len(errors)} measurements: median error {statistics.median(errors):.0%}, "
        f"mean {statistics.mean(errors):.0%}, max {max(errors):.0%}"
    )


if __name__ == "__main__":
    main()
