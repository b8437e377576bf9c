"""Input decoding as a throughput ceiling for vision training.

A vision job reads JPEGs: each sample is decoded and augmented (random-resized crop, flip,
normalise) on the box's CPUs by the DataLoader workers before the GPU sees it. On a small box
the CPUs, not the GPUs, set the pace: a 4-vCPU g5.xlarge cannot feed its A10G at the ~550
images/s the throughput model gives it for ResNet-50 in AMP.

Model: images/s <= DECODE_PER_VCPU * (vCPUs - RESERVED_VCPUS). One vCPU is left to the
training process itself (Python step loop, CUDA launches, the loader's main process).

DECODE_PER_VCPU is 100 images/s. Public figures: "a single core decodes 50-200 images per second
depending on resolution" (https://www.systemoverflow.com/learn/ml-cv-systems/image-preprocessing/production-data-pipeline-design-and-throughput,
read 2026-12-03); an EC2 vCPU is one hyperthread, about half a core, and PIL decode plus
RandomResizedCrop at ImageNet resolution sits in that range's middle; NVIDIA's DALI case study
(https://developer.nvidia.com/blog/case-study-resnet50-dali/) shows the same CPU-bound ResNet-50
pipeline on a DGX-2, where GPU-side decoding lifts it. This is an order-of-magnitude model, not
a measurement of ours: a user's measured `--throughput GPU=...` replaces it, and GPU decoding
(DALI, nvJPEG) or pre-decoded data lifts the ceiling.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.sizing.architectures import Architecture

DECODE_PER_VCPU = 100.0  # images/s per vCPU, JPEG decode + standard augmentation
RESERVED_VCPUS = 1


def decodes_images(arch: Architecture) -> bool:
    """Whether a model of this architecture kind trains on decoded images."""
    return arch.traits.image_input


def decode_ceiling(vcpus: int) -> float:
    """Images/s the box's CPUs can decode and augment."""
    return DECODE_PER_VCPU * max(1, vcpus - RESERVED_VCPUS)
