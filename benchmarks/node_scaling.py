"""Multi-node scaling as `orch plan --nodes N` models it (issue 24): one job on 1, 2, 4 and 8
boxes of several types, samples/s, the share of n x one box's speed, and the job's cost.

EFA types (GPUDirect RDMA) keep most of linear scaling; TCP types lose much of it to the
inter-node collectives (sizing/nodes.py states the assumptions: bandwidth efficiency per
fabric, the TCP ceiling, partial overlap with backward). Offline: the catalog only.

    python benchmarks/node_scaling.py [--model llama-2-7b] [--region us-east-1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.catalog.network import network_of  # noqa: E402
from orchestrator.sizing.job import JobSpec  # noqa: E402
from orchestrator.sizing.nodes import SCALING_NODES  # noqa: E402
from orchestrator.sizing.select import PlanOptions, rank  # noqa: E402

TYPES = ("p5.48xlarge", "p4d.24xlarge", "g5.48xlarge", "g6e.48xlarge")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-2-7b")
    parser.add_argument("--region", default="us-east-1")
    args = parser.parse_args()
    job = JobSpec(model=args.model, batch=2, seq=2048, zero=3, grad_checkpointing=True)
    print(f"{args.model}, batch 2, seq 2048, ZeRO-3, checkpointing; {args.region} on-demand")
    print(f"{'type':<14} {'network':<14}" + "".join(f"{n:>24}" for n in SCALING_NODES))
    for name in TYPES:
        network = network_of("aws", name)
        assert network is not None
        cells, base = [], None
        for nodes in SCALING_NODES:
            rows = rank(job, PlanOptions(instance_type=name, region=args.region, nodes=nodes))
            if not rows.candidates:
                cells.append("does not fit")
                continue
            row = rows.candidates[0]
            base = base or row.samples_per_s / nodes
            share = row.samples_per_s / (nodes * base)
            cells.append(f"{row.samples_per_s:.3g}/s {share:4.0%} ${row.cost:,.0f}")
        net = f"{network.fabric.upper()} {network.gbps:g}G"
        print(f"{name:<14} {net:<14}" + "".join(f"{c:>24}" for c in cells))


if __name__ == "__main__":
    main()
