"""`orch estimate`: per-GPU training memory of a job, as a table or one JSON object.

JSON contract (read by other tools; keep it stable):
{"model": str, "job": {JobSpec fields}, "parameters": int, "trainable_parameters": int,
 "memory": {"parameters_bytes": int, "gradients_bytes": int, "optimizer_bytes": int,
            "activations_bytes": int, "overhead_bytes": int, "total_bytes": int,
            "peak_bytes": int, "peak_phase": "forward" | "loss" | "backward" | "optimizer",
            "phases": {phase: int}},
 "activations_source": "analytic" | "trace",
 "assumptions": {"cuda_context_gib": float, "cuda_context_basis": str, "stack": str,
                 "stack_basis": str, "allocator_reserve_fraction": float,
                 "optimizer_implementation": str, "gradients_persist_between_steps": bool,
                 "fused_cross_entropy": bool, "activation_offload": bool},
 "warnings": [str, ...]}
All byte counts are for ONE GPU of the job's data-parallel group. The first four are the sizes
of each kind of tensor; total = peak_bytes (the step's largest phase, allocated) + overhead
(CUDA context, allocator reserve, communication buffers): docs/memory-model.md, "Peak".
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.commands.job_options import SHAPE_OPTIONS, job_from_options
from orchestrator.commands.option_spec import CommandSpec, Option
from orchestrator.sizing.architectures import Architecture
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.memory import GIB, MemoryBreakdown, estimate_memory
from orchestrator.sizing.overhead import describe as describe_overhead
from orchestrator.sizing.resolve import resolve_architecture
from orchestrator.textui import counted, table

PARTS = (
    ("parameters", "parameters_bytes"),
    ("gradients", "gradients_bytes"),
    ("optimizer states", "optimizer_bytes"),
    ("activations", "activations_bytes"),
)


def estimate_result(
    arch: Architecture, job: JobSpec, memory: MemoryBreakdown, warnings: list[str]
) -> dict[str, Any]:
    data = memory.to_dict()
    return {
        "model": arch.name,
        "job": job.to_dict(),
        "parameters": data["parameters"],
        "trainable_parameters": data["trainable_parameters"],
        "memory": data["memory"],
        "activations_source": "trace" if _traced(arch) else "analytic",
        "assumptions": data["assumptions"],
        "warnings": list(warnings),
    }


def _traced(arch: Architecture) -> bool:
    return arch.traced  # a sizing.trace.TracedArchitecture


def activation_source(arch: Architecture, job: JobSpec) -> str:
    if _traced(arch):
        return arch.activation_source(job)  # type: ignore[attr-defined]
    return "analytic (sizing/memory.py, per-layer formulas)"


def _count(n: int) -> str:
    if n >= 1e9:
        return f"{n / 1e9:,.2f}B"
    return f"{n / 1e6:,.1f}M"


def render(arch: Architecture, job: JobSpec, memory: MemoryBreakdown, warnings: list[str]) -> str:
    shape = (
        f"image {job.image_size or arch.image_size}px"
        if arch.traits.image_input
        else (f"seq {job.seq}" + (f"->{job.target_seq}" if job.target_seq else ""))
    )
    trainable = (
        f", {_count(memory.trainable_parameters)} trainable (LoRA r={job.lora_rank})"
        if job.lora_rank
        else ""
    )
    options = [job.precision, job.optimizer]
    if arch.traits.transformer:
        options.append(f"{job.attention} attention")
    if job.grad_checkpointing:
        options.append("grad checkpointing")
    header = (
        f"{arch.name}: {_count(memory.parameters)} parameters{trainable}; "
        f"batch {job.batch}/GPU, {shape}, {', '.join(options)}; "
        f"{counted(job.gpus, 'GPU')}, ZeRO {job.zero}"
    )
    values = memory.to_dict()["memory"]
    rows = [[label, f"{values[key] / GIB:,.2f}"] for label, key in PARTS]
    phases = ", ".join(f"{name} {size / GIB:,.2f}" for name, size in values["phases"].items())
    rows += [
        [f"step peak ({memory.peak_phase})", f"{memory.peak_bytes / GIB:,.2f}"],
        ["overhead", f"{memory.overhead_bytes / GIB:,.2f}"],
        ["total", f"{memory.total_bytes / GIB:,.2f}"],
    ]
    body = table(["per GPU", "GiB"], rows, right={1})
    body += f"\nphases (allocated GiB): {phases}; total = step peak + overhead"
    lines = [header, "", body, f"activations: {activation_source(arch, job)}"]
    lines += ["", describe_overhead(job)]
    lines += [f"warning: {w}" for w in warnings]
    return "\n".join(lines)


HELP = """Estimate the per-GPU memory of a training job: weights, gradients, optimizer states,
    activations and overhead.

    \b
    Examples:
      orch estimate --model bert-large --batch 32 --seq 128
      orch estimate --hf-config config.json --precision bf16 --zero 3 --gpus 8
      orch estimate --params-m 350 --json
    """

OPTIONS = (*SHAPE_OPTIONS, Option(("--json",), "as_json", "flag", help="Print one JSON object."))


def run_estimate(given: frozenset[str], as_json: bool, **job_kwargs: Any) -> None:
    job = job_from_options(**job_kwargs)
    arch, warnings = resolve_architecture(job, given)
    memory = estimate_memory(arch, job)
    if as_json:
        print(json.dumps(estimate_result(arch, job, memory, warnings)))
        return
    print(render(arch, job, memory, warnings))


# A click command built from these declarations (commands/option_spec.py).
COMMAND = CommandSpec("estimate", HELP, OPTIONS, run_estimate)
