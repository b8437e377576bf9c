"""Node-loss recovery of a cluster run against a cold cluster `up` (issue 24 item 5).

When a node of a cluster that `orch run` made is lost, the run replaces that node alone in the
cluster's own Terraform root and placement group (`Run._replace_node`: `terraform apply
-replace=...[k]`), and re-provisions the whole cluster when that fails or the market changes
(`Run._replace_box`: destroy, then `up` of the same request). This times both against a cold
`up` of the same cluster (`Run._launch`, what the run's first attempt does), in one process,
against a local moto server behind the tests' proxy (which serves the placement groups moto
lacks: tests/sim/ec2_placement.py). Per repetition:
  cold:      Run._launch of N x p4d.24xlarge (placement group, EFA launch template)
  node:      Run._replace_node(1) (node 1 anew; node 0 must keep its instance id)
  cluster:   Run._replace_box after node 1 is lost (destroy the N nodes, then up again)
then an untimed destroy. No SSH, no job: the job's stop and restart are not in these figures
(they are the job's own: its restore and torchrun's rendezvous).

    .venv/bin/python benchmarks/node_recovery.py [--repetitions 3] [--nodes 2] [--mirror DIR]

Needs moto_server (moto[server]) and a provider mirror holding hashicorp/aws (--mirror, or
$ORCH_TEST_TF_MIRROR, or a standard place such as /opt/tf-plugins). Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.up_overhead import CIDR, candidate, find_mirror, moto_env, start_moto  # noqa: E402
from orchestrator.clouds.values import InstanceState  # noqa: E402
from orchestrator.plan import Plan  # noqa: E402
from orchestrator.provision import teardown  # noqa: E402
from orchestrator.provision.cluster import cluster_nodes  # noqa: E402
from orchestrator.provision.request import build_request  # noqa: E402
from orchestrator.run.recovery import UNREACHABLE  # noqa: E402
from orchestrator.run.session import BoxLost, Run, RunRequest  # noqa: E402
from orchestrator.run.spec import RunSpec  # noqa: E402
from tests.e2e.conftest import CapacityProxy  # noqa: E402


def quiet(_line: str) -> None:
    pass


def one_round(name: str, plan: Plan, work: Path, nodes: int) -> tuple[float, float, float]:
    """(cold up, node replacement, whole-cluster recovery) seconds for cluster `name`; it is
    destroyed after (untimed)."""
    up = build_request(plan, name=name, ttl="1h", ssh_cidrs=[CIDR]).for_box()
    spec = RunSpec(command=["true"], workdir=work)
    run = Run(RunRequest(spec=spec, box_name=name, up_options=up, spot_recovery=1), quiet, None,
              io.BytesIO())  # fmt: skip
    started = time.perf_counter()
    run.box = run._launch(up)
    cold = time.perf_counter() - started
    before = [n.instance_id for n in cluster_nodes(run.box)]
    if len(before) != nodes:
        sys.exit(f"cluster {name} came up without {nodes} nodes")
    started = time.perf_counter()
    run.box = run._replace_node(1)
    node = time.perf_counter() - started
    after = [n.instance_id for n in cluster_nodes(run.box)]
    if after[0] != before[0] or after[1] == before[1]:
        sys.exit(f"node replacement of {name} did not keep node 0 and renew node 1: {after}")
    lost = BoxLost(InstanceState(UNREACHABLE, "no SSH answer"), node=1, message="node 1 lost")
    started = time.perf_counter()
    run.box = run._replace_box(lost, on_demand=False)
    recovery = time.perf_counter() - started
    teardown.down(name, None, quiet, None)
    return cold, node, recovery


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--mirror")
    args = parser.parse_args()
    if args.repetitions < 1 or not 2 <= args.nodes <= 64:
        parser.error("--repetitions must be at least 1 and --nodes 2..64")
    mirror = find_mirror(args.mirror)
    moto, url = start_moto()
    work = Path(tempfile.mkdtemp(prefix="orch-bench-recovery-"))
    try:
        with CapacityProxy(url) as proxy:
            os.environ.update(moto_env(work, mirror, proxy.url))
            row = dataclasses.replace(candidate(), instance_type="p4d.24xlarge",
                                      gpu="A100-40GB", gpu_count=8, nodes=args.nodes)  # fmt: skip
            plan = Plan({}, {}, row, [], "2026-12-05T09:00:00Z")
            colds, singles, recoveries = [], [], []
            for n in range(args.repetitions):
                cold, single, recovery = one_round(f"bench-recover-{n}", plan, work, args.nodes)
                colds.append(cold)
                singles.append(single)
                recoveries.append(recovery)
                print(f"rep {n + 1}: cold up {cold:6.2f}s   node 1 replaced {single:6.2f}s   "
                      f"whole cluster (down + up) {recovery:6.2f}s", flush=True)  # fmt: skip
        ratio = statistics.median(recoveries) / statistics.median(colds)
        figures = {
            "repetitions": args.repetitions,
            "nodes": args.nodes,
            "cold_up_median_s": round(statistics.median(colds), 2),
            "node_replacement_median_s": round(statistics.median(singles), 2),
            "recovery_median_s": round(statistics.median(recoveries), 2),
            "node_ratio": round(statistics.median(singles) / statistics.median(colds), 2),
            "ratio": round(ratio, 2),
        }
        print(json.dumps(figures, indent=2))
    finally:
        moto.terminate()
        moto.wait(timeout=10)
        subprocess.run(["rm", "-rf", str(work)], check=False)


if __name__ == "__main__":
    main()
