"""Click options shared by `orch estimate` and `orch plan`: the model and the job's shape.

`job_options` adds the model source, job shape and run length (--samples, --epochs,
--dataset-size); `job_shape_options` leaves the run length out (for `orch estimate`).
`job_from_options(**kwargs)` turns the parsed values into a JobSpec; model-dependent checks
happen in `orchestrator.sizing.resolve.resolve_architecture`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from orchestrator.sizing.job import ATTENTIONS, OPTIMIZERS, PRECISIONS, JobSpec

F = TypeVar("F", bound=Callable[..., Any])

_SHAPE_OPTIONS = (
    click.option("--model", "model", metavar="NAME", help="Catalog model name or alias."),
    click.option(
        "--hf-config",
        "hf_config",
        metavar="FILE",
        help="A Hugging Face config.json (bert, gpt2, llama, t5, vit, resnet, ...).",
    ),
    click.option(
        "--params-m",
        "params_m",
        type=float,
        metavar="N",
        help="Only a size in millions of parameters: a GPT-style guess.",
    ),
    click.option("--batch", type=int, default=8, show_default=True, help="Micro-batch per GPU."),
    click.option("--seq", type=int, default=512, show_default=True, help="Sequence length."),
    click.option(
        "--target-seq", "target_seq", type=int, help="Decoder length (encoder-decoder; = --seq)."
    ),
    click.option("--image-size", "image_size", type=int, help="Image side in pixels (vision)."),
    click.option(
        "--precision",
        type=click.Choice(PRECISIONS),
        default="amp-bf16",
        show_default=True,
        help="amp-* keep fp32 weights and autocast; bf16 is pure bf16.",
    ),
    click.option("--optimizer", type=click.Choice(OPTIMIZERS), default="adamw", show_default=True),
    click.option(
        "--grad-checkpointing",
        "grad_checkpointing",
        is_flag=True,
        help="Recompute activations in backward (keeps layer inputs only).",
    ),
    click.option(
        "--attention",
        type=click.Choice(ATTENTIONS),
        default="sdpa",
        show_default=True,
        help="sdpa (flash / memory-efficient) or eager (stores the score matrices).",
    ),
    click.option(
        "--gpus",
        type=int,
        default=1,
        help="Data-parallel GPUs (the estimate assumes 1 when not given). plan/up: only boxes"
        " with exactly this many GPUs; not given: boxes with any GPU count.",
    ),
    click.option(
        "--zero",
        type=click.IntRange(0, 3),
        default=0,
        show_default=True,
        help="ZeRO stage: 1 shards optimizer states, 2 also gradients, 3 (FSDP) also weights.",
    ),
    click.option(
        "--lora-rank", "lora_rank", type=int, help="Train LoRA adapters of this rank on q and v."
    ),
    click.option(
        "--trace",
        is_flag=True,
        help="Count activations by tracing the model on the meta device (pip install "
        "'orch[trace]'); automatic for families the analytic model does not know.",
    ),
    # Overhead and implementation knobs (orchestrator/sizing/overhead.py).
    click.option(
        "--lora-dropout", "lora_dropout", type=float, default=0.0, help="LoRA dropout (PEFT)."
    ),
    click.option(
        "--fused-ce",
        "fused_ce",
        is_flag=True,
        help="Fused/chunked cross-entropy (Liger, flash-attn): no fp32 logits kept.",
    ),
    click.option(
        "--activation-offload",
        "activation_offload",
        is_flag=True,
        help="Saved activations offloaded to CPU memory (save_on_cpu, torchtune offload).",
    ),
    click.option(
        "--cuda-context-gib",
        "cuda_context_gib",
        metavar="GIB|box:NAME",
        help="CUDA context per GPU (default 0.5: CUDA 12, lazy loading); box:NAME reads the "
        "driver that box's last `orch check` recorded.",
    ),
)

_RUN_OPTIONS = (
    click.option(
        "--samples", type=click.IntRange(min=1), help="Training samples in the whole job."
    ),
    click.option(
        "--epochs", type=click.FloatRange(min=0, min_open=True), help="Epochs over the dataset."
    ),
    click.option(
        "--dataset-size",
        "dataset_size",
        type=click.IntRange(min=1),
        help="Samples in the dataset (with --epochs).",
    ),
)


def _apply(func: F, options: tuple[Callable[[F], F], ...]) -> F:
    for option in reversed(options):
        func = option(func)
    return func


def job_shape_options(func: F) -> F:
    """The model source and the job's shape."""
    return _apply(func, _SHAPE_OPTIONS)


def job_options(func: F) -> F:
    """The model source, the job's shape and its length (samples or epochs)."""
    return _apply(func, _SHAPE_OPTIONS + _RUN_OPTIONS)


JOB_KEYS = (
    "model",
    "hf_config",
    "params_m",
    "batch",
    "seq",
    "target_seq",
    "image_size",
    "precision",
    "optimizer",
    "grad_checkpointing",
    "attention",
    "gpus",
    "zero",
    "lora_rank",
    "lora_dropout",
    "fused_ce",
    "activation_offload",
    "samples",
    "epochs",
    "dataset_size",
    "trace",
)


def job_from_options(**kwargs: Any) -> JobSpec:
    """A JobSpec from the values `job_options` parsed (unknown keys are ignored)."""
    values = {key: kwargs[key] for key in JOB_KEYS if key in kwargs}
    context = kwargs.get("cuda_context_gib")
    if context is not None:
        from orchestrator.commands.context_option import parse_context_option

        values["cuda_context_gib"], values["cuda_context_basis"] = parse_context_option(context)
    return JobSpec(**values)
