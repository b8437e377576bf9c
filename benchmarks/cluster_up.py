"""`orch up` of a 4-node cluster against `orch up` of one box (issue 24): nodes launch in
parallel, so the cluster should take at most 1.3 x one box's time.

Against a local moto server (behind the tests' proxy, which serves the placement groups moto
lacks: tests/sim/ec2_placement.py), each repetition times, alternating the two:
  one:      `orch up` of one p4d.24xlarge (no placement group, no EFA)
  cluster:  `orch up` of 4 x p4d.24xlarge (placement group, launch template with 4 EFA
            interfaces per node, rank 0's Elastic IP)
each followed by an untimed `orch down`, then prints the medians and their ratio.

    .venv/bin/python benchmarks/cluster_up.py [--repetitions 3] [--nodes 4] [--mirror DIR]

Needs moto_server (moto[server]) and a provider mirror holding hashicorp/aws (--mirror, or
$ORCH_TEST_TF_MIRROR, or a standard place such as /opt/tf-plugins). Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.up_overhead import CIDR, candidate, find_mirror, moto_env, start_moto  # noqa: E402
from orchestrator.plan import Plan, write_plan  # noqa: E402
from tests.e2e.conftest import CapacityProxy  # noqa: E402

TARGET = 1.3


def up_seconds(name: str, plan: Path, env: dict[str, str]) -> float:
    """Time `orch up` of `plan` as box `name`, then destroy it (untimed)."""
    orch = [sys.executable, "-m", "orchestrator"]
    up = [*orch, "up", "--plan", str(plan), "--name", name, "--ssh-cidr", CIDR, "--no-check"]
    started = time.perf_counter()
    result = subprocess.run(up, env=env, cwd=REPO, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"orch up {name} failed:\n{result.stderr[-2000:]}")
    down = subprocess.run([*orch, "down", name], env=env, cwd=REPO, capture_output=True, text=True)
    if down.returncode != 0:
        sys.exit(f"orch down {name} failed:\n{down.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--mirror")
    args = parser.parse_args()
    if args.repetitions < 1 or not 2 <= args.nodes <= 64:
        parser.error("--repetitions must be at least 1 and --nodes 2..64")
    mirror = find_mirror(args.mirror)
    moto, url = start_moto()
    work = Path(tempfile.mkdtemp(prefix="orch-bench-cluster-"))
    try:
        with CapacityProxy(url) as proxy:
            env = moto_env(work, mirror, proxy.url)
            row = dataclasses.replace(
                candidate(), instance_type="p4d.24xlarge", gpu="A100-40GB", gpu_count=8
            )
            one, cluster = work / "one.json", work / "cluster.json"
            write_plan(Plan({}, {}, row, [], "2026-12-05T09:00:00Z"), one)
            clustered = dataclasses.replace(row, nodes=args.nodes)
            write_plan(Plan({}, {}, clustered, [], "2026-12-05T09:00:00Z"), cluster)
            ones, clusters = [], []
            for n in range(args.repetitions):
                ones.append(up_seconds(f"bench-one-{n}", one, env))
                clusters.append(up_seconds(f"bench-cluster-{n}", cluster, env))
                print(f"rep {n + 1}: up of 1 node {ones[-1]:6.2f}s   "
                      f"up of {args.nodes} nodes {clusters[-1]:6.2f}s", flush=True)  # fmt: skip
        ratio = statistics.median(clusters) / statistics.median(ones)
        print(
            json.dumps(
                {
                    "repetitions": args.repetitions,
                    "nodes": args.nodes,
                    "up_one_median_s": round(statistics.median(ones), 2),
                    "up_cluster_median_s": round(statistics.median(clusters), 2),
                    "ratio": round(ratio, 2),
                    "target_ratio": TARGET,
                    "meets_target": ratio <= TARGET,
                },
                indent=2,
            )
        )
    finally:
        moto.terminate()
        moto.wait(timeout=10)
        subprocess.run(["rm", "-rf", str(work)], check=False)


if __name__ == "__main__":
    main()
