"""What a plan assumed, stated once for the table's header and the plan's JSON: the job's
shape as planned (image side for vision models, sequence lengths otherwise), its length and
where that came from, the set-up time each box is charged, and the dates of the prices."""

from __future__ import annotations

from typing import Any

from orchestrator.plan import Candidate
from orchestrator.sizing.job import JobSpec


def planned_shape(arch: Any, job: JobSpec) -> dict[str, int]:
    """The input size the estimate used: {"image_size": 224} for vision models (the config's
    own unless --image-size), else {"seq": 512} (and "target_seq" for encoder-decoders)."""
    if arch.traits.image_input:
        return {"image_size": int(job.image_size or arch.image_size)}
    shape = {"seq": job.seq}
    if arch.traits.encoder_decoder:
        shape["target_seq"] = job.target_seq or job.seq
    return shape


def samples_basis(job: JobSpec, assumed: bool) -> str:
    if assumed:
        return "assumed (no --samples or --epochs/--dataset-size)"
    if job.samples is not None:
        return "--samples"
    return "--epochs x --dataset-size"


def price_dates(candidates: list[Candidate]) -> dict[str, str]:
    """cloud -> the oldest date its shown prices were read (several: "oldest..newest")."""
    dates: dict[str, set[str]] = {}
    for c in candidates:
        if c.price_date:
            dates.setdefault(c.cloud, set()).add(c.price_date)
    return {
        cloud: min(ds) if len(ds) == 1 else f"{min(ds)}..{max(ds)}"
        for cloud, ds in sorted(dates.items())
    }


def plan_assumptions(
    job: JobSpec,
    samples: int,
    assumed: bool,
    shape: dict[str, int],
    setup_hours: float,
    candidates: list[Candidate],
) -> dict[str, Any]:
    """The plan JSON's "assumptions": everything the figures rest on that the user did not
    say, or said in another form."""
    return {
        "samples": samples,
        "samples_assumed": assumed,
        "samples_basis": samples_basis(job, assumed),
        "shape": dict(shape),
        "setup_hours": round(setup_hours, 4),
        "price_dates": price_dates(candidates),
    }
