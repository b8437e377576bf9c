"""A short all_reduce across a cluster, run by torchrun on every node (`orch check CLUSTER`).

This file is shipped to the nodes as text over ssh's stdin and run there by torchrun; it is
never imported by orch. It needs only the standard library and torch. Every process joins
the group (NCCL on GPUs, gloo on CPUs), checks once that the sum is right, times `--iters`
all_reduces of `--bytes` after `--warmup` untimed ones, and global rank 0 prints one line:

    ORCH-ALLREDUCE {"world_size": 16, "bytes": 268435456, "iters": 20, "seconds": 0.51, ...}

`seconds` is the slowest rank's time for the timed loop (as nccl-tests reports it). orch turns
it into algbw and busbw (orchestrator/check/busbw.py); the probe reports only what it measured.
"""

import argparse
import datetime
import json
import os
import sys
import time

MARK = "ORCH-ALLREDUCE "


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="orch-allreduce-probe")
    parser.add_argument("--backend", choices=("nccl", "gloo"), required=True)
    parser.add_argument("--bytes", type=int, required=True)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    if args.bytes < 4 or args.iters < 1 or args.warmup < 0:
        parser.error("--bytes must be at least 4, --iters at least 1, --warmup at least 0")
    return args


def synchronize(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv):
    args = parse_args(argv)
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        print(f"orch-allreduce-probe: torch is not importable here: {exc}", file=sys.stderr)
        return 3
    if args.backend == "nccl":
        if not torch.cuda.is_available():
            print("orch-allreduce-probe: NCCL needs CUDA and torch sees no GPU", file=sys.stderr)
            return 3
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(
        args.backend, timeout=datetime.timedelta(seconds=max(1.0, args.timeout))
    )
    rank, world = dist.get_rank(), dist.get_world_size()
    elements = args.bytes // 4
    data = torch.empty(elements, dtype=torch.float32, device=device)

    # Correctness once: ranks 1..world summed.
    data.fill_(float(rank + 1))
    dist.all_reduce(data)
    synchronize(torch, device)
    expected = world * (world + 1) / 2
    correct = bool(torch.all(data == expected).item())

    for _ in range(args.warmup):
        dist.all_reduce(data)
    synchronize(torch, device)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(data)
    synchronize(torch, device)
    elapsed = torch.tensor([time.perf_counter() - started], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    if rank == 0:
        report = {
            "world_size": world,
            "bytes": elements * 4,
            "iters": args.iters,
            "seconds": float(elapsed.item()),
            "backend": args.backend,
            "correct": correct,
            "torch": str(torch.__version__),
            "nccl": ".".join(map(str, torch.cuda.nccl.version()))
            if args.backend == "nccl"
            else None,
        }
        print(MARK + json.dumps(report), flush=True)
    # No rank tears its group down while a peer still talks to it: with gloo that can end a
    # rank in SIGABRT ("terminate called without an active exception"; 4 runs in 20 of a
    # 3-rank job on 2 cores without this barrier, none in 20 with it).
    dist.barrier()
    dist.destroy_process_group()
    return 0 if correct else 4


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
