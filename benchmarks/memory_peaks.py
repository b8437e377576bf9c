"""Estimated vs measured peak GPU memory of real training runs, per runtime stack.

Two sources, each case with its stack, source and date:
- benchmarks/data/memory_peaks.toml: published peaks (nvidia-smi, max_memory_reserved or
  max_memory_allocated) with the exact job each ran;
- benchmarks/data/h200_*.jsonl: real-GPU jobs run with benchmarks/gpu/measure_gpu.py (their
  configs in benchmarks/gpu/configs/), scored on `nvml_peak_minus_base` (what nvidia-smi shows
  for the job, CUDA context included); the allocated peak is printed beside it.

The estimate is the largest phase of the step (sizing/step_phases.py) plus the stack's
allocator reserve and CUDA context (sizing/runtime_stack.py). Each stack's reserve fraction
(and, for stacks measured here, its context) is refitted on that stack's cases; the
leave-one-out error predicts every case with the constants fitted on the others only.
Target (issue 20): within 10 %, never more than 5 % under.

    python benchmarks/memory_peaks.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "benchmarks" / "data"
PEAKS = DATA / "memory_peaks.toml"
CONFIGS = ROOT / "benchmarks" / "gpu" / "configs"

from orchestrator.catalog import find_model  # noqa: E402
from orchestrator.sizing import overhead  # noqa: E402
from orchestrator.sizing.architectures import from_hf_config  # noqa: E402
from orchestrator.sizing.job import JobSpec  # noqa: E402
from orchestrator.sizing.memory import GIB, MemoryBreakdown, estimate_memory  # noqa: E402
from orchestrator.sizing.runtime_stack import DEFAULT_STACK, runtime_stack  # noqa: E402

UNITS = {"B": 1, "MB": 1e6, "MiB": 1024**2, "GB": 1e9, "GiB": GIB}
JOB_KEYS = (
    "batch",
    "seq",
    "precision",
    "optimizer",
    "attention",
    "grad_checkpointing",
    "lora_rank",
    "lora_dropout",
    "gpus",
    "zero",
    "fused_ce",
    "activation_offload",
    "quantize",
)
TARGET_OVER, TARGET_UNDER = 0.10, -0.05


@dataclass
class Case:
    label: str
    source: str
    stack: str
    metric: str  # nvidia-smi | max_memory_reserved | max_memory_allocated
    measured: float  # bytes
    memory: MemoryBreakdown
    context: float | None  # bytes: the case's driver decides it; None: the stack's (fitted)
    measured_allocated: float | None = None  # real-GPU jobs: max_memory_allocated
    measured_context: float | None = None  # real-GPU jobs: NVML peak - max_memory_reserved

    @property
    def sees_reserve(self) -> bool:
        return self.metric != "max_memory_allocated"


def _published(path: Path) -> list[Case]:
    data = tomllib.loads(path.read_text())
    cases = []
    for raw in data["peak"]:
        config = dict(find_model(raw["model"]).config)
        if raw.get("head"):
            config["architectures"] = [raw["head"]]
            config.setdefault("num_labels", 2)
        arch = from_hf_config(config, raw["model"])
        ctx = overhead.context_for_driver(raw["driver"])
        assert ctx is not None, raw["label"]
        stack = raw.get("stack", DEFAULT_STACK)
        job = JobSpec(
            model=raw["model"],
            cuda_context_gib=ctx.gib,
            cuda_context_basis=ctx.basis,
            memory_stack=stack,
            **{k: raw[k] for k in JOB_KEYS if k in raw},
        )
        source = data["sources"][raw["source"]]
        cases.append(
            Case(
                raw["label"],
                f"{source['url']} ({source['date']})",
                stack,
                raw["metric"],
                raw["value"] * UNITS[raw["unit"]],
                estimate_memory(arch, job),
                ctx.gib * GIB,
            )
        )
    return cases


def _measured_jobs(path: Path) -> list[Case]:
    cases = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("error") or "nvml_peak_minus_base" not in row:
            continue
        config = json.loads((CONFIGS / f"{row['config']}.json").read_text())
        arch = from_hf_config(config, row["config"])
        shape = {"image_size": row["seq"]} if arch.kind in ("vit", "cnn") else {"seq": row["seq"]}
        job = JobSpec(
            batch=row["batch"],
            precision=row["precision"],
            attention=row["attention"],
            grad_checkpointing=row["gc"],
            lora_rank=row["lora"] or None,
            target_seq=row.get("target"),
            quantize=row.get("quantize"),
            **shape,
        )
        label = f"{row['config']} bs{row['batch']} {row['seq']} {row['precision']}"
        label += " gc" * row["gc"] + (f" lora{row['lora']}" if row["lora"] else "")
        label += f" {row['quantize']}" if row.get("quantize") else ""
        cases.append(
            Case(
                label,
                f"{path.name} ({row['gpu']}, torch {row['torch']})",
                DEFAULT_STACK,
                "nvidia-smi",
                row["nvml_peak_minus_base"],
                estimate_memory(arch, job),
                None,
                row["max_allocated"],
                row["nvml_peak_minus_base"] - row["max_reserved"],
            )
        )
    return cases


def load_cases() -> list[Case]:
    cases = _published(PEAKS)
    for path in sorted(DATA.glob("h200_*.jsonl")):
        cases += _measured_jobs(path)
    return cases


@dataclass
class Constants:
    fraction: dict[str, float]  # per stack: reserve per allocated byte
    context: dict[str, float]  # per stack: measured context (bytes), where cases measure it


def fit(cases: list[Case]) -> Constants:
    """Per stack: the context as the mean measured one (real-GPU jobs), and the reserve
    fraction by least squares of (measured - allocated - context) against the allocated peak,
    raised where needed so that no case is more than 5 % under."""
    fraction: dict[str, float] = {}
    context: dict[str, float] = {}
    for stack in {c.stack for c in cases}:
        own = [c for c in cases if c.stack == stack]
        seen = [c.measured_context for c in own if c.measured_context is not None]
        if seen:
            context[stack] = sum(seen) / len(seen)
        num = den = floor = 0.0
        for c in (c for c in own if c.sees_reserve):
            a = c.memory.allocated_bytes
            ctx = _context(c, context) if c.metric == "nvidia-smi" else 0.0
            num += a * (c.measured - a - ctx)
            den += a * a
            floor = max(floor, ((1 + TARGET_UNDER) * c.measured - a - ctx) / a)
        fraction[stack] = round(
            max(num / den if den else runtime_stack(stack).reserve_fraction, floor, 0.0), 3
        )
    return Constants(fraction, context)


def _context(case: Case, context: dict[str, float]) -> float:
    if case.context is not None:
        return case.context
    return context.get(case.stack, runtime_stack(case.stack).context_gib * GIB)


def predict(case: Case, constants: Constants) -> float:
    allocated = case.memory.allocated_bytes
    if not case.sees_reserve:
        return allocated
    reserved = allocated * (1 + constants.fraction.get(case.stack, 0.0))
    return reserved + (_context(case, constants.context) if case.metric == "nvidia-smi" else 0)


def shipped() -> Constants:
    from orchestrator.sizing.runtime_stack import STACKS

    return Constants(
        {n: s.reserve_fraction for n, s in STACKS.items()},
        {n: s.context_gib * GIB for n, s in STACKS.items()},
    )


def rows(cases: list[Case]) -> list[dict[str, Any]]:
    ship = shipped()
    out = []
    for i, case in enumerate(cases):
        loo = fit(cases[:i] + cases[i + 1 :])
        est, loo_est = predict(case, ship), predict(case, loo)
        row = {
            "label": case.label,
            "stack": case.stack,
            "metric": case.metric,
            "peak_phase": case.memory.peak_phase,
            "measured_gib": case.measured / GIB,
            "estimate_gib": est / GIB,
            "error": est / case.measured - 1,
            "loo_error": loo_est / case.measured - 1,
            "loo_reserve_fraction": loo.fraction.get(case.stack),
            "source": case.source,
        }
        if case.measured_allocated:
            row["allocated_error"] = case.memory.allocated_bytes / case.measured_allocated - 1
        out.append(row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cases = load_cases()
    table = rows(cases)
    fitted = fit(cases)
    if args.json:
        print(
            json.dumps(
                {
                    "fitted": fitted.fraction,
                    "fitted_context_gib": {k: v / GIB for k, v in fitted.context.items()},
                    "shipped": shipped().fraction,
                    "cases": table,
                    "contexts": context_rows(tomllib.loads(PEAKS.read_text()).get("context", [])),
                },
                indent=2,
            )
        )
        return
    print(
        f"{'case':44} {'stack':15} {'metric':20} {'phase':9} {'measured':>8} {'estimate':>8} "
        f"{'error':>6} {'LOO err':>7} {'alloc err':>9}"
    )
    for r in table:
        alloc = f"{r['allocated_error']:+9.1%}" if "allocated_error" in r else f"{'-':>9}"
        print(
            f"{r['label'][:44]:44} {r['stack']:15} {r['metric']:20} {r['peak_phase']:9} "
            f"{r['measured_gib']:8.2f} {r['estimate_gib']:8.2f} {r['error']:+6.1%} "
            f"{r['loo_error']:+7.1%} {alloc}"
        )
    print(
        f"\n{len(table)} measured peaks (GiB). Reserve fraction shipped "
        f"{shipped().fraction}, refit on all cases {fitted.fraction}; measured context "
        f"{ {k: round(v / GIB, 3) for k, v in fitted.context.items()} } GiB"
    )
    for stack in sorted({r["stack"] for r in table}):
        own = [r for r in table if r["stack"] == stack]
        err = [r["error"] for r in own]
        loo = [r["loo_error"] for r in own]
        print(
            f"{stack}: shipped {min(err):+.1%} .. {max(err):+.1%}; leave-one-out "
            f"{min(loo):+.1%} .. {max(loo):+.1%} (target {TARGET_UNDER:+.0%} .. "
            f"{TARGET_OVER:+.0%})"
        )
    print_contexts(tomllib.loads(PEAKS.read_text()).get("context", []))


def context_rows(contexts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each published bare-context figure beside the model's context for its loading mode."""
    rows = []
    for ctx in contexts:
        measured = ctx["value"] * UNITS[ctx["unit"]] / GIB
        model = overhead.CONTEXT_LAZY_GIB if ctx["lazy"] else overhead.CONTEXT_EAGER_GIB
        rows.append(
            {
                "label": ctx["label"],
                "loading": "lazy" if ctx["lazy"] else "eager",
                "cuda": ctx.get("cuda", ""),
                "approx": bool(ctx.get("approx", False)),
                "measured_gib": measured,
                "model_gib": model,
                "difference_gib": model - measured,
                "url": ctx["url"],
                "date": ctx["date"],
            }
        )
    return rows


def print_contexts(contexts: list[dict[str, Any]]) -> None:
    rows = context_rows(contexts)
    print(
        "\nbare CUDA context (no training): published figure vs the model's context "
        "(lazy loading, CUDA >= 11.7 and driver >= 515: "
        f"{overhead.CONTEXT_LAZY_GIB:.2f} GiB; eager: {overhead.CONTEXT_EAGER_GIB:.2f} GiB)"
    )
    print(f"  {'case':58} {'load':5} {'cuda':5} {'measured':>8} {'model':>6} {'model-meas':>10}")
    for r in rows:
        mark = "~" if r["approx"] else " "
        print(
            f"  {r['label']:58} {r['loading']:5} {r['cuda'] or '-':5} "
            f"{mark}{r['measured_gib']:7.2f} {r['model_gib']:6.2f} "
            f"{r['difference_gib']:+10.2f}  ({r['date']})"
        )
    for loading in ("lazy", "eager"):
        seen = [r["measured_gib"] for r in rows if r["loading"] == loading]
        if seen:
            model = rows[[r["loading"] for r in rows].index(loading)]["model_gib"]
            print(
                f"  {loading}: {len(seen)} figures, {min(seen):.2f}-{max(seen):.2f} GiB; "
                f"model {model:.2f} GiB (GiB; ~ = a rounded figure from the source)"
            )


if __name__ == "__main__":
    main()
