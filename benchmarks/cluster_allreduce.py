"""The all_reduce probe of `orch check CLUSTER` (orchestrator/check/allreduce_probe.py) on this
machine: two torchrun agents, as two "nodes", joined by a c10d rendezvous on 127.0.0.1,
at several sizes. Prints the probe's algbw and busbw (orchestrator/check/busbw.py) per size.

On CPUs (gloo) it shows what the loopback "nodes" of tests/e2e/test_check_cluster.py reach,
so their --expect-busbw figures can be chosen far from it. On a machine with GPUs
(`--backend nccl --gpus-per-node K`, 2K GPUs) each agent gets K of them
(CUDA_VISIBLE_DEVICES): a device check of the probe's NCCL path. With one GPU, `--agents 1`
runs the probe alone (NCCL refuses two ranks on one GPU): busbw is 0 for one rank, so only
the time per all_reduce and the probe's own sum check are shown.

    python benchmarks/cluster_allreduce.py [--backend gloo] [--sizes 1,4,16,64] [--rounds 3]
    python benchmarks/cluster_allreduce.py --backend nccl --agents 1 --sizes 256
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.check import busbw  # noqa: E402
from orchestrator.check.allreduce import PROBE, RESULT_MARK  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun() -> list[str]:
    found = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    return [found] if Path(found).exists() else [sys.executable, "-m", "torch.distributed.run"]


def one_run(backend: str, per_node: int, size: int, nodes: int = 2) -> dict:
    """The probe's JSON answer for one run of `nodes` agents."""
    port, agents = free_port(), []
    for node in range(nodes):
        env = dict(os.environ)
        if backend == "nccl":
            first = node * per_node
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(first + i) for i in range(per_node))
        argv = [
            *torchrun(),
            "--nnodes", str(nodes), "--nproc-per-node", str(per_node),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
            "--rdzv-id", f"bench-{port}", "--rdzv-conf", f"is_host={int(node == 0)}",
            "--max-restarts", "0", "--local-addr", "127.0.0.1",
            str(PROBE), "--backend", backend, "--bytes", str(size),
        ]  # fmt: skip
        agents.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env))
    outputs = [agent.communicate(timeout=600)[0] for agent in agents]
    if any(agent.returncode for agent in agents):
        raise SystemExit(f"torchrun failed: {[a.returncode for a in agents]}")
    line = next(x for out in outputs for x in out.splitlines() if x.startswith(RESULT_MARK))
    answer = json.loads(line[len(RESULT_MARK) :])
    if not answer.get("correct"):
        raise SystemExit(f"the probe's sums were wrong: {answer}")
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    parser.add_argument("--gpus-per-node", type=int, default=1)
    parser.add_argument("--sizes", default="1,4,16,64", help="MiB, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--agents", type=int, choices=(1, 2), default=2)
    args = parser.parse_args()
    print(
        f"backend {args.backend}, {args.agents} agent(s) x {args.gpus_per_node} process(es), "
        f"127.0.0.1"
    )
    print(
        f"{'MiB':>6} {'ms/op':>9} {'algbw GB/s':>11} {'busbw GB/s':>11}  (median of {args.rounds})"
    )
    for mib in (int(x) for x in args.sizes.split(",")):
        answers = [
            one_run(args.backend, args.gpus_per_node, mib << 20, args.agents)
            for _ in range(args.rounds)
        ]
        per_op = statistics.median(a["seconds"] / a["iters"] for a in answers)
        world = answers[0]["world_size"]
        alg = busbw.algbw_gbps(mib << 20, per_op)
        bus = alg * busbw.bus_factor(world)
        print(f"{mib:>6} {per_op * 1e3:>9.3f} {alg:>11.3f} {bus:>11.3f}")


if __name__ == "__main__":
    main()
