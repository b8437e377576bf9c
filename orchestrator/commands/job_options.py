"""Options shared by `orch estimate`, `orch plan`, `orch up` and `orch run`: the model and the
job's shape, declared as `Option` records (commands/option_spec.py).

`JOB_OPTIONS` are the model source, job shape, how it runs (--grad-accum, --stack) and run
length (--samples, --epochs, --dataset-size); `SHAPE_OPTIONS` leave those out (for
`orch estimate`).
`job_options` / `job_shape_options` add them to a click command.
`job_from_options(**kwargs)` turns the parsed values into a JobSpec; model-dependent checks
happen in `orchestrator.sizing.resolve.resolve_architecture`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from orchestrator.commands.option_spec import Option, apply_click_options, refuse_non_finite
from orchestrator.sizing.job import (
    ATTENTIONS,
    OPTIMIZERS,
    PRECISIONS,
    QUANTIZE,
    STACKS,
    JobSpec,
)

F = TypeVar("F", bound=Callable[..., Any])

SHAPE_OPTIONS = (
    Option(("--model",), "model", metavar="NAME", help="Catalog model name or alias."),
    Option(
        ("--hf-config",),
        "hf_config",
        metavar="FILE",
        help="A Hugging Face config.json (bert, gpt2, llama, t5, vit, resnet, ...).",
    ),
    Option(
        ("--params-m",),
        "params_m",
        "float",
        metavar="N",
        help="Only a size in millions of parameters: a GPT-style guess.",
    ),
    Option(("--batch",), "batch", "int", 8, show_default=True, help="Micro-batch per GPU."),
    Option(("--seq",), "seq", "int", 512, show_default=True, help="Sequence length."),
    Option(
        ("--target-seq",), "target_seq", "int", help="Decoder length (encoder-decoder; = --seq)."
    ),
    Option(("--image-size",), "image_size", "int", help="Image side in pixels (vision)."),
    Option(
        ("--precision",),
        "precision",
        default="amp-bf16",
        choices=PRECISIONS,
        show_default=True,
        help="amp-* keep fp32 weights and autocast; bf16 is pure bf16.",
    ),
    Option(
        ("--optimizer",),
        "optimizer",
        default="adamw",
        choices=OPTIMIZERS,
        show_default=True,
        help="States per trainable parameter: adamw/adam 2, sgd-momentum 1, sgd none, adafactor "
        "factored, adamw-8bit 2 of 1 byte (bitsandbytes).",
    ),
    Option(
        ("--grad-checkpointing",),
        "grad_checkpointing",
        "flag",
        help="Recompute activations in backward (keeps layer inputs only).",
    ),
    Option(
        ("--attention",),
        "attention",
        default="sdpa",
        choices=ATTENTIONS,
        show_default=True,
        help="sdpa (flash / memory-efficient) or eager (stores the score matrices).",
    ),
    Option(
        ("--gpus",),
        "gpus",
        "int",
        1,
        help="Data-parallel GPUs (the estimate assumes 1 when not given). plan/up: only boxes"
        " with exactly this many GPUs; not given: boxes with any GPU count.",
    ),
    Option(
        ("--zero",),
        "zero",
        "int",
        0,
        minimum=0,
        maximum=3,
        show_default=True,
        help="ZeRO stage: 1 shards optimizer states, 2 also gradients, 3 (FSDP) also weights.",
    ),
    Option(
        ("--lora-rank",), "lora_rank", "int", help="Train LoRA adapters of this rank on q and v."
    ),
    Option(
        ("--trace",),
        "trace",
        "flag",
        help="Count activations by tracing the model on the meta device (pip install "
        "'orch[trace]'); automatic for families the analytic model does not know.",
    ),
    Option(
        ("--quantize",),
        "quantize",
        choices=QUANTIZE,
        help="Frozen base weights quantised (QLoRA, with --lora-rank): 4bit NF4 or 8bit"
        " LLM.int8 (bitsandbytes).",
    ),
    # Overhead and implementation knobs (orchestrator/sizing/overhead.py).
    Option(("--lora-dropout",), "lora_dropout", "float", 0.0, help="LoRA dropout (PEFT)."),
    Option(
        ("--fused-ce",),
        "fused_ce",
        "flag",
        help="Fused/chunked cross-entropy (Liger, flash-attn): no fp32 logits kept.",
    ),
    Option(
        ("--activation-offload",),
        "activation_offload",
        "flag",
        help="Saved activations offloaded to CPU memory (save_on_cpu, torchtune offload).",
    ),
    Option(
        ("--cuda-context-gib",),
        "cuda_context_gib",
        metavar="GIB|box:NAME",
        help="CUDA context per GPU (default: the stack's measured figure, 0.75 for eager and "
        "optimised); box:NAME reads the driver that box's last `orch check` recorded.",
    ),
)

RUN_OPTIONS = (
    # Throughput only (not the memory estimate): how the job is run.
    Option(
        ("--grad-accum",),
        "grad_accum",
        "int",
        1,
        minimum=1,
        show_default=True,
        help="Micro-batches per optimizer step (gradient accumulation).",
    ),
    Option(
        ("--stack",),
        "stack",
        default="eager",
        choices=STACKS,
        show_default=True,
        help="Implementation the throughput assumes: eager (plain PyTorch, HF Trainer-style) or"
        " optimised (compiled/fused kernels, as in NVIDIA's and MosaicML's published runs).",
    ),
    Option(("--samples",), "samples", "int", minimum=1, help="Training samples in the whole job."),
    Option(
        ("--epochs",),
        "epochs",
        "float",
        minimum=0,
        minimum_open=True,
        help="Epochs over the dataset.",
    ),
    Option(
        ("--dataset-size",),
        "dataset_size",
        "int",
        minimum=1,
        help="Samples in the dataset (with --epochs).",
    ),
)

JOB_OPTIONS = SHAPE_OPTIONS + RUN_OPTIONS


def job_shape_options(func: F) -> F:
    """The model source and the job's shape, as click options."""
    return apply_click_options(func, SHAPE_OPTIONS)


def job_options(func: F) -> F:
    """The model source, the job's shape and its length (samples or epochs), as click options."""
    return apply_click_options(func, JOB_OPTIONS)


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
    "quantize",
    "grad_accum",
    "stack",
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
    refuse_non_finite(JOB_OPTIONS, kwargs)
    values = {key: kwargs[key] for key in JOB_KEYS if key in kwargs}
    if values.get("quantize"):
        # peft's prepare_model_for_kbit_training, the QLoRA recipe, turns on gradient
        # checkpointing (use_gradient_checkpointing=True by default; peft/utils/other.py).
        values["grad_checkpointing"] = True
    context = kwargs.get("cuda_context_gib")
    if context is not None:
        from orchestrator.commands.context_option import parse_context_option

        values["cuda_context_gib"], values["cuda_context_basis"] = parse_context_option(context)
    return JobSpec(**values)
