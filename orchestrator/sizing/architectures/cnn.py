"""The CNN shapes, ResNet stages and ConvNeXt, that an `Architecture` holds
(shapes.Architecture.resnet, .convnext)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ResNetStage:
    """One ResNet stage: `depth` blocks from `in_channels` to `out_channels`."""

    depth: int
    in_channels: int
    out_channels: int
    stride: int


@dataclass(frozen=True, slots=True)
class ResNet:
    """A ResNet as Hugging Face's ResNetConfig describes it: stem, stages and classifier."""

    channels: int
    embedding_size: int
    layer_type: str  # "bottleneck" | "basic"
    stages: tuple[ResNetStage, ...]
    labels: int


@dataclass(frozen=True, slots=True)
class ConvNeXt:
    """ConvNeXt: a 4x4 stride-4 patch stem, stages of blocks (7x7 depthwise conv, LayerNorm,
    4x MLP as 1x1 linears, layer scale) with LayerNorm + 2x2 stride-2 convs between them."""

    channels: int
    patch: int
    widths: tuple[int, ...]
    depths: tuple[int, ...]
    labels: int
