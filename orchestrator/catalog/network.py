"""The network between a cluster's nodes, per instance type (data/network.toml): the bandwidth
and fabric that a multi-node job's inter-node collectives run over (issue 24)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from orchestrator.catalog.loader import DATA_DIR, CatalogError, _source, read_toml_cached
from orchestrator.catalog.schema import Source

FABRICS = ("efa", "tcp")


@dataclass(frozen=True, slots=True)
class NodeNetwork:
    """What one node of a cluster can send to the others: bandwidth and fabric."""

    gbps: float  # fixed network bandwidth each way, Gbit/s
    fabric: str  # "efa" (GPUDirect RDMA through aws-ofi-nccl) | "tcp" (NCCL sockets)
    source: Source

    @property
    def bytes_per_s(self) -> float:
        return self.gbps * 1e9 / 8


@cache
def load_networks() -> dict[tuple[str, str], NodeNetwork]:
    """(cloud, instance type) -> its network; types sold with "up to" bandwidth are absent."""
    try:
        data = read_toml_cached(DATA_DIR / "network.toml", "network.toml")
    except (FileNotFoundError, ValueError) as exc:
        raise CatalogError(f"catalog data file network.toml unreadable: {exc}") from exc
    shared = data.get("sources", {})
    networks: dict[tuple[str, str], NodeNetwork] = {}
    for cloud, rows in data.items():
        if cloud == "sources":
            continue
        for name, raw in rows.items():
            where = f"network.toml {cloud} {name}"
            gbps = raw.get("gbps")
            if isinstance(gbps, bool) or not isinstance(gbps, int | float) or not gbps > 0:
                raise CatalogError(f"{where}: gbps must be a positive number")
            if raw.get("fabric") not in FABRICS:
                raise CatalogError(f"{where}: fabric must be one of {', '.join(FABRICS)}")
            source = _source(raw.get("source"), shared, where)
            networks[(cloud, name)] = NodeNetwork(float(gbps), raw["fabric"], source)
    return networks


def network_of(cloud: str, instance_type: str) -> NodeNetwork | None:
    """The type's inter-node network, or None: not planned across nodes (burstable or
    unknown bandwidth)."""
    return load_networks().get((cloud, instance_type))
