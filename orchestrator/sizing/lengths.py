"""The sequence length each transformer stack of a model runs at, per kind of model: one table
(kind -> formula) that the FLOPs, activation and step-phase formulas share."""

from __future__ import annotations

import math
from collections.abc import Callable

from orchestrator.sizing.architectures import Architecture
from orchestrator.sizing.job import JobSpec

Rounding = Callable[[float], int]


def _text(arch: Architecture, job: JobSpec, rounding: Rounding) -> list[int]:
    return [job.seq]


def _patches(arch: Architecture, job: JobSpec, rounding: Rounding) -> list[int]:
    """ViT: image patches (+ CLS)."""
    return [arch.vision_tokens(job.image_size or arch.image_size)]


def _image_then_text(arch: Architecture, job: JobSpec, rounding: Rounding) -> list[int]:
    """CLIP / SigLIP: the image tower's patches, then the text tower's tokens."""
    return [arch.vision_tokens(job.image_size or arch.image_size), job.seq]


def _stages(arch: Architecture, job: JobSpec, rounding: Rounding) -> list[int]:
    """Swin: one stack per stage, each merging 2 x 2 patches of the one before."""
    res = (job.image_size or arch.image_size) // arch.patch_size
    return [rounding(res / 2**i) ** 2 for i in range(len(arch.stacks))]


def _source_target(arch: Architecture, job: JobSpec, rounding: Rounding) -> list[int]:
    """Encoder-decoders: the source (Whisper: a fixed number of frames), then the target."""
    return [arch.source_length or job.seq, job.target_seq or job.seq]


_LENGTHS: dict[str, Callable[[Architecture, JobSpec, Rounding], list[int]]] = {
    "vit": _patches,
    "dual-encoder": _image_then_text,
    "swin": _stages,
    "encoder-decoder": _source_target,
}


def stack_lengths(arch: Architecture, job: JobSpec, rounding: Rounding = math.ceil) -> list[int]:
    """The tokens per sample of each stack in `arch.stacks` (encoders and decoders: --seq).
    `rounding` rounds a Swin stage's side (HF pads odd sides: ceil)."""
    return _LENGTHS.get(arch.kind, _text)(arch, job, rounding)
