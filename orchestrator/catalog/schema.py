"""Typed views of the catalog data files. Every fact carries a `Source` (where and when)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Source:
    """Where a fact comes from and the date it was read (ISO `YYYY-MM-DD`)."""

    url: str
    date: str
    note: str = ""
    # False for figures that no dated authoritative source confirms (e.g. remembered list
    # prices): `verified = false` in the data file. Such prices never win a plan on their own.
    verified: bool = True


@dataclass(frozen=True, slots=True)
class Gpu:
    """A GPU model's specifications and calibrated efficiency, with their sources."""

    name: str  # canonical: "T4", "V100-16GB", "V100-32GB", "A10", "A10G", "L4", "A100-40GB", ...
    memory_gib: float  # marketing memory (e.g. 16 for T4); nvidia-smi reports a little less
    # Dense (no sparsity) peak TFLOPS by precision key: "fp32", "tf32", "fp16", "bf16".
    # A precision the GPU lacks in hardware (bf16 on T4/V100) is absent.
    peak_tflops: dict[str, float]
    memory_bandwidth_gbps: float  # GB/s
    interconnect: str  # "PCIe Gen3", "NVLink 300 GB/s", ...
    # Achievable fraction of peak for transformer training (model FLOPs utilisation), by
    # precision key, calibrated on published measured throughput; see `efficiency_source`.
    efficiency: dict[str, float]
    source: Source
    efficiency_source: Source
    nvidia_smi_names: tuple[str, ...] = ()  # names nvidia-smi prints, e.g. "Tesla T4"
    architecture: str = ""  # "Turing", "Volta", "Ampere", "Ada", "Hopper"
    # Measured dense matmul TFLOPS a power-capped board holds under continuous load, by
    # precision key, where it is far below `peak_tflops` (T4: 70 W); see `sustained_source`.
    sustained_tflops: dict[str, float] = field(default_factory=dict)
    sustained_source: Source | None = None


@dataclass(frozen=True, slots=True)
class Price:
    """USD per hour for one instance in one region; None when no public source gives it."""

    on_demand: float | None
    spot: float | None = None


@dataclass(frozen=True, slots=True)
class InstanceType:
    """One cloud instance type: its GPUs, CPU, memory, network and prices per region."""

    cloud: str  # a registered cloud name (orchestrator.clouds.names())
    name: str  # exact API name: "g5.xlarge", "ecs.gn7i-c8g1.2xlarge"
    family: str  # "g5", "gn7i"
    vcpus: int
    memory_gib: float
    gpu: str  # key into load_gpus()
    gpu_count: int
    network: str  # "Up to 10 Gigabit", "400 Gbps", ...
    efa: bool
    prices: dict[str, Price]  # region -> price
    source: Source  # specs
    price_source: Source  # prices
    local_nvme_gib: int = 0
    # EFA interfaces a cluster node gets, one per network card (EC2's maximumEfaInterfaces);
    # 0: none.
    efa_interfaces: int = 0
    legacy: bool = False  # e.g. P3: still plannable, with `legacy_note` shown as a warning
    legacy_note: str = ""
    # Regions whose price comes from an unverified source and was not refreshed by the user.
    unverified_prices: frozenset[str] = frozenset()

    def price_verified(self, region: str) -> bool:
        return region not in self.unverified_prices

    def price(self, region: str, spot: bool = False) -> float | None:
        """The hourly price in `region` (None: not offered there or unpriced): the one price
        lookup of plan, run (through `loader.price_of`) and pool (its plan's prices)."""
        price = self.prices.get(region)
        if price is None:
            return None
        return price.spot if spot else price.on_demand


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """A catalog model: its Hugging Face style config, names and source."""

    name: str  # canonical catalog name: "bert-large-uncased"
    aliases: tuple[str, ...]  # other accepted names: "bert-large"
    # A Hugging Face style config dict (model_type, hidden_size, num_hidden_layers, ...,
    # architectures); for torchvision CNNs model_type="resnet" with HF ResNetConfig keys.
    config: dict[str, Any]
    source: Source
    parameters: int | None = None  # published parameter count, for cross-checking only
    description: str = ""
    tags: tuple[str, ...] = field(default=())
