"""Estimated vs published measured peak GPU memory of real training runs.

Reads benchmarks/data/memory_peaks.toml (each case: source URL and date, GPU, driver, model,
batch, seq, precision, optimizer, and what was measured: nvidia-smi, max_memory_reserved or
max_memory_allocated), estimates each job with orchestrator.sizing.memory, and compares the
matching quantity:

    nvidia-smi            total (CUDA context + allocated + allocator reserve)
    max_memory_reserved   total - CUDA context
    max_memory_allocated  total - CUDA context - allocator reserve

The CUDA context of each case follows from its driver (overhead.context_for_driver), as a
box's `orch check` would give it. The one fitted constant, overhead.FRAGMENTATION (reserve
per byte of activations and transient buffers), is refitted here on the cases that see the
reserve, and its leave-one-out error is printed: each such case predicted with the constant
fitted on the others. Target (issue 10): within 10 %, never more than 5 % under.

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
DATA = ROOT / "benchmarks" / "data" / "memory_peaks.toml"

from orchestrator.catalog import find_model  # noqa: E402
from orchestrator.sizing import overhead  # noqa: E402
from orchestrator.sizing.architectures import Architecture, from_hf_config  # noqa: E402
from orchestrator.sizing.job import JobSpec  # noqa: E402
from orchestrator.sizing.memory import GIB, estimate_memory, transient_bytes  # noqa: E402

UNITS = {"B": 1, "MB": 1e6, "MiB": 1024**2, "GB": 1e9, "GiB": GIB}
JOB_KEYS = ("batch", "seq", "precision", "optimizer", "attention", "grad_checkpointing",
            "lora_rank", "lora_dropout", "gpus", "zero", "fused_ce", "activation_offload")


@dataclass
class Case:
    raw: dict[str, Any]
    arch: Architecture
    job: JobSpec
    measured: float  # bytes

    @property
    def metric(self) -> str:
        return self.raw["metric"]


def load_cases(path: Path = DATA) -> list[Case]:
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
        job = JobSpec(
            model=raw["model"],
            cuda_context_gib=ctx.gib,
            cuda_context_basis=ctx.basis,
            **{k: raw[k] for k in JOB_KEYS if k in raw},
        )
        cases.append(Case(raw, arch, job, raw["value"] * UNITS[raw["unit"]]))
    return cases


def _parts(case: Case) -> tuple[float, float, float]:
    """(total without the reserve, the reserve's base: activations + transient, context)."""
    memory = estimate_memory(case.arch, case.job)
    base = memory.activations_bytes + transient_bytes(case.arch, case.job)
    reserve = overhead.allocator_reserve_bytes(memory.activations_bytes,
                                               transient_bytes(case.arch, case.job))
    context = overhead.context_assumption(case.job).gib * GIB
    return memory.total_bytes - reserve, base, context


def predict(case: Case, fragmentation: float) -> float:
    """The estimate of the quantity the case measured, with a given fragmentation."""
    without, base, context = _parts(case)
    if case.metric == "nvidia-smi":
        return without + fragmentation * base
    if case.metric == "max_memory_reserved":
        return without - context + fragmentation * base
    return without - context


def fit(cases: list[Case]) -> float:
    """Least squares (through the origin, in bytes) of the reserve the measurements show
    against activations + transient, raised if needed so that no case is more than 5 %
    under (an underestimate is an OOM on the chosen box). Only cases whose metric includes
    the reserve take part."""
    seen = [c for c in cases if c.metric != "max_memory_allocated"]
    if not seen:
        return overhead.FRAGMENTATION
    num = den = 0.0
    floor = 0.0
    for c in seen:
        without, base, context = _parts(c)
        if c.metric == "max_memory_reserved":
            without -= context
        num += base * (c.measured - without)
        den += base * base
        if base:
            floor = max(floor, (0.95 * c.measured - without) / base)
    return round(max(num / den if den else 0.0, floor, 0.0), 3)


def error(case: Case, fragmentation: float) -> float:
    return (predict(case, fragmentation) - case.measured) / case.measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cases = load_cases()
    fitted = fit(cases)
    rows = []
    for i, case in enumerate(cases):
        sees_reserve = case.metric != "max_memory_allocated"
        loo = fit(cases[:i] + cases[i + 1 :]) if sees_reserve else fitted
        rows.append(
            {
                "label": case.raw["label"],
                "gpu": case.raw["gpu"],
                "metric": case.metric,
                "measured_gib": case.measured / GIB,
                "estimate_gib": predict(case, overhead.FRAGMENTATION) / GIB,
                "error": error(case, overhead.FRAGMENTATION),
                "loo_fragmentation": loo,
                "loo_error": error(case, loo),
                "source": case.raw["source"],
            }
        )
    if args.json:
        contexts = context_rows(tomllib.loads(DATA.read_text()).get("context", []))
        print(json.dumps({"fitted_fragmentation": fitted, "shipped": overhead.FRAGMENTATION,
                          "cases": rows, "contexts": contexts}, indent=2))
        return
    print(f"{'case':44} {'gpu':9} {'metric':20} {'measured':>8} {'estimate':>8} "
          f"{'error':>6} {'LOO err':>7}")
    for r in rows:
        print(f"{r['label']:44} {r['gpu']:9} {r['metric']:20} {r['measured_gib']:8.2f} "
              f"{r['estimate_gib']:8.2f} {r['error']:+6.1%} {r['loo_error']:+7.1%}")
    errors = [abs(r["error"]) for r in rows]
    loo = [r["loo_error"] for r in rows]
    print(f"\n{len(rows)} measured peaks (GiB). Shipped FRAGMENTATION {overhead.FRAGMENTATION}, "
          f"refit on all cases {fitted}.")
    worst = min(r["error"] for r in rows)
    print(f"shipped: max |error| {max(errors):.1%}, worst under {worst:+.1%}")
    print(f"leave-one-out: max |error| {max(abs(e) for e in loo):.1%}, worst under "
          f"{min(loo):+.1%} (target: within 10 %, never more than 5 % under)")
    print_contexts(tomllib.loads(DATA.read_text()).get("context", []))

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
    print("\nbare CUDA context (no training): published figure vs the model's context "
          "(lazy loading, CUDA >= 11.7 and driver >= 515: "
          f"{overhead.CONTEXT_LAZY_GIB:.2f} GiB; eager: {overhead.CONTEXT_EAGER_GIB:.2f} GiB)")
    print(f"  {'case':58} {'load':5} {'cuda':5} {'measured':>8} {'model':>6} {'model-meas':>10}")
    for r in rows:
        mark = "~" if r["approx"] else " "
        print(f"  {r['label']:58} {r['loading']:5} {r['cuda'] or '-':5} "
              f"{mark}{r['measured_gib']:7.2f} {r['model_gib']:6.2f} "
              f"{r['difference_gib']:+10.2f}  ({r['date']})")
    for loading in ("lazy", "eager"):
        seen = [r["measured_gib"] for r in rows if r["loading"] == loading]
        if seen:
            model = rows[[r["loading"] for r in rows].index(loading)]["model_gib"]
            print(f"  {loading}: {len(seen)} figures, {min(seen):.2f}-{max(seen):.2f} GiB; "
                  f"model {model:.2f} GiB (GiB; ~ = a rounded figure from the source)")


if __name__ == "__main__":
    main()
