"""The nodes of a box: one for an ordinary box, N for a cluster (issue 24).

A cluster is one box in the registry (one record, one Terraform root, one lock, one name) whose
Terraform outputs carry a `nodes` list, rank 0 first:

    outputs["nodes"] = [
        {"index": 0, "instance_id": "i-...", "public_ip": "203.0.113.5", "private_ip":
         "10.0.1.4", "availability_zone": "us-east-1a"},
        {"index": 1, "instance_id": "i-...", "public_ip": "", "private_ip": "10.0.1.5", ...},
    ]

A node without a public address (several EFA cards forbid one) is reached through rank 0
(`via`: ssh ProxyJump through node 0). The box's own `public_ip`/`private_ip`/`instance_id`
outputs stay rank 0's, so every single-box command keeps working on a cluster's rank 0.
An ordinary box has no `nodes` output: `cluster_nodes` gives its one node from the plain
outputs.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import OrchError
from orchestrator.provision.boxes import Box

MAX_NODES = 64


@dataclass(frozen=True, slots=True)
class ClusterNode:
    index: int  # node rank: 0 is the rendezvous host
    instance_id: str
    public_ip: str | None  # None: reached through node 0
    private_ip: str | None
    availability_zone: str | None = None

    @property
    def reached_via_rank0(self) -> bool:
        return self.index > 0 and not self.public_ip


def node_count(box: Box) -> int:
    """How many nodes the box was created with (the plan row's `nodes`, 1 when absent)."""
    return max(1, int(getattr(box.candidate, "nodes", 1) or 1))


def cluster_nodes(box: Box) -> list[ClusterNode]:
    """The box's nodes, rank 0 first; every value validated (they come from a saved record)."""
    outputs = box.outputs or {}
    raw = outputs.get("nodes")
    if raw is None:
        return [_node(0, outputs, box.name)]
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_NODES:
        raise OrchError(f"box {box.name}: its record's nodes are damaged (not a list of 1..64)")
    nodes = [_node(i, item, box.name) for i, item in enumerate(raw)]
    if [n.index for n in nodes] != list(range(len(nodes))):
        raise OrchError(f"box {box.name}: its record's node indexes are not 0..{len(nodes) - 1}")
    return nodes


def _node(position: int, item: Any, box_name: str) -> ClusterNode:
    if not isinstance(item, dict):
        raise OrchError(f"box {box_name}: node {position} in its record is damaged")
    index = item.get("index", position)
    if not isinstance(index, int) or isinstance(index, bool):
        raise OrchError(f"box {box_name}: node {position} has a bad index {index!r}")
    return ClusterNode(
        index=index,
        instance_id=str(item.get("instance_id") or ""),
        public_ip=_address(item.get("public_ip"), box_name, position),
        private_ip=_address(item.get("private_ip"), box_name, position),
        availability_zone=str(item["availability_zone"]) if item.get("availability_zone") else None,
    )


def _address(value: Any, box_name: str, position: int) -> str | None:
    """An IP address or None; anything else (a host name, an option-like string) is refused,
    since it reaches ssh and the launcher's --rdzv-endpoint."""
    if value in (None, ""):
        return None
    try:
        return str(ipaddress.ip_address(str(value)))
    except ValueError:
        raise OrchError(
            f"box {box_name}: node {position} has a bad address {str(value)[:60]!r}"
        ) from None
