"""Catalog: GPUs, instance types with prices, and model architectures, loaded from TOML data files.

Public API (other modules import only these):
    load_gpus() -> dict[str, Gpu]            keyed by canonical GPU name ("A10G", "A100-80GB")
    load_instances(cloud: str | None = None) -> list[InstanceType]
    find_instance(cloud: str, name: str) -> InstanceType
    load_models() -> dict[str, ModelEntry]              keyed by canonical model name ("bert-large")
    find_model(name: str) -> ModelEntry                 accepts aliases; UsageError with close names

The throughput measurements that calibrate the throughput model are in
`orchestrator.catalog.measurements` (loaded only when calibrating).
"""

from orchestrator.catalog.loader import (
    find_instance,
    find_model,
    load_gpus,
    load_instances,
    load_models,
)
from orchestrator.catalog.schema import (
    Gpu,
    InstanceType,
    ModelEntry,
    Price,
    Source,
)

__all__ = [
    "Gpu",
    "InstanceType",
    "ModelEntry",
    "Price",
    "Source",
    "find_instance",
    "find_model",
    "load_gpus",
    "load_instances",
    "load_models",
]
