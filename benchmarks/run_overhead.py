"""What `orch run` adds on top of Terraform, and how long a spot reclaim costs it.

Everything is a local stand-in, as in tests/e2e/test_run.py: moto for EC2/S3 (behind the e2e
CapacityProxy, which gives reclaimed instances EC2's spot StateReason), the real Terraform core
and hashicorp/aws from a provider mirror, the "box" a real sshd on loopback that every moto
address is routed to (ORCH_SSH_CONFIG) with a fake nvidia-smi, real rsync, and the metadata
stand-in for the checkpoint agent.

1. Run overhead. Each repetition first applies the same rendered root module with raw
   Terraform (init, apply, destroy timed apart), then times `orch run --plan ... -- CMD` from
   its start to CMD's first output line on orch's stdout, and on to orch's exit.
       overhead = (orch run -> first output line) - (raw terraform apply)
   Nothing is subtracted for boot: on moto the instance is "running" when apply returns and
   the sshd already listens. orch's GPU check (SSH + the fake nvidia-smi) stays in the
   overhead; it is shown in the breakdown. Target: overhead <= 20 s.
2. Recovery. A spot run with --checkpoint-dir/--store/--spot-recovery 1; once CMD counts and a
   checkpoint is uploaded, the instance is terminated with EC2's reclaim reason (its job's
   processes killed and the box's disk wiped, like the e2e test). Timed: reclaim -> CMD's first
   output line on the replacement box. Target: <= the recovery's terraform apply + 60 s.

Both use --watch-interval (default 1 s here; orch's default 15 s adds up to 15 s to noticing
a reclaim). The phases come from orch's own stderr lines, each timestamped on arrival.

    PYTHONPATH=. .venv/bin/python benchmarks/run_overhead.py [--repeat N] [--mirror DIR]
        [--watch-interval S] [--show-logs]   (--show-logs: every orch line, timestamped)

Needs moto_server, OpenSSH (sshd, ssh, ssh-keygen), rsync, and a provider mirror with
hashicorp/aws (--mirror, $ORCH_TEST_TF_MIRROR or a standard place). Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

# Counts with a checkpoint (the e2e test's job): attempt 2 resumes where attempt 1 saved.
from tests.e2e.test_run import COUNTER_PY  # noqa: E402
from tests.sim.metadata import MetadataService  # noqa: E402

MOTO_AMI = "ami-1e749f67"
INSTANCE_TYPE = "g5.xlarge"  # one A10G: what the sshd's fake nvidia-smi serves ("a10g")
ORCH_TIMEOUT_S = 600  # one orch run, start to exit
TARGET_OVERHEAD_S = 20.0
TARGET_RECOVERY_EXTRA_S = 60.0

FIRST_LINE_PY = 'print("first line from the box", flush=True)\n'

PROGRESS = re.compile(r"^\s+\[\s*([\d.]+)s\] ")


# ------------------------------------------------------------------------------ orch runs


class Stream:
    """A process's lines, each with the monotonic time it arrived (read from a thread)."""

    def __init__(self, pipe: Any):
        self.lines: list[tuple[float, str]] = []
        self.thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.thread.start()

    def _read(self, pipe: Any) -> None:
        for line in pipe:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def find(self, text: str, nth: int = 1, after: float = 0.0) -> float | None:
        """When the nth line (arrived after `after`) containing `text` came, or None."""
        seen = 0
        for at, line in list(self.lines):
            if at >= after and text in line:
                seen += 1
                if seen == nth:
                    return at
        return None

    def wait_for(self, text: str, timeout: float, process: subprocess.Popen[str]) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            at = self.find(text)
            if at is not None:
                return at
            if process.poll() is not None:
                self.thread.join(timeout=5)
                at = self.find(text)
                if at is not None:
                    return at
                raise RuntimeError(f"orch exited {process.returncode} before {text!r}")
            time.sleep(0.05)
        raise RuntimeError(f"no {text!r} within {timeout:.0f}s")

    def text(self, last: int = 60) -> str:
        return "\n".join(line for _, line in self.lines[-last:])


@dataclass
class OrchRun:
    name: str
    argv: list[str]
    env: dict[str, str]
    started: float = 0.0
    ended: float | None = None
    process: subprocess.Popen[str] | None = None
    out: Stream | None = None
    err: Stream | None = None
    marks: dict[str, float] = field(default_factory=dict)

    def start(self) -> OrchRun:
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", *self.argv],
            env=self.env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out, self.err = Stream(self.process.stdout), Stream(self.process.stderr)
        return self

    def wait(self, timeout: float) -> int:
        assert self.process is not None and self.out and self.err
        code = self.process.wait(timeout=timeout)
        self.ended = time.monotonic()
        self.out.thread.join(timeout=10)
        self.err.thread.join(timeout=10)
        return code

    def stop(self) -> None:
        """Cancel a run still going (orch stops the job and destroys the box), bounded."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=180)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)

    def timeline(self) -> str:
        """Every line of both streams, in arrival order, seconds since orch started."""
        assert self.out and self.err
        merged = sorted([(at, "err", line) for at, line in self.err.lines]
                        + [(at, "out", line) for at, line in self.out.lines])  # fmt: skip
        return "\n".join(f"{at - self.started:7.2f} {k} {line}" for at, k, line in merged)

    def log(self) -> str:
        assert self.out and self.err
        return f"--- stdout\n{self.out.text()}\n--- stderr\n{self.err.text()}"


def up_phases(run: OrchRun, nth: int) -> dict[str, float]:
    """Times (monotonic) of one box's way to a running job, from orch's stderr lines:
    create (box rendered, `creating box` said), apply (Terraform's apply process began: the
    first progress line minus the elapsed time it carries), check, sync, started."""
    assert run.err is not None
    marks = {
        "create": run.err.find("orch: creating box", nth),
        "check": run.err.find("orch: checking the GPUs of box", nth),
        "sync": run.err.find("orch: syncing ", nth),
        "started": run.err.find(" started on box ", nth),
    }
    missing = [k for k, v in marks.items() if v is None]
    if missing:
        raise RuntimeError(f"orch never said {missing}:\n{run.log()}")
    for at, line in run.err.lines:
        if at > marks["create"] and (match := PROGRESS.match(line)):  # type: ignore[operator]
            marks["apply"] = at - float(match.group(1))
            break
    else:
        raise RuntimeError(f"no Terraform progress line after `creating box`:\n{run.log()}")
    return marks  # type: ignore[return-value]


# ------------------------------------------------------------------------------ the bench


@dataclass
class Bench:
    work: Path
    env: dict[str, str]  # orch and raw Terraform alike (through the proxy)
    box: sshbox.SshBox
    box_home: Path
    watch_interval: float
    proxy: CapacityProxy
    ec2: Any  # boto3, straight to moto
    show_logs: bool = False
    leftovers: list[str] = field(default_factory=list)  # box names to `orch down` at the end

    def candidate(self, market: str = "on-demand", **changes: Any) -> Any:
        return support.candidate(
            INSTANCE_TYPE,
            market,
            region="us-east-1",
            image={"id": MOTO_AMI},
            root_volume_gib=120,
            ssh_user=getpass.getuser(),
            **changes,
        )

    def plan(self, name: str, market: str = "on-demand", **changes: Any) -> Path:
        path = self.work / f"{name}.plan.json"
        chosen = self.candidate(market, **changes)
        write_plan(Plan({"model": "bert-large"}, {}, chosen, [], "2026-12-02T19:00:00Z"), path)
        return path

    def workdir(self, name: str, files: dict[str, str]) -> Path:
        path = self.work / name
        path.mkdir()
        for file, text in files.items():
            (path / file).write_text(text)
        return path

    def run_argv(self, plan: Path, name: str, workdir: Path, *more: str) -> list[str]:
        return ["run", "--plan", str(plan), "--name", name, "--ssh-cidr", CIDR,
                "--workdir", str(workdir), "--watch-interval", str(self.watch_interval),
                *more]  # fmt: skip

    def wipe_box(self) -> None:
        """What a terminated instance leaves: nothing. Kill any job still running there."""
        runs = self.box_home / ".orch" / "runs"
        for pid_file in runs.glob("*/pid") if runs.exists() else ():
            with contextlib.suppress(ValueError, OSError):
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        for sub in (".orch", "orch"):
            shutil.rmtree(self.box_home / sub, ignore_errors=True)

    # -------------------------------------------------------------------- raw Terraform

    def raw_terraform(self, n: int) -> dict[str, float]:
        directory = render_template(self.work / f"raw-{n}", self.candidate(), f"bench-raw-{n}")
        tf = [sys.executable, "-m", "orchestrator.provision.libtf_exec"]
        env = raw_env(self.env)
        times: dict[str, float] = {}

        def timed(what: str, *args: str) -> None:
            started = time.monotonic()
            argv = [*tf, *args, "-input=false"]
            result = subprocess.run(
                argv, env=env, cwd=directory, capture_output=True, text=True, timeout=ORCH_TIMEOUT_S
            )
            times[what] = time.monotonic() - started
            if result.returncode != 0:
                raise RuntimeError(f"terraform {what} failed:\n{result.stderr[-2000:]}")

        timed("init", "init")
        try:
            timed("apply", "apply", "-auto-approve")
        finally:
            timed("destroy", "destroy", "-auto-approve")
        return times

    # -------------------------------------------------------------------- 1. overhead

    def overhead(self, n: int) -> dict[str, float]:
        name = f"bench-run-{n}"
        workdir = self.workdir(f"first-line-{n}", {"job.py": FIRST_LINE_PY})
        run = OrchRun(name, self.run_argv(self.plan(name), name, workdir, "--", "python3",
                                          "job.py"), self.env)  # fmt: skip
        self.leftovers.append(name)
        try:
            run.start()
            assert run.out is not None and run.err is not None
            first = run.out.wait_for("first line from the box", ORCH_TIMEOUT_S, run.process)  # type: ignore[arg-type]
            code = run.wait(ORCH_TIMEOUT_S)
            if self.show_logs:
                print(f"--- {name}\n{run.timeline()}", flush=True)
        finally:
            run.stop()
            self.wipe_box()
        if code != 0:
            raise RuntimeError(f"orch run exited {code}:\n{run.log()}")
        assert run.ended is not None
        m = up_phases(run, 1)
        destroying = run.err.find("orch: destroying box")
        if destroying is None:
            raise RuntimeError(f"orch never destroyed the box:\n{run.log()}")
        self.leftovers.remove(name)
        return {
            "first_line": first - run.started,
            "total": run.ended - run.started,
            "startup": m["create"] - run.started,
            "init": m["apply"] - m["create"],
            "apply": m["check"] - m["apply"],
            "check_prepare": m["sync"] - m["check"],
            "sync_launch": m["started"] - m["sync"],
            "stream": first - m["started"],
            "after_cmd": destroying - first,
            "destroy": run.ended - destroying,
        }

    # -------------------------------------------------------------------- 2. recovery

    def recovery(self, n: int, s3: Any) -> dict[str, float]:
        name = f"bench-spot-{n}"
        bucket = f"ckpt-{n}"
        s3.create_bucket(Bucket=bucket)
        workdir = self.workdir(f"counter-{n}", {"counter.py": COUNTER_PY})
        argv = self.run_argv(
            self.plan(name, "spot", price_per_hour=0.4), name, workdir,
            "--checkpoint-dir", "ckpt", "--store", f"s3://{bucket}/runs",
            "--checkpoint-interval", "1", "--spot-recovery", "1",
            "--", "python3", "counter.py", "40", "0.25", "5",  # attempt 1 holds at 5
        )  # fmt: skip
        run = OrchRun(name, argv, self.env)
        self.leftovers.append(name)
        try:
            run.start()
            assert run.out is not None and run.err is not None and run.process is not None
            run.out.wait_for("count 5", ORCH_TIMEOUT_S, run.process)
            (run_dir,) = (self.box_home / ".orch" / "runs").iterdir()
            deadline = time.monotonic() + 60
            while not (run_dir / "last_upload.json").exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the agent uploaded no checkpoint:\n{run.log()}")
                time.sleep(0.1)
            instance = self.instance(name)
            # The spot service takes the box: terminated with EC2's reclaim reason, its
            # processes and disk gone.
            self.proxy.spot_reclaimed.add(instance)
            reclaimed = time.monotonic()
            self.ec2.terminate_instances(InstanceIds=[instance])
            os.killpg(int((run_dir / "pid").read_text()), signal.SIGKILL)
            self.wipe_box()
            running_again = run.out.wait_for("attempt=2 ", ORCH_TIMEOUT_S, run.process)
            code = run.wait(ORCH_TIMEOUT_S)
            if self.show_logs:
                print(f"--- {name}\n{run.timeline()}", flush=True)
        finally:
            run.stop()
            self.wipe_box()
        if code != 0:
            raise RuntimeError(f"orch run exited {code}:\n{run.log()}")
        detected = run.err.find("is gone (", after=reclaimed)
        destroying = run.err.find("orch: destroying box", after=reclaimed)
        if detected is None or destroying is None:
            raise RuntimeError(f"orch did not say it lost and destroyed the box:\n{run.log()}")
        m = up_phases(run, 2)
        self.leftovers.remove(name)
        return {
            "recovery": running_again - reclaimed,
            "detect": detected - reclaimed,
            "down_old": m["create"] - detected,
            "init": m["apply"] - m["create"],
            "apply": m["check"] - m["apply"],
            "check_prepare": m["sync"] - m["check"],
            "sync_launch": m["started"] - m["sync"],  # includes the checkpoint restore
            "stream": running_again - m["started"],
        }

    def instance(self, name: str) -> str:
        pages = self.ec2.describe_instances(Filters=[{"Name": "tag:orch:box", "Values": [name]}])
        live = [
            i["InstanceId"]
            for r in pages["Reservations"]
            for i in r["Instances"]
            if i["State"]["Name"] != "terminated"
        ]
        if len(live) != 1:
            raise RuntimeError(f"expected one live instance of {name}, found {live}")
        return live[0]

    def down_leftovers(self) -> None:
        for name in self.leftovers:
            subprocess.run([sys.executable, "-m", "orchestrator", "down", name], env=self.env,
                           cwd=REPO, capture_output=True, timeout=300, check=False)  # fmt: skip


# ------------------------------------------------------------------------------ main


def median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def report(raw: list[dict[str, float]], runs: list[dict[str, float]],
           recs: list[dict[str, float]], watch: float) -> None:  # fmt: skip
    apply_s = median(raw, "apply")
    first = median(runs, "first_line")
    overhead = first - apply_s
    rec = median(recs, "recovery")
    rec_apply = median(recs, "apply")
    verdict = "met" if overhead <= TARGET_OVERHEAD_S else "MISSED"
    rec_target = rec_apply + TARGET_RECOVERY_EXTRA_S
    rec_verdict = "met" if rec <= rec_target else "MISSED"
    rows = [
        ("raw terraform init (not subtracted)", median(raw, "init")),
        ("raw terraform apply", apply_s),
        ("raw terraform destroy", median(raw, "destroy")),
        ("orch run -> CMD's first output line", first),
        (
            f"overhead = first line - raw apply  [target <= {TARGET_OVERHEAD_S:.0f} s: {verdict}]",
            overhead,
        ),  # fmt: skip
        ("  orch start-up (imports, plan, render)", median(runs, "startup")),
        ("  terraform init (in orch up)", median(runs, "init")),
        ("  terraform apply + outputs (in orch up)", median(runs, "apply")),
        ("  GPU check + prepare (ssh)", median(runs, "check_prepare")),
        ("  sync (rsync) + launch", median(runs, "sync_launch")),
        ("  started -> first line streamed", median(runs, "stream")),
        ("orch: CMD's output -> `destroying box` (status)", median(runs, "after_cmd")),
        ("orch destroy (`destroying box` -> exit)", median(runs, "destroy")),
        ("orch run total (start -> exit)", median(runs, "total")),
        (
            f"recovery: reclaim -> CMD running again  [target <= apply + "
            f"{TARGET_RECOVERY_EXTRA_S:.0f} = {rec_target:.1f} s: {rec_verdict}]",
            rec,
        ),  # fmt: skip
        ("  reclaim -> orch says the box is gone", median(recs, "detect")),
        ("  destroy the lost box", median(recs, "down_old")),
        ("  terraform init", median(recs, "init")),
        ("  terraform apply + outputs (the recovery's apply)", median(recs, "apply")),
        ("  GPU check + prepare (ssh)", median(recs, "check_prepare")),
        ("  sync + restore checkpoint + launch", median(recs, "sync_launch")),
        ("  started -> first line streamed", median(recs, "stream")),
    ]
    width = max(len(label) for label, _ in rows)
    print(f"\norch run on local stand-ins (moto, sshd on loopback); medians of {len(runs)} "
          f"repetition(s); nproc {os.cpu_count()}; --watch-interval {watch:g} s")  # fmt: skip
    print("boot subtracted: 0 s (moto's instance runs when apply returns, the sshd listens)")
    for label, value in rows:
        print(f"{label:<{width}}  {value:7.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="repetitions (medians printed)")
    parser.add_argument("--show-logs", action="store_true",
                        help="print each orch run's lines, timestamped (to profile)")  # fmt: skip
    parser.add_argument("--mirror", help="Terraform provider mirror holding hashicorp/aws")
    parser.add_argument("--watch-interval", type=float, default=1.0,
                        help="orch run --watch-interval (s); orch's default is 15")  # fmt: skip
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    missing = sshbox.prerequisites() or (None if shutil.which("rsync") else "rsync")
    if missing:
        sys.exit(f"needs {missing}")
    mirror = find_mirror(args.mirror)

    import boto3

    moto, url = start_moto()
    work = Path(tempfile.mkdtemp(prefix="orch-bench-run-"))
    bench: Bench | None = None
    try:
        with contextlib.ExitStack() as stack:
            proxy = stack.enter_context(CapacityProxy(url))
            metadata = stack.enter_context(MetadataService())
            box = sshbox.make_sshbox(work / "sshd")
            stack.callback(box.stop)
            box_home = work / "box-home"
            # What a real box has: credentials from its role (moto's S3) and the metadata
            # service (the checkpoint agent polls it for spot notices).
            sshbox.set_box_environment(box, box_home, {
                "AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                "ORCH_AGENT_METADATA_URL": metadata.url,
            })  # fmt: skip
            box.serve("a10g")
            routes = sshbox.route_every_host(box, work / "routes")
            env = {**moto_env(work, mirror, url), "AWS_ENDPOINT_URL": proxy.url,
                   "ORCH_SSH_CONFIG": str(routes), "PYTHONUNBUFFERED": "1"}  # fmt: skip
            client = dict(endpoint_url=url, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
            ec2 = boto3.client("ec2", **client)
            bench = Bench(work, env, box, box_home, args.watch_interval, proxy, ec2, args.show_logs)
            s3 = boto3.client("s3", **client)
            stack.callback(bench.down_leftovers)
            raw, runs, recs = [], [], []
            for n in range(args.repeat):
                raw.append(bench.raw_terraform(n))
                runs.append(bench.overhead(n))
                recs.append(bench.recovery(n, s3))
                print(f"rep {n + 1}: raw apply {raw[-1]['apply']:.2f}s, orch run -> first line "
                      f"{runs[-1]['first_line']:.2f}s, recovery {recs[-1]['recovery']:.2f}s "
                      f"(apply {recs[-1]['apply']:.2f}s)", flush=True)  # fmt: skip
            report(raw, runs, recs, args.watch_interval)
    finally:
        if bench is not None:
            bench.wipe_box()
        stop_process(moto)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
