"""The oldest NVIDIA driver that can run a GPU, and the CUDA a box's image needs.

A box whose nvidia-smi answers can still be useless: driver 390 on an A10G lists the card (as
the box's nvidia-smi says) but cannot run CUDA 11 code on it at all. Two minimums apply:

  - the GPU's architecture: a CUDA release first supports it, and that release's toolkit
    driver is the first driver that does ("CUDA Toolkit and Corresponding Driver Versions",
    Table 3 of the CUDA Toolkit release notes,
    https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html, read 2026-12-03:
    CUDA 9.0 >= 384.81, 10.0 >= 410.48, 11.0.2 GA >= 450.51.05, 11.1 GA >= 455.23,
    11.8 GA >= 520.61.05, 12.8 GA >= 570.26);
  - the CUDA major version the image's software was built with, under minor version
    compatibility ("CUDA Minor Version Compatibility",
    https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html, read
    2026-12-03: CUDA 11.x >= 450.80.02, 12.x >= 525, 13.x >= 580).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Version = tuple[int, ...]

# architecture (gpus.toml `architecture`) -> (first CUDA release, its toolkit driver)
ARCHITECTURE_MINIMUM: dict[str, tuple[str, Version]] = {
    "Volta": ("9.0", (384, 81)),
    "Turing": ("10.0", (410, 48)),
    "Ampere": ("11.0", (450, 51, 5)),  # GA100 (A100)
    "Ada Lovelace": ("11.8", (520, 61, 5)),
    "Hopper": ("11.8", (520, 61, 5)),
    "Blackwell": ("12.8", (570, 26)),
}
# GPUs whose chip came later than their architecture's first one: GA102 (sm_86) needs 11.1.
GPU_MINIMUM: dict[str, tuple[str, Version]] = {
    "A10": ("11.1", (455, 23)),
    "A10G": ("11.1", (455, 23)),
}
# CUDA major version -> oldest driver running it under minor version compatibility.
CUDA_MAJOR_MINIMUM: dict[int, Version] = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580,)}


def parse_version(text: str) -> Version | None:
    """ "570.133.20" -> (570, 133, 20); None for anything else."""
    if not re.fullmatch(r"\d{1,4}(\.\d{1,4}){0,3}", text.strip()):
        return None
    return tuple(int(part) for part in text.strip().split("."))


def show(version: Version) -> str:
    return ".".join(str(p) if i == 0 else f"{p:02d}" for i, p in enumerate(version))


@dataclass(frozen=True, slots=True)
class Requirement:
    version: Version
    reason: str


def requirements(gpu: str | None, architecture: str | None, cuda: str | None) -> list[Requirement]:
    """What the driver must be at least, and why, for a catalog GPU and an image's CUDA."""
    needs: list[Requirement] = []
    first = GPU_MINIMUM.get(gpu or "") or ARCHITECTURE_MINIMUM.get(architecture or "")
    if first:
        release, version = first
        what = gpu or architecture
        needs.append(
            Requirement(version, f"{what} needs CUDA {release}, driver >= {show(version)}")
        )
    if cuda:
        major = re.match(r"(\d+)", cuda)
        minimum = CUDA_MAJOR_MINIMUM.get(int(major.group(1))) if major else None
        if minimum:
            needs.append(
                Requirement(minimum, f"the image's CUDA {cuda} needs driver >= {show(minimum)}")
            )
    return needs
