"""Aliyun images: which image a catalog instance boots (offline; image_lookup.py finds one by
name pattern through DescribeImages).

The public Ubuntu 22.04 system image (owners "system"); scripts/install_drivers.sh installs the
NVIDIA driver and CUDA at first boot.
"""

from __future__ import annotations

from typing import Any

from orchestrator.clouds.base import ImageChoice

UBUNTU_REGEX = "^ubuntu_22_04_x64"


def image_for(instance: Any) -> ImageChoice:
    return ImageChoice({"name_regex": UBUNTU_REGEX, "owners": "system"}, "root", 60)
