"""`orch run` end to end: real Terraform core + hashicorp/aws against moto, the box's SSH
served by a real sshd on loopback (every moto address routed to it by ORCH_SSH_CONFIG), real
rsync. The job's files land under the box's own HOME (tmp), as on a fresh instance.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests import support
from tests.e2e import sshbox
from tests.support import ok, plan_file, require

pytestmark = pytest.mark.e2e

CIDR = "203.0.113.7/32"
MOTO_AMI = "ami-1e749f67"
HOLD = 10  # the first attempt of COUNTER_PY counts to here, then waits to be reclaimed
SPOT_BUCKET = "ckpt-spot"  # the spot test's own: the moto server is shared

candidate = partial(
    support.candidate,
    region="us-east-1",
    image={"id": MOTO_AMI},
    root_volume_gib=120,
    ssh_user=os.environ.get("USER") or __import__("getpass").getuser(),
)

TRAIN_PY = """\
import os, pathlib, signal, sys, time
args = sys.argv[1:]
steps = int(args[args.index("--steps") + 1])
delay = float(args[args.index("--delay") + 1]) if "--delay" in args else 0.0
out = pathlib.Path("outputs")
out.mkdir(exist_ok=True)

def stopped(signum, frame):
    (out / "partial.txt").write_text(f"stopped at {step}\\n")
    print("got SIGTERM", flush=True)
    sys.exit(143)

signal.signal(signal.SIGTERM, stopped)
print("greeting=" + os.environ.get("GREETING", ""), flush=True)
print(f"resumed={os.environ['ORCH_RESUMED']} attempt={os.environ['ORCH_ATTEMPT']}", flush=True)
step = 0
for step in range(1, steps + 1):
    print(f"step {step}", flush=True)
    time.sleep(delay)
(out / "result.txt").write_text(f"done {steps}\\n")
sys.exit(int(os.environ.get("EXIT_CODE", "0")))
"""


@pytest.fixture
def box_server(tmp_path: Path):
    require(sshbox.prerequisites() is None, sshbox.prerequisites() or "")
    require(shutil.which("rsync"), "rsync (orch run syncs with it)")
    server = sshbox.make_sshbox(tmp_path / "sshd")
    sshbox.set_box_environment(server, tmp_path / "box-home")
    server.serve("a10g")  # g5.xlarge's GPU
    yield server
    server.stop()


@pytest.fixture
def run_env(aws_env: dict[str, str], box_server: sshbox.SshBox, tmp_path: Path) -> dict[str, str]:
    routes = sshbox.route_every_host(box_server, tmp_path / "routes")
    return {**aws_env, "ORCH_SSH_CONFIG": str(routes)}


def workdir_with_job(tmp_path: Path) -> Path:
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "train.py").write_text(TRAIN_PY)
    (workdir / ".gitignore").write_text("data/\n")
    (workdir / "data").mkdir()
    (workdir / "data" / "big.bin").write_bytes(b"x" * 4096)
    (workdir / "notes.tmp").write_text("scratch")
    return workdir


def box_work(tmp_path: Path) -> Path:
    return tmp_path / "box-home" / "orch" / "work" / "project"


def instances(ec2: Any, name: str, live: bool = True) -> list[dict[str, Any]]:
    pages = ec2.describe_instances(Filters=[{"Name": "tag:orch:box", "Values": [name]}])
    found = [i for r in pages["Reservations"] for i in r["Instances"]]
    return [i for i in found if i["State"]["Name"] != "terminated"] if live else found


def assert_nothing_tagged(ec2: Any, name: str) -> None:
    assert instances(ec2, name) == []
    groups = ec2.describe_security_groups(Filters=[{"Name": "tag:orch:box", "Values": [name]}])
    assert groups["SecurityGroups"] == []
    keys = [
        k for k in ec2.describe_key_pairs()["KeyPairs"] if k["KeyName"].startswith(f"orch-{name}-")
    ]
    assert keys == []


def run_args(plan: str, name: str, workdir: Path, *more: str) -> list[str]:
    return ["run", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--workdir", str(workdir),
            "--watch-interval", "1", *more]  # fmt: skip


# ------------------------------------------------------------------------------ scenarios


def test_run_syncs_runs_streams_fetches_and_destroys(orch, ec2, run_env, tmp_path):
    workdir = workdir_with_job(tmp_path)
    plan = plan_file(tmp_path, candidate("g5.xlarge"))
    result = orch(
        *run_args(plan, "run-ok", workdir, "--env", "GREETING=hello 'world' $HOME",
                  "--setup", "echo setup-ran > setup.txt", "--exclude", "*.tmp",
                  "--fetch", "outputs", "--fetch", "not-there", "--json",
                  "--", "python3", "train.py", "--steps", "3"),
        env=run_env,
    )  # fmt: skip
    ok(result)
    report = json.loads(result.stdout)
    # CMD's output streamed (to stderr under --json), with the environment as given.
    assert "greeting=hello 'world' $HOME" in result.stderr
    assert "resumed=0 attempt=1" in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("step ")] == [
        "step 1", "step 2", "step 3"
    ]  # fmt: skip
    assert report["exit_code"] == 0 and report["box_destroyed"] is True
    assert report["fetched"] == ["outputs"]
    assert "--fetch not-there: not on the box" in result.stderr
    (attempt,) = report["attempts"]
    assert attempt["outcome"] == "completed" and attempt["instance_type"] == "g5.xlarge"
    assert attempt["cost_usd"] is not None and report["on_demand_cost_usd"] is not None

    # Fetched back; synced honouring .gitignore, .git and --exclude; setup ran first.
    assert (workdir / "outputs" / "result.txt").read_text() == "done 3\n"
    remote = box_work(tmp_path)
    assert (remote / "train.py").exists() and (remote / "setup.txt").read_text() == "setup-ran\n"
    assert not (remote / "data").exists() and not (remote / "notes.tmp").exists()
    # No environment value was written on the box (the run folder holds scripts and logs).
    run_dir = next((tmp_path / "box-home" / ".orch" / "runs").iterdir())
    for path in run_dir.iterdir():
        if path.name != "output.log":
            assert "hello 'world'" not in path.read_text(errors="replace"), path.name
    assert oct(run_dir.stat().st_mode & 0o777) == "0o700"

    assert_nothing_tagged(ec2, "run-ok")
    listed = json.loads(ok(orch("list", "--json", env=run_env)).stdout)
    assert listed == [] or all(b["name"] != "run-ok" for b in listed)


def test_run_exit_status_is_the_command_s_and_the_box_is_gone(orch, ec2, run_env, tmp_path):
    workdir = workdir_with_job(tmp_path)
    plan = plan_file(tmp_path, candidate("g5.xlarge"))
    result = orch(
        *run_args(plan, "run-exit3", workdir, "--env", "EXIT_CODE=3", "--fetch", "outputs",
                  "--", "python3", "train.py", "--steps", "2"),
        env=run_env,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert "step 2" in result.stdout
    assert "the command exited 3" in result.stderr
    assert (workdir / "outputs" / "result.txt").exists()  # fetched even though CMD failed
    assert_nothing_tagged(ec2, "run-exit3")


class Lines:
    """Collect a process's stdout lines from a thread, to wait for one."""

    def __init__(self, stream: Any):
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never came; got {self.lines[-20:]}")


def test_sigterm_mid_run_stops_the_job_fetches_and_destroys(orch_process, ec2, run_env, tmp_path):
    workdir = workdir_with_job(tmp_path)
    plan = plan_file(tmp_path, candidate("g5.xlarge"))
    proc = orch_process(
        *run_args(plan, "run-term", workdir, "--fetch", "outputs",
                  "--", "python3", "train.py", "--steps", "600", "--delay", "0.2"),
        env=run_env,
    )  # fmt: skip
    out = Lines(proc.stdout)
    out.wait_for("step 3", timeout=300)
    proc.send_signal(signal.SIGTERM)
    stderr = proc.stderr.read()
    assert proc.wait(timeout=300) == 130, stderr
    out.thread.join(timeout=10)
    assert "stopping run" in stderr
    # The job saw the TERM (it wrote its partial output), and that output came back.
    assert (workdir / "outputs" / "partial.txt").read_text().startswith("stopped at ")
    run_dir = next((tmp_path / "box-home" / ".orch" / "runs").iterdir())
    pid = int((run_dir / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert (run_dir / "exit").read_text().split()[1] == "cmd"
    assert_nothing_tagged(ec2, "run-term")


def kill_log_streams_under(box_home: Path) -> int:
    """SIGKILL the `tail -c +N` that streams a run's log from this box (a dropped SSH stream),
    and only that one: tests in other pytest workers stream logs of their own."""
    killed = 0
    for pid in sshbox.processes_of(box_home):
        with contextlib.suppress(OSError):  # gone meanwhile
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == [b"tail", b"-c"]:
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


def test_existing_box_detach_logs_stop_wait_ssh_and_reconnects(
    orch, orch_process, run_env, tmp_path
):
    """One box (kept: runs on an existing box never destroy it), several runs."""
    user_config = tmp_path / "user-ssh-config"
    env = {**run_env, "ORCH_USER_SSH_CONFIG": str(user_config)}
    plan = plan_file(tmp_path, candidate("g5.xlarge"))
    ok(orch("up", "--plan", plan, "--name", "kept", "--ttl", "1h", "--ssh-cidr", CIDR,
            "--ssh-alias", "--no-check", env=env))  # fmt: skip
    # --ssh-alias: `Host orch-kept` in its own file, included first in the user's ssh_config.
    home = Path(env["ORCH_HOME"])
    alias = (home / "ssh" / "kept.conf").read_text()
    assert "Host orch-kept" in alias and "IdentitiesOnly yes" in alias
    assert user_config.read_text().splitlines()[1] == f"Include {home / 'ssh'}/*.conf"
    assert oct(user_config.stat().st_mode & 0o777) == "0o600"

    workdir = workdir_with_job(tmp_path)
    base = ["run", "--box", "kept", "--workdir", str(workdir), "--no-check"]

    # Setup fails: its status is the run's, the box stays.
    failed = orch(*base, "--setup", "exit 7", "--", "python3", "train.py", "--steps", "1", env=env)
    assert failed.returncode == 7, failed.stderr
    assert "setup exited 7" in failed.stderr and "step 1" not in failed.stdout

    # orch ssh runs a command with the box's key and pinned host key.
    shown = ok(orch("ssh", "kept", "--", "echo", "hi from", "$HOME", env=env))
    assert shown.stdout == "hi from $HOME\n"

    # SSH dropped mid-run: the output resumes where it stopped, nothing lost or repeated.
    proc = orch_process(*base, "--", "python3", "train.py", "--steps", "40", "--delay", "0.05",
                        env=env)  # fmt: skip
    out = Lines(proc.stdout)
    out.wait_for("step 5")
    assert kill_log_streams_under(tmp_path / "box-home") == 1  # a stream was there to kill
    stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, stderr
    out.thread.join(timeout=10)
    steps = [line for line in out.lines if line.startswith("step ")]
    assert steps == [f"step {i}" for i in range(1, 41)]
    assert "reconnecting from byte" in stderr

    # Detached: back at once; logs, stop and wait find the run by the box's name.
    detached = ok(orch(*base, "--detach", "--fetch", "outputs", "--", "python3", "train.py",
                       "--steps", "100000", "--delay", "0.05", env=env))  # fmt: skip
    assert "orch wait kept" in detached.stderr
    deadline = time.monotonic() + 180  # only bounds a hang: the loop ends on step 3
    while "step 3" not in (logs := ok(orch("logs", "kept", env=env)).stdout):
        assert time.monotonic() < deadline, logs
        time.sleep(0.5)
    stopped = ok(orch("stop", "kept", env=env))
    assert "exit 143" in stopped.stderr
    waited = orch("wait", "kept", "--json", env=env)
    assert waited.returncode == 143, waited.stderr
    outcome = json.loads(waited.stdout)
    assert outcome["box_destroyed"] is False and outcome["fetched"] == ["outputs"]
    assert (workdir / "outputs" / "partial.txt").exists()

    ok(orch("down", "kept", env=env))
    assert not (home / "ssh" / "kept.conf").exists()


COUNTER_PY = """\
import json, os, pathlib, sys, time
ckpt = pathlib.Path(os.environ["ORCH_CHECKPOINT_DIR"])
state = ckpt / "state.json"
done = json.loads(state.read_text())["done"] if state.exists() else []
print(f"attempt={os.environ['ORCH_ATTEMPT']} resumed={os.environ['ORCH_RESUMED']} "
      f"from={len(done)}", flush=True)
target, delay = int(sys.argv[1]), float(sys.argv[2])
# The first attempt stops counting at HOLD and waits to be reclaimed, however slow the machine:
# the reclaim never races the count.
hold = int(sys.argv[3]) if os.environ["ORCH_ATTEMPT"] == "1" else None
for n in range(len(done) + 1, target + 1):
    time.sleep(delay)
    done.append(n)
    tmp = ckpt / "state.json.tmp"
    tmp.write_text(json.dumps({"done": done}))
    os.replace(tmp, state)  # a checkpoint is whole or absent
    print(f"count {n}", flush=True)
    while n == hold:
        time.sleep(0.2)
pathlib.Path("outputs").mkdir(exist_ok=True)
pathlib.Path("outputs", "count.json").write_text(json.dumps(done))
"""


def wait_until(predicate: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def role_policy_of(ec2: Any, iam: Any, instance: dict[str, Any]) -> dict[str, Any]:
    """The inline policy of the role behind an instance's instance profile."""
    (found,) = ec2.describe_instances(InstanceIds=[instance["InstanceId"]])["Reservations"]
    profile = found["Instances"][0]["IamInstanceProfile"]["Arn"].rsplit("/", 1)[1]
    (role,) = iam.get_instance_profile(InstanceProfileName=profile)["InstanceProfile"]["Roles"]
    (name,) = iam.list_role_policies(RoleName=role["RoleName"])["PolicyNames"]
    document = iam.get_role_policy(RoleName=role["RoleName"], PolicyName=name)["PolicyDocument"]
    return json.loads(document) if isinstance(document, str) else document


def assert_role_reaches_only_its_run(policy: dict[str, Any], bucket: str) -> None:
    """The box's role may touch this run's checkpoints and nothing else."""
    statements = policy["Statement"]
    objects = next(s for s in statements if "s3:PutObject" in s["Action"])
    (resource,) = objects["Resource"]
    assert resource.startswith(f"arn:aws:s3:::{bucket}/runs/r-")
    assert resource.endswith("/*")
    listing = next(s for s in statements if s["Action"] == ["s3:ListBucket"])
    assert listing["Resource"] == [f"arn:aws:s3:::{bucket}"]
    run_prefix = resource.removeprefix(f"arn:aws:s3:::{bucket}/")
    assert listing["Condition"] == {"StringLike": {"s3:prefix": [run_prefix]}}


def assert_one_reclaim_recovered(report: dict[str, Any], reason: str) -> None:
    assert report["exit_code"] == 0 and report["recoveries"] == 1
    lost, finished = report["attempts"]
    assert lost["outcome"] == "reclaimed" and reason in lost["reason"]
    assert finished["outcome"] == "completed" and finished["market"] == "spot"
    assert report["time_lost_s"] > 0 and report["cost_usd"] is not None


def checkpointed_count(s3: Any, bucket: str) -> int:
    """How far the newest committed checkpoint in the store got (0: none yet).

    Each test keeps its checkpoints in a bucket of its own: the moto server is shared by the
    whole session, so a bucket two tests wrote to would mix their runs."""
    listing = s3.list_objects_v2(Bucket=bucket, Prefix="runs/").get("Contents", [])
    latest = [o["Key"] for o in listing if o["Key"].endswith("/checkpoints/LATEST")]
    if not latest:
        return 0
    seq = s3.get_object(Bucket=bucket, Key=latest[0])["Body"].read().decode().strip()
    state = s3.get_object(Bucket=bucket, Key=latest[0].replace("LATEST", f"{seq}/state.json"))
    return len(json.loads(state["Body"].read())["done"])


def reclaim(ec2: Any, capacity_proxy: Any, instance_id: str, run_dir: Path, box_home: Path) -> None:
    """The spot service takes the box: the instance terminates (with EC2's reclaim reason),
    its processes and its disk go with it."""
    capacity_proxy.spot_reclaimed.add(instance_id)
    ec2.terminate_instances(InstanceIds=[instance_id])
    os.killpg(int((run_dir / "pid").read_text()), signal.SIGKILL)
    shutil.rmtree(box_home / ".orch")
    shutil.rmtree(box_home / "orch")


def assert_resumed_once(lines: list[str], saved: int | None) -> None:
    """The second attempt resumed from the checkpoint: the last count the first attempt made
    before its TERM (the final upload took it) when `saved` is None, else at least the
    periodic upload seen before the reclaim."""
    resumed = [line for line in lines if line.startswith("attempt=2 resumed=1 from=")]
    assert len(resumed) == 1
    start = int(resumed[0].rsplit("=", 1)[1])
    if saved is None:
        second = next(i for i, line in enumerate(lines) if line.startswith("attempt=2"))
        counted = max(int(x.split()[1]) for x in lines[:second] if x.startswith("count "))
        assert counted <= start <= counted + 1
    else:
        assert saved <= start <= HOLD


@pytest.mark.parametrize("notice", [True, False], ids=["notice-on-the-box", "ec2-reclaim-only"])
def test_spot_reclaim_mid_run_recovers_from_the_checkpoint_exactly_once(
    orch_process, ec2, s3, iam, aws_env, box_server, capacity_proxy, tmp_path, notice
):
    """With the notice on the box, the agent stops the job and uploads what it wrote on its
    TERM; without (a notice the box never saw), orch recovers from EC2's reclaim reason and the
    last periodic checkpoint."""
    from tests.sim.identity import MotoInstanceIdentity
    from tests.sim.metadata import MetadataService

    bucket = f"{SPOT_BUCKET}-{'notice' if notice else 'ec2'}"
    s3.create_bucket(Bucket=bucket)
    routes = sshbox.route_every_host(box_server, tmp_path / "routes")
    box_home = tmp_path / "box-home"
    with MetadataService() as metadata:
        # What a real box has: no keys, only the metadata service (the test-only stand-in,
        # where the spot notice comes from), which hands out the credentials of the box's
        # instance role: moto's STS AssumeRole on the role of the instance's profile. A box
        # launched without a profile gets none, and its checkpoints fail. S3 is moto's.
        identity = MotoInstanceIdentity(aws_env["AWS_ENDPOINT_URL"], "us-east-1", "run-spot")
        metadata.aws_identity = identity
        sshbox.set_box_environment(
            box_server,
            box_home,
            {
                "AWS_ENDPOINT_URL": aws_env["AWS_ENDPOINT_URL"],
                "ORCH_AGENT_METADATA_URL": metadata.url,
            },
        )
        env = {**aws_env, "AWS_ENDPOINT_URL": capacity_proxy.url, "ORCH_SSH_CONFIG": str(routes)}
        workdir = tmp_path / "project"
        workdir.mkdir()
        (workdir / "counter.py").write_text(COUNTER_PY)
        plan = plan_file(tmp_path, candidate("g5.xlarge", "spot", price_per_hour=0.4))
        proc = orch_process(
            *run_args(plan, "run-spot", workdir, "--checkpoint-dir", "ckpt",
                      "--store", f"s3://{bucket}/runs", "--checkpoint-interval", "1",
                      "--spot-recovery", "1", "--fetch", "outputs", "--json",
                      "--", "python3", "counter.py", "30", "0.3", str(HOLD)),
            env=env,
        )  # fmt: skip
        out = Lines(proc.stderr)  # under --json, CMD's output and orch's lines are on stderr
        out.wait_for("count 5", timeout=300)
        (first,) = instances(ec2, "run-spot")
        assert_role_reaches_only_its_run(role_policy_of(ec2, iam, first), bucket)
        (run_dir,) = (box_home / ".orch" / "runs").iterdir()
        saved = None  # the periodic upload the reclaim came after (no notice)
        if notice:
            # The spot service gives notice (two minutes, as EC2). EC2 shows orch no reclaim
            # until the instance shuts down: the agent stops the job itself, its final upload
            # follows the job's exit, and orch recovers from the reclaim the box reports.
            metadata.notice_aws()
            wait_until((run_dir / "interruption.json").exists, "the agent to see the notice")
            wait_until((run_dir / "reclaim_stop").exists, "the agent to stop the job")
            metadata.clear()  # the replacement box (the same stand-in serves it) has no notice
        else:
            # No notice reached the box: the instance is simply gone, its job with it; orch
            # learns of the reclaim from EC2 (StateReason) and resumes from a periodic upload.
            wait_until(lambda: checkpointed_count(s3, bucket) >= 5, "a periodic upload")
            saved = checkpointed_count(s3, bucket)
            reclaim(ec2, capacity_proxy, first["InstanceId"], run_dir, box_home)

        stdout = proc.stdout.read()
        assert proc.wait(timeout=600) == 0, "\n".join(out.lines[-40:])
        out.thread.join(timeout=10)
    reason = "spot interruption notice" if notice else "SpotInstanceTermination"
    assert_one_reclaim_recovered(json.loads(stdout), reason)

    # The second attempt resumed from the checkpoint, and the count finished exactly once.
    assert_resumed_once(out.lines, saved)
    assert json.loads((workdir / "outputs" / "count.json").read_text()) == list(range(1, 31))
    assert [line for line in out.lines if line.startswith("attempt=")][0].startswith(
        "attempt=1 resumed=0"
    )
    capacity_proxy.spot_reclaimed.clear()
    assert_nothing_tagged(ec2, "run-spot")
    # Both boxes reached the store with their own role's credentials, from the metadata only.
    assert len({instance for instance, _ in identity.issued}) == 2
    assert all(role.startswith("orch-run-spot-") for _, role in identity.issued)
    roles = [r["RoleName"] for r in iam.list_roles(PathPrefix="/orch/")["Roles"]]
    assert not [r for r in roles if r.startswith("orch-run-spot-")]  # gone with the boxes


def test_a_run_whose_box_cannot_launch_leaves_nothing(orch, ec2, run_env, capacity_proxy, tmp_path):
    workdir = workdir_with_job(tmp_path)
    plan = plan_file(tmp_path, candidate("g5.xlarge"))
    env = {**run_env, "AWS_ENDPOINT_URL": capacity_proxy.url}
    with capacity_proxy.refusing({"g5.xlarge": "VcpuLimitExceeded"}):
        result = orch(*run_args(plan, "run-noquota", workdir, "--", "true"), env=env)
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("orch: error: ")]
    assert len(errors) == 1 and "VcpuLimitExceeded" in errors[0]
    # The half-made box (its security group and key pair were created) was destroyed.
    assert "destroying box run-noquota" in result.stderr
    assert_nothing_tagged(ec2, "run-noquota")
    assert json.loads(ok(orch("list", "--json", env=env)).stdout) == []
