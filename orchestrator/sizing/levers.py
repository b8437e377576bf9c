""" "Cheaper if": what each memory lever would change when a job fits only on a costly box, or
fits nowhere.

A lever is a change to the job that lowers its memory per GPU: gradient checkpointing, fused
cross-entropy, ZeRO-3 (on multi-GPU boxes), LoRA, 4-bit base weights, or a smaller micro-batch
with gradient accumulation (the same effective batch). Each is planned again with the same
selection code (`rank`), so its winner, cost and time include what the lever costs in speed
(recompute, dequantisation, smaller matmuls, collectives). Levers are only tried when a box
ruled out by memory alone would have run the job at least `MIN_SAVING` cheaper than the winner
(`Ranking.memory_blocked_cost`), or when nothing fits: a plain plan whose winner no memory
lever can beat pays for no re-plans.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from orchestrator.errors import UsageError
from orchestrator.plan import Candidate
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.select import PlanOptions, Ranking, rank, winners

MIN_SAVING = 0.10  # a lever is shown when its winner costs at least 10 % less
LORA_RANK = 16  # the rank suggested when the job trains every weight
LM_HEADS = ("causal-lm", "seq2seq-lm", "masked-lm")  # heads whose logits fused CE avoids


@dataclass(frozen=True, slots=True)
class Lever:
    """A change to the job and the plan it gives."""

    flags: str  # exactly what to add to (or change on) the command line
    change: dict[str, Any]  # the JobSpec fields it sets
    winner: Candidate
    saving: float | None  # fraction below the current winner's cost; None when nothing fit

    def to_dict(self) -> dict[str, Any]:
        w = self.winner
        return {
            "flags": self.flags,
            "cloud": w.cloud,
            "region": w.region,
            "instance_type": w.instance_type,
            "market": w.market,
            "gpu": w.gpu,
            "gpu_count": w.gpu_count,
            "nodes": w.nodes,
            "cost": w.cost,
            "hours": w.hours,
            "saving": None if self.saving is None else round(self.saving, 3),
        }

    def describe(self) -> str:
        w = self.winner
        text = (
            f"{self.flags}: {w.label} ({w.cloud} {w.region}, {w.market}, "
            f"{w.gpu_count}x{w.gpu}) ${w.cost:,.2f} for the job in {w.hours:.1f} h"
        )
        return text if self.saving is None else f"{text}, {self.saving:.0%} less"


def candidate_levers(job: JobSpec, head: str, nothing_fits: bool) -> list[list[tuple[str, dict]]]:
    """The levers that apply to `job`, each as alternatives of (flags, change); the cheapest
    alternative of a lever stands for it (micro-batch: every halving)."""
    levers: list[list[tuple[str, dict]]] = []
    if not job.grad_checkpointing:
        levers.append([("--grad-checkpointing", {"grad_checkpointing": True})])
    if not job.fused_ce and head in LM_HEADS:
        levers.append([("--fused-ce", {"fused_ce": True})])
    if job.zero < 3:
        levers.append([("--zero 3", {"zero": 3})])
    if not job.lora_rank:
        levers.append([(f"--lora-rank {LORA_RANK}", {"lora_rank": LORA_RANK})])
    if not job.quantize:
        rank_flag = "" if job.lora_rank else f" --lora-rank {LORA_RANK}"
        # The QLoRA recipe (peft's prepare_model_for_kbit_training) checkpoints activations.
        change: dict[str, Any] = {"quantize": "4bit", "grad_checkpointing": True}
        if not job.lora_rank:
            change["lora_rank"] = LORA_RANK
        levers.append([(f"--quantize 4bit{rank_flag}", change)])
    smaller = []
    factor = 2
    while job.batch // factor >= 1 and job.batch % factor == 0:
        batch, accum = job.batch // factor, job.grad_accum * factor
        smaller.append(
            (f"--batch {batch} --grad-accum {accum}", {"batch": batch, "grad_accum": accum})
        )
        factor *= 2
    if smaller:
        levers.append(smaller)
    if nothing_fits and not job.grad_checkpointing:  # two levers together, as a last resort
        both = {"grad_checkpointing": True}
        if job.zero < 3:
            levers.append([("--zero 3 --grad-checkpointing", {"zero": 3, **both})])
        if not job.lora_rank:
            flags = f"--lora-rank {LORA_RANK} --grad-checkpointing"
            levers.append([(flags, {"lora_rank": LORA_RANK, **both})])
    return levers


def node_levers(job: JobSpec, options: PlanOptions) -> list[list[tuple[str, dict]]]:
    """More nodes (issue 24), for a plan of one node: their GPUs share ZeRO-3's shards."""
    if options.nodes != 1:
        return []
    if job.zero >= 3:
        return [[("--nodes auto", {"nodes": None})]]
    return [[("--zero 3 --nodes auto", {"zero": 3, "nodes": None})]]


def worth_trying(ranking: Ranking, options: PlanOptions) -> bool:
    """Whether a memory lever could beat the winner (or nothing fits)."""
    best = winners(ranking, options)
    if not best:
        return True
    blocked = ranking.memory_blocked_cost
    return (
        blocked is not None
        and best[0].cost is not None
        and (blocked <= best[0].cost * (1 - MIN_SAVING))
    )


def cheaper_if(job: JobSpec, options: PlanOptions, ranking: Ranking, limit: int = 2) -> list[Lever]:
    """The best `limit` levers whose winner is at least MIN_SAVING cheaper than the current
    one (any winner, when nothing fits), cheapest first, one per lever."""
    if not worth_trying(ranking, options):
        return []
    from orchestrator.sizing.resolve import resolve_architecture

    head = resolve_architecture(job)[0].head.kind
    current = winners(ranking, options)
    base = current[0].cost if current else None
    found: list[Lever] = []
    for alternatives in candidate_levers(job, head, base is None) + node_levers(job, options):
        best: Lever | None = None
        for flags, change in alternatives:
            lever = _try(job, options, flags, change, base)
            if lever is not None and (best is None or _cost(lever) < _cost(best)):
                best = lever
        if best is not None:
            found.append(best)
    found.sort(key=lambda lever: (_cost(lever), lever.winner.hours, lever.flags))
    # A dearer lever that only adds to a cheaper one's change (4-bit on top of LoRA) says
    # nothing new.
    shown: list[Lever] = []
    for lever in found:
        if not any(s.change.items() <= lever.change.items() for s in shown):
            shown.append(lever)
    return shown[:limit]


def _try(
    job: JobSpec, options: PlanOptions, flags: str, change: dict[str, Any], base: float | None
) -> Lever | None:
    fields = {k: v for k, v in change.items() if k != "nodes"}
    if "nodes" in change:  # a selection option, not a field of the job
        options = replace(options, nodes=change["nodes"])
    try:
        trial = rank(replace(job, **fields), options)
    except UsageError:
        return None  # the lever does not apply to this model (e.g. LoRA on a CNN)
    best = winners(trial, options)
    if not best or best[0].cost is None:
        return None
    cost = best[0].cost
    if base is not None and cost > base * (1 - MIN_SAVING):
        return None
    saving = None if base is None else 1 - cost / base
    return Lever(flags, dict(change), best[0], saving)


def _cost(lever: Lever) -> float:
    return lever.winner.cost or 0.0
