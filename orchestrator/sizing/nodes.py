"""Multi-node training (issue 24): which node counts a plan considers, and what the collectives
between nodes cost a training step.

Stated assumptions (not measurements; see docs/multi-node.md):

- Collectives are hierarchical, as NCCL runs them across nodes: inside a box over its
  NVSwitch/PCIe (sizing/throughput.py), between boxes over the node's network. Each node sends
  (and receives) `collective_bytes(..., nodes)` per micro-batch over its network: the gradient
  all-reduce moves 2(n-1)/n of the gradient bytes (DDP, ZeRO 1-2); ZeRO-3 / FSDP moves (n-1)/n
  of the weights twice (all-gather for forward and backward) plus (n-1)/n of the gradients
  (reduce-scatter). n is the number of nodes.
- A collective reaches FABRIC_EFFICIENCY of the network's line rate: 80 % on EFA with
  GPUDirect RDMA, 50 % over TCP (NCCL's socket transport, which copies through host memory
  and the kernel's TCP stack), and over TCP at most TCP_CEILING_GBPS (50 Gbit/s) whatever the
  line rate: the socket transport is bound by the CPU threads that copy and checksum.
- Inter-node collectives overlap with the backward pass only partly: at most
  INTERNODE_OVERLAP (half) of a box's step time hides them (backward is about two thirds of
  a step; the first gradient buckets are not ready early, the last bucket's all-reduce and
  ZeRO-3's first all-gather of each step are exposed). The rest adds to every step, so
  throughput grows less than the node count, and much less over TCP.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.errors import UsageError
from orchestrator.plan import MAX_NODES
from orchestrator.sizing.throughput import collective_bytes

if TYPE_CHECKING:  # a plan of one node never reads the network catalog (start-up)
    from orchestrator.catalog.network import NodeNetwork

AUTO_NODES = (1, 2, 4, 8)  # what --nodes auto considers
SCALING_NODES = (1, 2, 4, 8)  # the winner's type at these node counts (JSON `scaling`)
FABRIC_EFFICIENCY = {"efa": 0.8, "tcp": 0.5}
TCP_CEILING_GBPS = 50.0
INTERNODE_OVERLAP = 0.5


def parse_nodes(value: object, flag: str = "--nodes") -> int | None:
    """--nodes N (1..64) or `auto` (None); anything else is a usage error (exit 2)."""
    if value is None:
        return 1
    text = str(value).strip().lower()
    if text == "auto":
        return None
    if isinstance(value, bool) or not text.isdigit() or not 1 <= int(text) <= MAX_NODES:
        shown = str(value)[:40]
        raise UsageError(
            f"{flag} must be a whole number from 1 to {MAX_NODES} or auto, not {shown!r}"
        )
    return int(text)


def node_counts(wanted: int | None) -> tuple[int, ...]:
    """The node counts a plan considers: exactly N, or AUTO_NODES for `auto` (None)."""
    return AUTO_NODES if wanted is None else (wanted,)


def internode_seconds(
    parameters: int, trainable: int, zero: int, precision: str, nodes: int, network: NodeNetwork
) -> float:
    """Seconds a micro-batch's inter-node collectives take on `network` (0 for one node)."""
    if nodes <= 1:
        return 0.0
    moved = collective_bytes(parameters, trainable, zero, precision, nodes)
    return moved / effective_bytes_per_s(network)


def effective_bytes_per_s(network: NodeNetwork) -> float:
    """What a collective reaches on `network`, bytes/s (the stated assumptions above)."""
    rate = network.bytes_per_s * FABRIC_EFFICIENCY[network.fabric]
    if network.fabric == "tcp":
        rate = min(rate, TCP_CEILING_GBPS * 1e9 / 8)
    return rate


def cluster_rate(box_rate: float, samples_per_step: int, nodes: int, internode_s: float) -> float:
    """Samples/s of `nodes` boxes that each run `box_rate` alone, `samples_per_step` samples a
    micro-batch step (batch x the box's GPUs), with `internode_s` of collectives a step."""
    if nodes <= 1:
        return box_rate
    step = samples_per_step / box_rate
    exposed = max(0.0, internode_s - INTERNODE_OVERLAP * step)
    return nodes * samples_per_step / (step + exposed)
