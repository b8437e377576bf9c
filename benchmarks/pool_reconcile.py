"""How long `orch pool reconcile` takes to heal a pool whose boxes were all lost.

The same local stand-ins as benchmarks/pool_lease.py: moto for EC2, the real Terraform core
and hashicorp/aws from a provider mirror (one shared plugin cache), one real sshd on loopback
for every box (each box its own key and HOME) with a fake nvidia-smi (A10G, g5.xlarge), and
the pool's record in the local store.

1. `orch pool create bench --min N` (N boxes, started in parallel; timed, for information);
2. every pool instance is stopped behind orch's back (EC2 StopInstances on moto; with
   `--lose terminate`, terminated), so reconcile finds each box lost;
3. `orch pool reconcile bench --json` (timed: the figure) must replace all N: destroy the N
   lost boxes (Terraform destroy, which terminates a stopped instance and waits for it; then
   the cloud asked what still carries each box's tag) and start N new ones, checked.

Reconcile destroys the boxes it retires at once, each in an `orch pool _destroy` child, and
starts the new ones at once too, so the figure should stay near one destroy plus one start
whatever N is. For the one-box costs, `--single` also times one `orch up` and one `orch down`
of the same plan.

    PYTHONPATH=. .venv/bin/python benchmarks/pool_reconcile.py [--boxes 3] [--single]
        [--lose stop|terminate] [--mirror DIR] [--show-logs]

Needs moto_server, OpenSSH (sshd, ssh, ssh-keygen), and a provider mirror with hashicorp/aws.
Nothing is downloaded. The pool is deleted whatever happens; every wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.pool_lease import POOL, UP_TIMEOUT_S, Bench, pool_bench  # noqa: E402


def lose_pool_instances(env: dict[str, str], how: str) -> list[str]:
    """Stop (or terminate) every running instance tagged with the pool's name."""
    import boto3

    ec2 = boto3.client("ec2", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    found = ec2.describe_instances(Filters=[
        {"Name": "tag:orch:pool", "Values": [POOL]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]},
    ])["Reservations"]  # fmt: skip
    ids = [i["InstanceId"] for r in found for i in r["Instances"]]
    if ids and how == "stop":
        ec2.stop_instances(InstanceIds=ids)
    elif ids:
        ec2.terminate_instances(InstanceIds=ids)
    return ids


def reconcile(bench: Bench, boxes: int, how: str) -> float:
    lost = lose_pool_instances(bench.env, how)
    if len(lost) != boxes:
        raise RuntimeError(f"found {len(lost)} pool instances to {how}, not {boxes}")
    call = bench.orch("pool", "reconcile", POOL, "--json", timeout=UP_TIMEOUT_S)
    actions = json.loads(call.stdout)["actions"]
    if len(actions["replaced"]) != boxes or len(actions["started"]) != boxes:
        raise RuntimeError(f"reconcile did not replace all {boxes} boxes: {actions}")
    if sorted(bench.states().values()) != ["ready"] * boxes:
        raise RuntimeError(f"after reconcile the pool is {bench.states()}")
    return call.seconds


def run(bench: Bench, boxes: int, single: bool, how: str) -> None:
    import moto

    bench.warm_plugin_cache()
    rows = []
    if single:
        one = bench.cold()
        rows += [("one `orch up` (apply + GPU check)", one["up"]),
                 ("one `orch down`", one["down"])]  # fmt: skip
    rows.append((f"`orch pool create --min {boxes}`", bench.create_pool(boxes)))
    lost = "stopped" if how == "stop" else "terminated"
    rows.append((f"`orch pool reconcile`, all {boxes} boxes {lost}", reconcile(bench, boxes, how)))
    print(f"\norch pool reconcile of {boxes} lost boxes, g5.xlarge plan, on local stand-ins: "
          f"moto {moto.__version__} (EC2), Terraform core + hashicorp/aws from a mirror, the "
          f"GPU check over a real sshd on loopback; local pool store; nproc {os.cpu_count()}; "
          f"Python {sys.version.split()[0]}")  # fmt: skip
    width = max(len(label) for label, _ in rows)
    for label, seconds in rows:
        print(f"  {label:<{width}}  {seconds:7.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boxes", type=int, default=3, help="the pool's --min (1 to 4)")
    parser.add_argument("--single", action="store_true", help="also time one up and one down")
    parser.add_argument("--lose", choices=("stop", "terminate"), default="stop",
                        help="how the boxes are lost behind orch's back")  # fmt: skip
    parser.add_argument("--mirror", help="Terraform provider mirror holding hashicorp/aws")
    parser.add_argument("--show-logs", action="store_true", help="print each orch's stderr")
    args = parser.parse_args()
    if not 1 <= args.boxes <= 4:
        parser.error("--boxes must be 1 to 4")
    with pool_bench(args.mirror, args.show_logs) as bench:
        run(bench, args.boxes, args.single, args.lose)


if __name__ == "__main__":
    main()
