"""Which machine image a candidate boots, who logs in, and how big its root volume starts.

Each cloud decides for its own instances (orchestrator/clouds/<cloud>/images.py): this is the
one call selection makes, through the registry.
"""

from __future__ import annotations

from orchestrator import clouds
from orchestrator.catalog import InstanceType
from orchestrator.clouds.base import ImageChoice

__all__ = ["ImageChoice", "image_for"]


def image_for(instance: InstanceType) -> ImageChoice:
    return clouds.get(instance.cloud).image_for(instance)
