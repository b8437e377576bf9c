"""Throughput model accuracy: leave-one-out over the catalog's measurements, per stack.

For each measurement (gpus.toml [[measurement]]: BERT-large, ResNet-50 on one GPU;
llm_throughput.toml [[llm]]: MPT (llm-foundry) and Llama (torchtitan) FSDP runs; these are the
"optimised" stack; llm_throughput.toml [[single_gpu]]: real H200 runs of the "eager" stack,
benchmarks/data/h200_eager_2026-12-04.jsonl), the model is calibrated on all the *other*
measurements and predicts the held-out one; this is how well `orch plan` predicts a GPU/job it
has not seen measured. Each stack is calibrated on its own rows only. The eager stack's
attention-with-dropout rate (EAGER_DROPOUT_ATTENTION_RATE) is refitted on a grid inside every
held-out round, the held-out row excluded. The optimizer's host cost per eager op
(HOST_OP_SECONDS, the one fitted constant of the optimizer-step model) is refitted on a grid
inside every held-out round, the held-out row excluded. The shape constants SHAPE_ALPHA and
SHAPE_BETA are refitted on a grid inside each held-out round with --refit (off by default: slow).

    python benchmarks/throughput_accuracy.py [--refit]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.catalog import load_gpus  # noqa: E402
from orchestrator.catalog.measurements import (  # noqa: E402
    load_llm_measurements,
    load_measurements,
    load_single_gpu_runs,
)
from orchestrator.sizing import throughput as tp  # noqa: E402
from orchestrator.sizing.flops import training_flops_per_sample  # noqa: E402
from orchestrator.sizing.job import JobSpec  # noqa: E402
from orchestrator.sizing.resolve import resolve_architecture  # noqa: E402
from orchestrator.sizing.stack_runs import run_job, run_terms  # noqa: E402
from orchestrator.sizing.stacks import EAGER_DROPOUT_ATTENTION_RATE, extra_seconds  # noqa: E402

GRID_ALPHA = (2.0, 4.0, 8.0)
GRID_BETA = (2.0, 5.0, 10.0)
GRID_GAMMA = (0.3, 0.4, 0.6)
GRID_HOST_OP = tuple(i * 1e-6 for i in range(0, 41))  # 0-40 us per eager op
GRID_DROPOUT = tuple(i / 200 for i in range(2, 61))  # 0.01-0.30 of the matmul rate


def _cases() -> list[tuple[str, object]]:
    """Every measurement on a GPU the catalog has (others cannot be predicted)."""
    gpus = load_gpus()
    return (
        [("single", m) for m in load_measurements()]
        + [("llm", m) for m in load_llm_measurements() if m.gpu in gpus]
        + [("run", m) for m in load_single_gpu_runs() if m.gpu in gpus]
    )


def stack_of(kind: str, m: object) -> str:
    return m.stack if kind == "run" else "optimised"  # type: ignore[attr-defined]


def family(kind: str, m: object) -> str:
    if kind == "run":
        return m.stack  # type: ignore[attr-defined]
    if kind == "llm":
        return "mpt" if m.arch.startswith("mpt-") else "llama"  # type: ignore[attr-defined]
    return "resnet" if m.model.startswith("resnet") else "bert"  # type: ignore[attr-defined]


def _job(kind: str, m: object):
    if kind == "run":
        arch, job = run_job(m)
        return arch, job, m.samples_per_s, m.precision  # type: ignore[attr-defined]
    if kind == "llm":
        arch, job = tp.llm_job(m)
        return arch, job, m.tokens_per_s_per_gpu / m.seq, m.precision  # type: ignore[attr-defined]
    job = JobSpec(
        model=m.model,  # type: ignore[attr-defined]
        batch=m.batch,  # type: ignore[attr-defined]
        seq=m.seq or 512,  # type: ignore[attr-defined]
        image_size=m.image_size or None,  # type: ignore[attr-defined]
        precision="fp32" if m.precision == "tf32" else m.precision,  # type: ignore[attr-defined]
    )
    arch, _ = resolve_architecture(job)
    precision = "tf32" if m.precision == "tf32" else job.precision  # type: ignore[attr-defined]
    return arch, job, m.samples_per_s, precision  # type: ignore[attr-defined]


def _workload(kind: str, m: object, arch) -> str:
    return tp.workload_of(arch, "" if kind == "llm" else m.memory_format)  # type: ignore[attr-defined]


def _table(
    cases,
    alpha: float,
    beta: float,
    gamma: float,
    host_op: float = tp.HOST_OP_SECONDS,
    dropout: float = EAGER_DROPOUT_ATTENTION_RATE,
):
    singles = [m for k, m in cases if k == "single"]
    llms = [m for k, m in cases if k == "llm"]
    runs = [m for k, m in cases if k == "run"]
    return tp.calibrate(singles, llms, alpha, beta, gamma, host_op, runs, dropout)


def _predict_run(m, table, alpha, beta, gamma, host_op, dropout) -> tuple[float, str]:
    gpu = load_gpus()[m.gpu]
    t = run_terms(m)
    rate = tp.gpu_rate(gpu, m.precision, t.workload, table)
    key = tp.PEAK_KEY[rate.precision_used]
    shape = tp.shape_of(t.arch, t.job, m.stack)
    factor = tp.shape_factor(gpu, key, shape, alpha, beta, gamma, dropout)
    per_s = rate.peak_tflops * 1e12 * rate.efficiency * factor / t.flops
    step = tp.job_step(t.trainable, t.state_bytes, m.precision, 0, 1, m.stack)
    extra = step.per_micro_batch(gpu, host_op) + extra_seconds(t.arch, t.job, gpu, m.stack, host_op)
    return m.batch / (m.batch / per_s + extra), rate.basis


def _predict(
    kind, m, table, alpha, beta, gamma, host_op, dropout=EAGER_DROPOUT_ATTENTION_RATE
) -> tuple[float, str]:
    """Samples/s per GPU the model gives a measured job, from a calibration table."""
    if kind == "run":
        return _predict_run(m, table, alpha, beta, gamma, host_op, dropout)
    gpu = load_gpus()[m.gpu]
    if kind == "single":
        terms = tp.measurement_terms(m)
        assert terms is not None
        workload, shape, flops, step = terms
        precision = m.precision
    else:
        arch, job, _, precision = _job(kind, m)
        workload, shape, flops, step = "transformer", tp.shape_of(arch, job), None, None
        flops = training_flops_per_sample(arch, job)
    rate = tp.gpu_rate(gpu, precision, workload, table)
    key = tp.PEAK_KEY.get(rate.precision_used, "fp32")
    key = key if key in gpu.peak_tflops else "fp32"
    factor = tp.shape_factor(gpu, key, shape, alpha, beta, gamma)
    scaling = tp.SCALING_NVLINK if kind == "llm" and m.gpus > 1 else 1.0
    per_s = rate.peak_tflops * 1e12 * rate.efficiency * factor * scaling / flops
    if step is not None:
        per_s = m.batch / (m.batch / per_s + step.per_micro_batch(gpu, host_op))
    return per_s, rate.basis


def fit_host_op(cases, alpha=tp.SHAPE_ALPHA, beta=tp.SHAPE_BETA, gamma=tp.ATTENTION_RATE):
    """Grid fit of HOST_OP_SECONDS: least squares of the log error over the single-GPU
    transformer measurements among `cases` (the only ones an optimizer step is recorded for,
    and those sharing a calibration with them)."""
    rows = [
        (k, m)
        for k, m in cases
        if k == "single" and (t := tp.measurement_terms(m)) and t[0] == "transformer"
    ]
    best = None
    for host_op in GRID_HOST_OP:
        table = _table(cases, alpha, beta, gamma, host_op)
        score = sum(
            math.log(_predict(k, m, table, alpha, beta, gamma, host_op)[0] / m.samples_per_s) ** 2
            for k, m in rows
        )
        if best is None or score < best[0]:
            best = (score, host_op)
    assert best is not None
    return best[1]


def held_out_prediction(index: int, refit: bool = False) -> tuple[float, str]:
    cases = _cases()
    kind, m = cases[index]
    rest = cases[:index] + cases[index + 1 :]
    alpha, beta, gamma = _fit(rest) if refit else (tp.SHAPE_ALPHA, tp.SHAPE_BETA, tp.ATTENTION_RATE)
    host_op = fit_host_op(rest, alpha, beta, gamma)
    dropout = fit_dropout(rest, alpha, beta, gamma, host_op)
    table = _table(rest, alpha, beta, gamma, host_op, dropout)
    return _predict(kind, m, table, alpha, beta, gamma, host_op, dropout)


def fit_dropout(
    cases,
    alpha=tp.SHAPE_ALPHA,
    beta=tp.SHAPE_BETA,
    gamma=tp.ATTENTION_RATE,
    host_op=tp.HOST_OP_SECONDS,
) -> float:
    """Grid fit of EAGER_DROPOUT_ATTENTION_RATE: least squares of the log error over the
    eager runs among `cases` (the rows with attention dropout carry it; the others share the
    eager calibration it shifts)."""
    rows = [(k, m) for k, m in cases if k == "run" and m.stack == "eager"]
    if not any(tp.shape_of(run_terms(m).arch, run_terms(m).job, "eager").dropout for _, m in rows):
        return EAGER_DROPOUT_ATTENTION_RATE  # nothing to fit on: the shipped value
    best = None
    for dropout in GRID_DROPOUT:
        table = _table(cases, alpha, beta, gamma, host_op, dropout)
        score = sum(
            math.log(
                _predict_run(m, table, alpha, beta, gamma, host_op, dropout)[0] / m.samples_per_s
            )
            ** 2
            for _, m in rows
        )
        if best is None or score < best[0]:
            best = (score, dropout)
    assert best is not None
    return best[1]


def _fit(cases) -> tuple[float, float, float]:
    """Grid fit of the shape constants: least squares of the log error over the transformer
    measurements (in-sample; on all of them it picks the shipped 4, 5, 0.4), with the shipped
    HOST_OP_SECONDS."""
    best = None
    grid = [(a, b, g) for a in GRID_ALPHA for b in GRID_BETA for g in GRID_GAMMA]
    host_op = tp.HOST_OP_SECONDS
    for alpha, beta, gamma in grid:
        table = _table(cases, alpha, beta, gamma, host_op)
        errors = []
        for kind, m in cases:
            arch, job, measured, _ = _job(kind, m)
            if tp.workload_of(arch) != "transformer":
                continue  # CNNs have no shape factor: they do not inform the fit
            pred = _predict(kind, m, table, alpha, beta, gamma, host_op)[0]
            errors.append(math.log(pred / measured) ** 2)
        score = sum(errors) / len(errors)
        if best is None or score < best[0]:
            best = (score, alpha, beta, gamma)
    assert best is not None
    return best[1], best[2], best[3]


def leave_one_out_errors(refit: bool = False) -> list[float]:
    out = []
    for i, (kind, m) in enumerate(_cases()):
        measured = _job(kind, m)[2]
        out.append(abs(held_out_prediction(i, refit)[0] - measured) / measured)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refit", action="store_true", help="refit the shape constants per round")
    parser.add_argument(
        "--stack",
        choices=("eager", "optimised", "all"),
        default="all",
        help="score only this stack's rows (every row still calibrates the others)",
    )
    args = parser.parse_args()
    print(
        f"{'family':9} {'gpu':10} {'precision':9} {'model':18} {'seq':>6} {'batch':>5} "
        f"{'measured':>9} {'predicted':>9} {'error':>6}  basis  (samples/s per GPU)"
    )
    by_family: dict[str, list[float]] = {}
    by_stack: dict[str, list[float]] = {}
    for i, (kind, m) in enumerate(_cases()):
        stack = stack_of(kind, m)
        if args.stack not in ("all", stack):
            continue
        arch, job, measured, precision = _job(kind, m)
        predicted, basis = held_out_prediction(i, args.refit)
        error = (predicted - measured) / measured
        fam = family(kind, m)
        by_family.setdefault(fam, []).append(abs(error))
        by_stack.setdefault(stack, []).append(abs(error))
        seq = job.image_size or job.seq  # a vision run: its image side
        print(
            f"{fam:9} {m.gpu:10} {precision:9} {job.model:18} {seq:6} {job.batch:5} "
            f"{measured:9.2f} {predicted:9.2f} {error:+6.0%}  {basis}"
        )
    print(
        f"\nshape constants: alpha {tp.SHAPE_ALPHA}, beta {tp.SHAPE_BETA}, "
        f"attention rate {tp.ATTENTION_RATE}" + (" (refitted per round)" if args.refit else "")
    )
    cases = _cases()
    print(
        f"host cost per eager optimizer op: {tp.HOST_OP_SECONDS * 1e6:g} us shipped, "
        f"{fit_host_op(cases) * 1e6:g} us fitted on all rows (refitted per round)"
    )
    print(
        f"eager attention-with-dropout rate: {EAGER_DROPOUT_ATTENTION_RATE:g} shipped, "
        f"{fit_dropout(cases):g} fitted on all rows (refitted per round)"
    )
    for name, groups in (("family", by_family), ("stack", by_stack)):
        for fam, errors in groups.items():
            print(
                f"{name} {fam:9} {len(errors):3} measurements: LOO median "
                f"{statistics.median(errors):.0%}, max {max(errors):.0%}"
            )


if __name__ == "__main__":
    main()
