"""Lease latency from a warm pool against a cold `orch up` of the same plan, as a ratio.

Everything is a local stand-in, as in tests/e2e/test_pool.py: moto for EC2 (behind the
tests' proxy, which serves the placement groups moto lacks: tests/sim/ec2_placement.py), the
real Terraform core and hashicorp/aws from a provider mirror (one shared plugin cache), and
one real sshd on loopback standing in for every box (tests.e2e.sshbox): each box gets in
with its own key and has its own HOME (KeyRouter), and the GPU check runs a fake nvidia-smi
(an A10G, g5.xlarge).
The pool's record is in the local store (ORCH_HOME).

1. Cold: `orch up --plan plan.json --name cold --ttl 2h --ssh-cidr ... --check-timeout 60`,
   the GPU check included (a CI job needs a checked box), timed until it exits 0; then
   `orch down cold`, timed apart. The plugin cache is filled before (untimed), as it is on
   any runner that has used orch before.
2. Warm: `orch pool create bench --min 2 --max 4 --ttl 2h --lease-ttl 30m ...` (timed, for
   information), then N times `orch pool lease bench --json` (timed: the figure) followed by
   `orch pool release bench BOX` (timed apart: it resets the box and runs the GPU check again).

    ratio = median lease / cold up          target <= 1/20 (0.05)

Each figure is the wall time of one `python -m orchestrator ...` process, start to exit, as a
CI step would see it. When the target is missed (or with --profile) the lease is profiled:
interpreter start-up, imports, the record's read and conditional write, the box record's
materialize and `display.box_summary`, and cProfile's top entries.

    PYTHONPATH=. .venv/bin/python benchmarks/pool_lease.py [--repeat 5] [--mirror DIR]
        [--profile] [--show-logs]

Needs moto_server, OpenSSH (sshd, ssh, ssh-keygen), and a provider mirror with hashicorp/aws
(--mirror, $ORCH_TEST_TF_MIRROR or a standard place). Nothing is downloaded. The pool is
deleted and the cold box destroyed whatever happens; every wait is bounded.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.up_overhead import (  # noqa: E402
    CIDR,
    find_mirror,
    moto_env,
    raw_env,
    render_template,
    start_moto,
)
from orchestrator.plan import Plan, write_plan  # noqa: E402
from tests import support  # noqa: E402
from tests.e2e import sshbox  # noqa: E402
from tests.e2e.conftest import CapacityProxy, stop_process  # noqa: E402

MOTO_AMI = "ami-1e749f67"
INSTANCE_TYPE = "g5.xlarge"  # one A10G: what the sshd's fake nvidia-smi serves ("a10g")
POOL = "bench"
COLD = "cold"
TARGET_RATIO = 1 / 20
UP_TIMEOUT_S = 600  # one orch up / pool create / down / delete
QUICK_TIMEOUT_S = 120  # one lease (a ready box is there) / one release (reset + check)
CHECK_TIMEOUT = "60"

# Run `orch pool lease ...` in-process with timers around the parts the brief asks about.
# argv[1]: where to write the timings (JSON); the rest: orch's arguments.
PROFILE_HARNESS = r"""
import json, sys, time
t0 = time.perf_counter()
out, argv = sys.argv[1], sys.argv[2:]
marks = {}
def mark(name, since):
    marks[name] = marks.get(name, 0.0) + time.perf_counter() - since
t = time.perf_counter(); import click; mark("import click", t)
t = time.perf_counter(); import orchestrator.cli as cli; mark("import orchestrator.cli", t)
t = time.perf_counter(); import orchestrator.commands.pool
mark("import commands.pool (+boxes)", t)
t = time.perf_counter(); import orchestrator.pool.manager as m
mark("import pool.manager (+provision)", t)
t = time.perf_counter(); import orchestrator.check.transport
mark("import check.transport", t)
from orchestrator.pool import store
def timed(owner, attr, label):
    real = getattr(owner, attr)
    def wrapper(*a, **k):
        s = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            mark(label, s)
            marks["calls: " + label] = marks.get("calls: " + label, 0) + 1
    setattr(owner, attr, wrapper)
timed(store.LocalStore, "read", "store read (record)")
timed(store.LocalStore, "replace", "store conditional write (flock+fsync+rename)")
timed(m, "_take", "_take (pick + lease in the record)")
import orchestrator.pool.members as members
timed(members, "materialize", "materialize (load the box record)")
timed(m, "box_summary", "display.box_summary")
timed(m, "_lease_answer", "_lease_answer (materialize + summary)")
timed(m, "lease", "manager.lease (all of it)")
sys.argv = ["orch", *argv]
t = time.perf_counter()
try:
    cli.main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
mark("cli.main (parse + lease + print)", t)
marks["harness total (after interpreter start)"] = time.perf_counter() - t0
with open(out, "w") as f:
    json.dump({"marks": marks, "code": code}, f)
sys.exit(code or 0)
"""


# ------------------------------------------------------------------------------ orch calls


@dataclass
class Call:
    seconds: float
    stdout: str
    stderr: str


@dataclass
class Bench:
    work: Path
    env: dict[str, str]
    plan: Path
    show_logs: bool = False
    pool_created: bool = False
    cold_started: bool = False
    leased: dict[str, str] = field(default_factory=dict)  # box -> lease id, not released yet

    def orch(self, *args: str, timeout: float, prefix: list[str] | None = None,
             env: dict[str, str] | None = None) -> Call:  # fmt: skip
        argv = [*(prefix or [sys.executable, "-m", "orchestrator"]), *args]
        started = time.perf_counter()
        try:
            result = subprocess.run(argv, env=env or self.env, cwd=REPO, stdin=subprocess.DEVNULL,
                                    capture_output=True, text=True, timeout=timeout)  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"orch {' '.join(args[:3])} took over {timeout:.0f} s") from exc
        elapsed = time.perf_counter() - started
        if self.show_logs:
            print(f"--- orch {' '.join(args)}  ({elapsed:.2f} s, exit {result.returncode})\n"
                  f"{result.stderr.rstrip()}", flush=True)  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(
                f"orch {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stderr[-3000:]}{result.stdout[-1000:]}"
            )
        return Call(elapsed, result.stdout, result.stderr)

    # -------------------------------------------------------------------- the steps

    def warm_plugin_cache(self) -> None:
        """terraform init of the same root module once, untimed: the provider lands in the
        shared plugin cache, as on any runner that has used orch before."""
        chosen = candidate()
        directory = render_template(self.work / "warm-cache", chosen, "bench-warm")
        subprocess.run([sys.executable, "-m", "orchestrator.provision.libtf_exec", "init",
                        "-input=false"], env=raw_env(self.env), cwd=directory,
                       capture_output=True, timeout=UP_TIMEOUT_S, check=True)  # fmt: skip

    def cold(self) -> dict[str, float]:
        self.cold_started = True
        up = self.orch("up", "--plan", str(self.plan), "--name", COLD, "--ttl", "2h",
                       "--ssh-cidr", CIDR, "--check-timeout", CHECK_TIMEOUT,
                       timeout=UP_TIMEOUT_S)  # fmt: skip
        if "checking the GPUs" not in up.stderr:
            raise RuntimeError(f"orch up ran no GPU check?\n{up.stderr[-2000:]}")
        down = self.orch("down", COLD, timeout=UP_TIMEOUT_S)
        self.cold_started = False
        return {"up": up.seconds, "down": down.seconds}

    def create_pool(self, minimum: int = 2) -> float:
        self.pool_created = True
        call = self.orch("pool", "create", POOL, "--plan", str(self.plan), "--min", str(minimum),
                         "--max", str(max(4, minimum)), "--ttl", "2h", "--lease-ttl", "30m",
                         "--ssh-cidr", CIDR, "--check-timeout", CHECK_TIMEOUT,
                         timeout=UP_TIMEOUT_S)  # fmt: skip
        states = self.states()
        if sorted(states.values()) != ["ready"] * minimum:
            raise RuntimeError(f"pool create left {states}, not {minimum} ready boxes")
        return call.seconds

    def states(self) -> dict[str, str]:
        status = json.loads(self.orch("pool", "status", POOL, "--json", timeout=60).stdout)
        return {b["box"]: b["state"] for b in status["boxes"]}

    def lease(self, prefix: list[str] | None = None,
              env: dict[str, str] | None = None) -> tuple[float, str]:  # fmt: skip
        call = self.orch("pool", "lease", POOL, "--json", "--wait", "0", "--check-timeout",
                         CHECK_TIMEOUT, timeout=QUICK_TIMEOUT_S, prefix=prefix,
                         env=env)  # fmt: skip
        answer = json.loads(call.stdout)
        self.leased[answer["box"]] = answer["lease_id"]
        if "no ready box" in call.stderr:
            raise RuntimeError(f"the lease started a new box: not a warm lease\n{call.stderr}")
        return call.seconds, answer["box"]

    def release(self, box: str) -> float:
        call = self.orch("pool", "release", POOL, box, "--lease", self.leased[box], "--json",
                         timeout=QUICK_TIMEOUT_S)  # fmt: skip
        del self.leased[box]
        outcome = json.loads(call.stdout)["outcome"]
        if outcome != "ready":
            raise RuntimeError(f"release of {box} ended {outcome!r}, not ready:\n{call.stderr}")
        return call.seconds

    # -------------------------------------------------------------------- profile

    def profile(self) -> dict[str, object]:
        """Where a lease's time goes (each lease released after, untimed)."""
        py = [sys.executable]
        found: dict[str, object] = {}
        bare = [self.orch_bare(["-c", "pass"]) for _ in range(3)]
        found["python -c pass"] = statistics.median(bare)
        found["python -c 'import boto3'"] = statistics.median(
            self.orch_bare(["-c", "import boto3"]) for _ in range(3)
        )
        found["orch --help"] = statistics.median(
            self.orch("--help", timeout=60).seconds for _ in range(3)
        )
        found["orch pool status --json"] = statistics.median(
            self.orch("pool", "status", POOL, "--json", timeout=60).seconds for _ in range(3)
        )

        # With compiled bytecode cached (as after `pip install`, which compiles): this host
        # may set PYTHONDONTWRITEBYTECODE, and then every orch process compiles its modules.
        cached = {k: v for k, v in self.env.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = str(self.work / "pycache")
        times = []
        for _ in range(4):  # the first one fills the cache
            seconds, box = self.lease(env=cached)
            self.release(box)
            times.append(seconds)
        found["lease, bytecode cached (PYTHONPYCACHEPREFIX)"] = statistics.median(times[1:])

        # In-process timers around the parts of a lease.
        harness = self.work / "lease_harness.py"
        harness.write_text(PROFILE_HARNESS)
        runs = []
        for n in range(3):
            out = self.work / f"lease-marks-{n}.json"
            seconds, box = self.lease(prefix=[*py, str(harness), str(out)])
            marks = json.loads(out.read_text())["marks"]
            marks["process wall (start to exit)"] = seconds
            runs.append(marks)
            self.release(box)
        found["marks"] = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in runs[0]}

        # Imports, by cumulative time (python -X importtime).
        argv = [*py, "-X", "importtime", "-m", "orchestrator", "pool", "lease", POOL, "--json",
                "--wait", "0"]  # fmt: skip
        result = subprocess.run(argv, env=self.env, cwd=REPO, capture_output=True, text=True,
                                timeout=QUICK_TIMEOUT_S)  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"lease under -X importtime failed:\n{result.stderr[-2000:]}")
        answer = json.loads(result.stdout)
        self.leased[answer["box"]] = answer["lease_id"]
        self.release(answer["box"])
        found["imports"] = top_imports(result.stderr)

        # cProfile's view of the whole process.
        stats = self.work / "lease.prof"
        seconds, box = self.lease(prefix=[*py, "-m", "cProfile", "-o", str(stats), "-m",
                                          "orchestrator"])  # fmt: skip
        self.release(box)
        found["cprofile"] = top_functions(stats)
        return found

    def orch_bare(self, args: list[str]) -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, *args], env=self.env, cwd=REPO, check=True,
                       capture_output=True, timeout=60)  # fmt: skip
        return time.perf_counter() - started

    # -------------------------------------------------------------------- cleanup

    def cleanup(self) -> list[str]:
        """Delete the pool and destroy the cold box, whatever state they are in. Returns what
        went wrong (printed; it does not hide the original error)."""
        problems = []
        if self.pool_created:
            try:
                self.orch("pool", "delete", POOL, "--force", timeout=UP_TIMEOUT_S)
                self.pool_created = False
            except Exception as exc:  # noqa: BLE001 - reported, then the boxes one by one
                if "no pool named" not in str(exc):  # create failed before its record
                    problems.append(f"pool delete: {exc}")
        if self.cold_started:
            try:
                self.orch("down", COLD, timeout=UP_TIMEOUT_S)
                self.cold_started = False
            except Exception as exc:  # noqa: BLE001
                problems.append(f"down {COLD}: {exc}")
        boxes = Path(self.env["ORCH_HOME"]) / "boxes"
        for left in sorted(boxes.iterdir()) if boxes.is_dir() else ():
            # Whatever is still recorded (a pool delete that failed half way).
            with contextlib.suppress(Exception):
                self.orch("down", left.name, timeout=UP_TIMEOUT_S)
        return problems


def candidate():  # noqa: ANN201 - a Candidate
    return support.candidate(
        INSTANCE_TYPE,
        region="us-east-1",
        image={"id": MOTO_AMI},
        root_volume_gib=120,
        ssh_user=getpass.getuser(),
    )


IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S.*)$")


def top_imports(stderr: str, count: int = 14) -> list[tuple[str, float]]:
    """The heaviest imports by cumulative time (-X importtime), top-level packages first."""
    rows = []
    for line in stderr.splitlines():
        match = IMPORT_LINE.match(line)
        if match:
            depth = (len(match.group(3)) - 1) // 2
            rows.append((depth, match.group(4), int(match.group(2)) / 1e6))
    top = sorted((r for r in rows if r[0] <= 1), key=lambda r: -r[2])[:count]
    return [(("  " * depth) + name, seconds) for depth, name, seconds in top]


def top_functions(path: Path, count: int = 18) -> list[tuple[str, float, int]]:
    import pstats

    stats = pstats.Stats(str(path))
    rows = []
    for (file, line, name), (_cc, calls, _tt, cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        short = file.replace(str(REPO) + "/", "")
        short = re.sub(r"^.*site-packages/", "", short)
        rows.append((f"{short}:{line}({name})", cum, calls))
    rows.sort(key=lambda r: -r[1])
    interesting = [r for r in rows if "orchestrator/" in r[0] or "{" in r[0]
                   or "<frozen" in r[0]]  # fmt: skip
    return interesting[:count]


# ------------------------------------------------------------------------------ report


def describe(values: list[float]) -> str:
    return (f"median {statistics.median(values):.2f} s (min {min(values):.2f}, "
            f"max {max(values):.2f}, n={len(values)})")  # fmt: skip


def report(cold: dict[str, float], create_s: float, leases: list[float],
           releases: list[float]) -> tuple[float, bool]:  # fmt: skip
    import moto

    lease_median = statistics.median(leases)
    ratio = lease_median / cold["up"]
    met = ratio <= TARGET_RATIO
    rows = [
        ("cold `orch up` (terraform init + apply + GPU check)", f"{cold['up']:.2f} s"),
        ("  `orch down cold` (not in the ratio)", f"{cold['down']:.2f} s"),
        ("`orch pool create --min 2` (two boxes in parallel)", f"{create_s:.2f} s"),
        ("`orch pool lease --json` (a ready box)", describe(leases)),
        ("ratio lease / cold up (median)",
         f"{ratio:.4f} = 1/{1 / ratio:.1f}  [target <= 1/20 = 0.05: "
         f"{'met' if met else 'MISSED'}]"),
        ("`orch pool release` (reset + GPU check)", describe(releases)),
    ]  # fmt: skip
    width = max(len(label) for label, _ in rows)
    no_pyc = "; PYTHONDONTWRITEBYTECODE set (no .pyc)" * bool(
        os.environ.get("PYTHONDONTWRITEBYTECODE")
    )
    print(f"\norch pool lease vs cold orch up, {INSTANCE_TYPE} plan, on local stand-ins: "
          f"moto {moto.__version__} (EC2), Terraform core + hashicorp/aws from a mirror, the "
          f"GPU check over a real sshd on loopback against a fake nvidia-smi (A10G); local "
          f"pool store; nproc {os.cpu_count()}; Python {sys.version.split()[0]}"
          f"{no_pyc}")  # fmt: skip
    print("boot: 0 s (moto's instance runs when apply returns); a real cold up adds the boot "
          "and cloud-init, which only lowers the ratio")  # fmt: skip
    for label, value in rows:
        print(f"  {label:<{width}}  {value}")
    return ratio, met


def print_profile(found: dict[str, object]) -> None:
    print("\nprofile of `orch pool lease` (medians of 3 unless noted)")
    for key in ("python -c pass", "python -c 'import boto3'", "orch --help",
                "orch pool status --json",
                "lease, bytecode cached (PYTHONPYCACHEPREFIX)"):  # fmt: skip
        print(f"  {key:<58} {found[key]:.3f} s")  # type: ignore[str-format]
    print("  in-process timers (harness; cumulative per process):")
    for key, value in found["marks"].items():  # type: ignore[union-attr]
        unit = "" if key.startswith("calls: ") else " s"
        print(f"    {key:<56} {value:.3f}{unit}" if unit else f"    {key:<56} {value:g}")
    print("  heaviest imports (-X importtime, cumulative, one run):")
    for name, seconds in found["imports"]:  # type: ignore[union-attr]
        print(f"    {name:<56} {seconds:.3f} s")
    print("  cProfile, cumulative (one run; orchestrator, builtins, import machinery):")
    for name, cum, calls in found["cprofile"]:  # type: ignore[union-attr]
        print(f"    {cum:7.3f} s {calls:6d}x  {name[-90:]}")


# ------------------------------------------------------------------------------ main


@contextlib.contextmanager
def pool_bench(mirror_arg: str | None, show_logs: bool) -> Iterator[Bench]:
    """A Bench on a moto of its own in a work folder of its own: one sshd with a fake
    nvidia-smi (A10G) for every box, each box its own key and HOME, a g5.xlarge plan. On the
    way out its pool and boxes are cleaned up, moto stopped and the folder removed."""
    missing = sshbox.prerequisites()
    if missing:
        sys.exit(f"needs {missing}")
    mirror = find_mirror(mirror_arg)
    moto, url = start_moto()
    work = Path(tempfile.mkdtemp(prefix="orch-bench-pool-"))
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        stack.callback(stop_process, moto)
        # moto has no placement groups, which `orch down` asks for: the tests' proxy serves them
        proxy = stack.enter_context(CapacityProxy(url))
        server = sshbox.make_sshbox(work / "sshd")
        stack.callback(server.stop)
        server.serve("a10g")
        routes = sshbox.route_to(server, work / "routes")
        env = {**moto_env(work, mirror, proxy.url), "ORCH_SSH_CONFIG": str(routes),
               "ORCH_OWNER": "bench@orch", "PYTHONUNBUFFERED": "1"}  # fmt: skip
        orch_home = Path(env["ORCH_HOME"])
        orch_home.mkdir(parents=True, exist_ok=True)
        stack.enter_context(sshbox.KeyRouter(server, orch_home, work / "homes"))
        plan = work / "plan.json"
        write_plan(Plan({"model": "bert-large"}, {}, candidate(), [],
                        "2026-12-02T19:00:00Z"), plan)  # fmt: skip
        bench = Bench(work, env, plan, show_logs)
        stack.callback(lambda: [print(f"cleanup: {p}", file=sys.stderr)
                                for p in bench.cleanup()])  # fmt: skip
        yield bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="leases (each then released)")
    parser.add_argument("--mirror", help="Terraform provider mirror holding hashicorp/aws")
    parser.add_argument("--profile", action="store_true",
                        help="profile the lease even when the target is met")  # fmt: skip
    parser.add_argument("--show-logs", action="store_true", help="print each orch's stderr")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    try:
        with pool_bench(args.mirror, args.show_logs) as bench:
            bench.warm_plugin_cache()
            cold = bench.cold()
            print(f"cold orch up {cold['up']:.2f} s (down {cold['down']:.2f} s)", flush=True)
            create_s = bench.create_pool()
            print(f"pool create --min 2: {create_s:.2f} s", flush=True)
            leases, releases = [], []
            for n in range(args.repeat):
                seconds, box = bench.lease()
                leases.append(seconds)
                releases.append(bench.release(box))
                print(f"lease {n + 1}: {box} in {seconds:.2f} s, release {releases[-1]:.2f} s",
                      flush=True)  # fmt: skip
            _ratio, met = report(cold, create_s, leases, releases)
            if not met or args.profile:
                print_profile(bench.profile())
    except Exception:
        print("benchmark failed; the pool and the cold box were cleaned up", file=sys.stderr)
        raise


if __name__ == "__main__":
    main()
