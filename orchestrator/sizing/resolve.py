"""JobSpec -> (Architecture, warnings): find the model and check the job's shape against it.

A model comes from exactly one source: a catalog name (`model`), a Hugging Face config.json
(`hf_config`), or a parameter count in millions (`params_m`, a plain GPT-style guess).

Sequence length beyond the model's positions: models with learned absolute position
embeddings (BERT family, GPT-2, OPT) cannot run it at all, so that is an error; models with
rotary or relative positions (LLaMA family, NeoX, T5, DeBERTa) can, so that is a warning
that the length exceeds what the model was trained on.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path

from orchestrator.errors import UsageError
from orchestrator.sizing.activations import vocab_loss_bytes
from orchestrator.sizing.architectures import (
    Architecture,
    ConfigError,
    from_hf_config,
    gpt_from_parameters,
)
from orchestrator.sizing.job import (
    ATTENTIONS,
    OPTIMIZERS,
    PRECISIONS,
    QUANTIZE,
    STACKS,
    ZERO_STAGES,
    JobSpec,
)

MAX_SEQ = 1_048_576
MAX_BATCH = 1_000_000
MAX_IMAGE = 16_384
MAX_GPUS = 65_536
MAX_LORA_RANK = 65_536
MAX_GRAD_ACCUM = 1_000_000
DEFAULT_ATTENTION = JobSpec().attention
MIN_PARAMS_M = 1.0
MAX_PARAMS_M = 10_000_000.0  # 10 T parameters


def _choice(value: str, allowed: tuple[str, ...], option: str) -> None:
    if value not in allowed:
        raise UsageError(f"{option} must be one of {', '.join(allowed)}, got {value!r}")


def _bounded(value: int | None, option: str, low: int, high: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{option} must be an integer, got {value!r}")
    if value < low:
        raise UsageError(f"{option} must be at least {low}, got {value}")
    if value > high:
        raise UsageError(f"{option} {value:,} is beyond any real job (at most {high:,})")


def validate_job(job: JobSpec) -> list[str]:
    """Check options that do not depend on the model; return warnings."""
    _bounded(job.batch, "--batch", 1, MAX_BATCH)
    _bounded(job.seq, "--seq", 1, MAX_SEQ)
    _bounded(job.target_seq, "--target-seq", 1, MAX_SEQ)
    _bounded(job.image_size, "--image-size", 1, MAX_IMAGE)
    _bounded(job.gpus, "--gpus", 1, MAX_GPUS)
    _bounded(job.lora_rank, "--lora-rank", 1, MAX_LORA_RANK)
    _choice(job.precision, PRECISIONS, "--precision")
    _choice(job.optimizer, OPTIMIZERS, "--optimizer")
    _choice(job.attention, ATTENTIONS, "--attention")
    _choice(job.stack, STACKS, "--stack")
    if job.quantize is not None:
        _choice(job.quantize, QUANTIZE, "--quantize")
        if not job.lora_rank:
            raise UsageError("--quantize needs --lora-rank: quantised base weights stay frozen")
    _bounded(job.grad_accum, "--grad-accum", 1, MAX_GRAD_ACCUM)
    if not 0 <= job.lora_dropout < 1:
        raise UsageError(f"--lora-dropout must be in [0, 1), got {job.lora_dropout!r}")
    if job.cuda_context_gib is not None and not 0 <= job.cuda_context_gib <= 16:
        raise UsageError("--cuda-context-gib must be between 0 and 16 GiB")
    if job.zero not in ZERO_STAGES:
        raise UsageError(f"--zero must be one of 0, 1, 2, 3, got {job.zero!r}")
    warnings = []
    if job.quantize:
        warnings.append(
            "--quantize: sized with gradient checkpointing on, as peft's "
            "prepare_model_for_kbit_training (the QLoRA recipe) turns it on by default"
        )
    if job.zero and job.gpus == 1:
        warnings.append(f"--zero {job.zero} with one GPU shards nothing")
    return warnings


def _sources(job: JobSpec) -> list[str]:
    given = []
    if job.model is not None:
        given.append("--model")
    if job.hf_config is not None:
        given.append("--hf-config")
    if job.params_m is not None:
        given.append("--params-m")
    return given


def read_hf_config(path: str, job: JobSpec | None = None) -> Architecture:
    """Architecture from a config.json file; UsageError naming the file and the problem."""
    file = Path(path)
    if file.is_dir() and (file / "config.json").is_file():
        file = file / "config.json"  # a downloaded model directory
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, expected a config.json file") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UsageError(f"{path}: cannot read: {reason}") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    name = ""
    if isinstance(config, dict) and not config.get("_name_or_path"):
        name = file.parent.name if file.name == "config.json" else file.stem
    return _from_config(config, name, job or JobSpec(), path)


def _catalog_architecture(name: str, job: JobSpec) -> Architecture:
    from orchestrator.catalog import find_model  # the catalog is only read when named

    entry = find_model(name)
    return _from_config(entry.config, entry.name, job, f"catalog model {entry.name}")


def _from_config(config: dict, name: str, job: JobSpec, where: str) -> Architecture:
    """The analytic model where it knows the family (activations traced on --trace); a
    meta-device trace where it does not and the `trace` extra is installed."""
    try:
        arch = from_hf_config(config, name)
    except ConfigError as exc:
        if not str(exc).startswith("unsupported model_type"):
            raise UsageError(f"{where}: {exc}") from None
        from orchestrator.sizing import trace  # torch itself is imported only by a trace

        if not trace.available():
            raise UsageError(
                f"{where}: {exc}; {trace.EXTRA_HINT} to trace any transformers model"
            ) from None
        return trace.traced_architecture(config, name, job)
    if job.trace:
        from orchestrator.sizing import trace

        return trace.traced_architecture(config, name, job, analytic=arch)
    return arch


def _check_shape(arch: Architecture, job: JobSpec) -> list[str]:
    warnings: list[str] = []
    if arch.traits.image_input:
        image = job.image_size or arch.image_size
        if arch.traits.patch_tokens:
            if image < arch.patch_size:
                raise UsageError(
                    f"--image-size {image} is smaller than the {arch.patch_size}-pixel patches"
                )
            if image != arch.image_size:
                warnings.append(
                    f"{arch.name} was trained at {arch.image_size}px; at {image}px its "
                    "position embeddings are interpolated"
                )
        elif image < 32:
            raise UsageError(f"--image-size {image} is too small for {arch.name} (at least 32)")
        return warnings
    if job.image_size is not None:
        warnings.append(f"--image-size is ignored: {arch.name} is not a vision model")
    lengths = [("--seq", job.seq)]
    if arch.traits.encoder_decoder and job.target_seq is not None:
        lengths.append(("--target-seq", job.target_seq))
    elif job.target_seq is not None:
        warnings.append(f"--target-seq is ignored: {arch.name} is not an encoder-decoder")
    limit = arch.max_positions
    if limit and not arch.synthetic:
        for option, value in lengths:
            if value <= limit:
                continue
            if arch.absolute_positions:
                raise UsageError(
                    f"{option} {value} is longer than {arch.name}'s {limit} learned positions",
                    hint=f"use --seq {limit} or less",
                )
            warnings.append(
                f"{option} {value} is beyond the {limit} positions {arch.name} was trained on"
            )
    return warnings


def ignored_options(arch: Architecture, job: JobSpec, given: Collection[str] = ()) -> list[str]:
    """One warning for each option that changes nothing for this model and job. Not an error:
    a job file may set them for every model it is used with. `given`: the options the user
    set (command line or job file); --attention always has a value, so on a CNN it warns when
    given or when it is not the default."""
    warnings = []
    if job.lora_dropout > 0 and not job.lora_rank:
        warnings.append(
            f"--lora-dropout {job.lora_dropout:g} is ignored: it applies to LoRA adapters"
            " and no --lora-rank is given"
        )
    if job.fused_ce and vocab_loss_bytes(arch, job) == 0:
        warnings.append(f"--fused-ce is ignored: {arch.name} has no vocabulary cross-entropy loss")
    attention_set = "attention" in given or job.attention != DEFAULT_ATTENTION
    if attention_set and not arch.traits.transformer:
        warnings.append(
            f"--attention {job.attention} is ignored: {arch.name} is a CNN (no attention)"
        )
    if job.activation_offload and not arch.traits.transformer:
        # activations._offload_savings counts transformer layers only: a CNN saves nothing.
        warnings.append(
            f"--activation-offload is not modelled for CNNs: {arch.name} is estimated without it"
        )
    return warnings


def resolve_architecture(
    job: JobSpec, given: Collection[str] = ()
) -> tuple[Architecture, list[str]]:
    """The job's model as an Architecture, plus warnings; UsageError for bad input. `given`:
    the options the user set (see `ignored_options`)."""
    sources = _sources(job)
    if not sources:
        raise UsageError(
            "no model given", hint="use --model NAME, --hf-config FILE or --params-m N"
        )
    if len(sources) > 1:
        raise UsageError(f"give only one model source, not {' and '.join(sources)}")
    warnings = validate_job(job)
    if job.model is not None:
        arch = _catalog_architecture(job.model, job)
    elif job.hf_config is not None:
        arch = read_hf_config(job.hf_config, job)
    else:
        if job.trace:
            raise UsageError("--trace needs a model config: use --model or --hf-config")
        params_m = job.params_m
        if isinstance(params_m, bool) or not isinstance(params_m, int | float):
            raise UsageError(f"--params-m must be a number, got {params_m!r}")
        if not MIN_PARAMS_M <= params_m <= MAX_PARAMS_M:
            raise UsageError(
                f"--params-m {params_m:g} is out of range ({MIN_PARAMS_M:g} to {MAX_PARAMS_M:,.0f})"
            )
        arch = gpt_from_parameters(params_m * 1e6)
        st = arch.stacks[0]
        warnings.append(
            f"--params-m {params_m:g}: no architecture given, assuming a GPT-2-style decoder "
            f"with {st.layers} layers, hidden {st.hidden}, {st.heads} heads, vocab "
            f"{arch.head.vocab} ({arch.parameters / 1e6:,.1f}M parameters); name the model "
            "for a real estimate"
        )
    warnings.extend(arch.notes)
    warnings.extend(_check_shape(arch, job))
    if job.lora_rank and not arch.traits.transformer:
        raise UsageError(f"--lora-rank needs a transformer; {arch.name} is a CNN")
    if job.attention == "sdpa" and not arch.sdpa and arch.traits.transformer:
        warnings.append(
            f"{arch.family} has no SDPA attention in transformers: estimated with eager attention"
        )
    warnings.extend(ignored_options(arch, job, given))
    return arch, warnings
