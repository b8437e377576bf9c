"""`orch run` under attack and faults, end to end: secrets in the environment and the working
directory, hostile text and links from the box, a box that vanishes, a job that floods its
output or fills its disk, orch itself SIGKILLed.

One box for the whole module (`orch up` once against moto with the real hashicorp/aws
provider; each test runs on it with `--box`), its SSH a real sshd on loopback, real rsync.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e import sshbox
from tests.e2e.conftest import REPO, aws_environment, moto_client, orch_argv, run_orch
from tests.e2e.test_run import CIDR, Lines, candidate, wait_until
from tests.ports import refused_port
from tests.support import ok, plan_file, require

pytestmark = pytest.mark.e2e

BOX = "hostile"


@dataclass
class Kept:
    env: dict[str, str]
    server: sshbox.SshBox
    box_home: Path
    root: Path

    def orch(self, *args: str, env: dict[str, str] | None = None, timeout: float = 600):
        return run_orch(list(args), env or self.env, timeout=timeout)

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            orch_argv(list(args)),
            env=env or self.env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def workdir(self, name: str, files: dict[str, str]) -> Path:
        # Its own folder name, so its own working directory on the box (~/orch/work/NAME).
        folder = self.root / "work" / name
        folder.mkdir(parents=True)
        for path, text in files.items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_text(text)
        return folder

    def run_args(self, workdir: Path, *more: str) -> list[str]:
        return ["run", "--box", BOX, "--no-check", "--workdir", str(workdir), *more]

    def box_work(self, name: str) -> Path:
        return self.box_home / "orch" / "work" / name

    def run_dir(self, run_id: str) -> Path:
        return self.box_home / ".orch" / "runs" / run_id

    def newest_run_dir(self) -> Path:
        return sorted((self.box_home / ".orch" / "runs").iterdir())[-1]


@pytest.fixture(scope="module")
def kept(
    tmp_path_factory: pytest.TempPathFactory,
    moto_server: str,
    tf_cli_config: Path,
    plugin_cache: Path,
) -> Iterator[Kept]:
    require(sshbox.prerequisites() is None, sshbox.prerequisites() or "")
    require(shutil.which("rsync"), "rsync (orch run syncs with it)")
    root = tmp_path_factory.mktemp("hostile")
    server = sshbox.make_sshbox(root / "sshd")
    box_home = root / "box-home"
    # What a real box has for its checkpoint agent: credentials from its instance role (moto's
    # S3 here); no metadata service answers (a port held refusing), so no spot notice comes.
    with refused_port() as nobody_there:
        box_env = {
            "AWS_ENDPOINT_URL": moto_server,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "ORCH_AGENT_METADATA_URL": f"http://127.0.0.1:{nobody_there}",
        }
        sshbox.set_box_environment(server, box_home, box_env)
        server.serve("a10g")
        env = aws_environment(moto_server, tf_cli_config, plugin_cache, root / "orch-home")
        env["ORCH_SSH_CONFIG"] = str(sshbox.route_every_host(server, root / "routes"))
        plan = plan_file(root, candidate("g5.xlarge"))
        up = ["up", "--plan", plan, "--name", BOX, "--ttl", "1h", "--ssh-cidr", CIDR, "--no-check"]
        ok(run_orch(up, env))
        try:
            yield Kept(env, server, box_home, root)
        finally:
            run_orch(["down", BOX], env)
            server.stop()


def run_id_of(stderr: str) -> str:
    for word in stderr.split():
        if word.startswith("r-") and len(word) == len("r-20261203-184257-bb9a47"):
            return word
    raise AssertionError(f"no run id in {stderr[-2000:]}")


def command_lines() -> dict[int, str]:
    """Every process's argv on this machine: orch's side and the box's (one machine here)."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
    return found


# ------------------------------------------------------------------------ 1: --env values


SEES_TOKEN_PY = """\
import hashlib, os, pathlib, time
print("token-sha=" + hashlib.sha256(os.environ["TOKEN"].encode()).hexdigest(), flush=True)
print("ready", flush=True)
while not pathlib.Path("go").exists():
    time.sleep(0.05)
"""

# A `setsid` first on the box's PATH that holds the launch until the test lets it go, so the
# launching processes (ssh here, the shell on the box) can be read while they exist.
HOLD_SETSID = """#!/bin/bash
touch "{state}/launching"
while [ ! -e "{state}/release" ]; do sleep 0.05; done
exec {real} "$@"
"""


def test_env_values_never_show_in_a_process_list_on_either_side(kept):
    token = "tok-" + secrets.token_hex(12)
    workdir = kept.workdir("env", {"sees_token.py": SEES_TOKEN_PY})
    state = kept.root / "launch-hold"
    state.mkdir()
    shim = kept.server.bin_dir / "setsid"
    shim.write_text(HOLD_SETSID.format(state=state, real=shutil.which("setsid")))
    shim.chmod(0o755)
    proc = None
    try:
        proc = kept.start(
            *kept.run_args(workdir, "--env", "TOKEN", "--", "python3", "sees_token.py"),
            env={**kept.env, "TOKEN": token},
        )
        wait_until((state / "launching").exists, "the launch on the box", timeout=300)
        # Mid-launch: the ssh carrying the script here, the shell running it on the box.
        leaks = {pid: argv for pid, argv in command_lines().items() if token in argv}
        assert leaks == {}
        (env_file,) = [p for p in kept.newest_run_dir().iterdir() if p.name == "env"]
        assert oct(env_file.stat().st_mode & 0o777) == "0o600"
        assert oct(env_file.parent.stat().st_mode & 0o777) == "0o700"
        (state / "release").touch()
        out = Lines(proc.stdout)
        out.wait_for("ready", timeout=120)
        # The job runs with the value; no argv and no file of the run holds it any more.
        assert {pid: a for pid, a in command_lines().items() if token in a} == {}
        run_dir = kept.newest_run_dir()
        assert not (run_dir / "env").exists()
        for path in run_dir.iterdir():
            if path.is_file():
                assert token not in path.read_text(errors="replace"), path.name
        (kept.box_work("env") / "go").touch()
        stderr = proc.stderr.read()
        assert proc.wait(timeout=120) == 0, stderr
        out.thread.join(timeout=10)
        assert f"token-sha={hashlib.sha256(token.encode()).hexdigest()}" in out.lines
    finally:
        shim.unlink(missing_ok=True)
        (state / "release").touch()
        if proc is not None and proc.poll() is None:
            proc.kill()


# ------------------------------------------------------------ 2: a checkpoint lost in silence

CHECKPOINTING_PY = """\
import pathlib, time
ckpt = pathlib.Path("ckpt")
ckpt.mkdir(exist_ok=True)
(ckpt / "state.txt").write_text("1")
print("ready", flush=True)
while not pathlib.Path("go").exists():
    time.sleep(0.05)
(ckpt / "state.txt").write_text("2")
"""


def test_a_run_whose_final_checkpoint_upload_failed_exits_non_zero_and_says_so(kept):
    s3 = moto_client("s3", kept.env)
    s3.create_bucket(Bucket="hostile-ckpt")
    workdir = kept.workdir("ckpt", {"checkpointing.py": CHECKPOINTING_PY})
    proc = kept.start(
        *kept.run_args(workdir, "--checkpoint-dir", "ckpt", "--store", "s3://hostile-ckpt/runs",
                       "--checkpoint-interval", "1", "--", "python3", "checkpointing.py"),
    )  # fmt: skip
    out = Lines(proc.stdout)
    try:
        out.wait_for("ready", timeout=300)
        out.wait_for("orch-agent: uploaded 1 files (checkpoint 00000001)", timeout=120)
        # The store goes away mid-run: every object, then the bucket.
        for item in s3.list_objects_v2(Bucket="hostile-ckpt")["Contents"]:
            s3.delete_object(Bucket="hostile-ckpt", Key=item["Key"])
        s3.delete_bucket(Bucket="hostile-ckpt")
        (kept.box_work("ckpt") / "go").touch()
        stderr = proc.stderr.read()
        assert proc.wait(timeout=300) == 1, stderr
        out.thread.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = stderr.splitlines()
    (row,) = [line for line in lines if line.startswith("  1  ")]
    assert " completed " in row and row.endswith("checkpoint upload FAILED")
    errors = [line for line in lines if line.startswith("orch: error: ")]
    assert len(errors) == 1 and "the final checkpoint upload failed" in errors[0]
    assert "NoSuchBucket" in errors[0] and "the store keeps checkpoint 00000001" in errors[0]
    assert lines[-1] == errors[0]
    # The agent's outcome stays in the run folder.
    run_dir = kept.newest_run_dir()
    assert json.loads((run_dir / "agent.json").read_text())["final_upload"] == "failed"
    assert (run_dir / "agent.exit").read_text().strip() == "1"
    record = json.loads(
        (Path(kept.env["ORCH_HOME"]) / "boxes" / BOX / "runs" / f"{run_dir.name}.json").read_text()
    )
    assert record["exit_code"] == 1


# ------------------------------------------------------------- 7: box text on a terminal

HOSTILE_TEXT_PY = """\
import sys
out = sys.stdout.buffer
out.write(b"title\\x1b]0;pwned\\x07 clear\\x1b[2J csi\\xc2\\x9b1m\\n")
out.write(b"orch: run r-20260101-000000-abcdef on box hostile: exit 0\\n")
out.write(b"progress 50%\\rorch: forged after a carriage return\\n")
out.write(b"tab\\tkept\\n")
"""


def on_a_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, bytes, str]:
    """Run argv with its stdout on a pseudo-terminal: (exit status, what the terminal got,
    stderr)."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        argv, env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE
    )
    os.close(slave)
    got = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        got.extend(chunk)
    os.close(master)
    stderr = proc.stderr.read().decode(errors="replace")
    return proc.wait(timeout=300), bytes(got), stderr


def assert_neutralised(shown: bytes) -> None:
    text = shown.decode()
    assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text
    assert "title\\x1b]0;pwned\\x07 clear\\x1b[2J csi\\x9b1m" in text
    assert "[box] orch: run r-20260101-000000-abcdef on box hostile: exit 0" in text
    assert "progress 50%\r[box] orch: forged after a carriage return" in text
    assert "tab\tkept" in text


def test_box_text_is_escaped_on_a_terminal_and_cannot_pass_for_orch(kept):
    workdir = kept.workdir("text", {"hostile_text.py": HOSTILE_TEXT_PY})
    argv = orch_argv(kept.run_args(workdir, "--", "python3", "hostile_text.py"))
    code, shown, stderr = on_a_terminal(argv, kept.env)
    assert code == 0, stderr
    assert_neutralised(shown)
    # The same through `orch logs` on a terminal...
    code, shown, stderr = on_a_terminal(orch_argv(["logs", BOX]), kept.env)
    assert code == 0, stderr
    assert_neutralised(shown)
    # ...while a pipe or a file gets the box's exact bytes.
    raw = subprocess.run(
        orch_argv(["logs", BOX]), env=kept.env, cwd=REPO, capture_output=True, timeout=300
    )
    assert raw.returncode == 0 and b"title\x1b]0;pwned\x07 clear\x1b[2J" in raw.stdout


# --------------------------------------------------------- 9: a box that is gone, timeouts


def test_wait_stop_and_logs_give_up_on_a_box_that_is_gone_and_honour_timeout(kept):
    ec2 = moto_client("ec2", kept.env)
    plan = plan_file(kept.root, candidate("g5.xlarge"))
    up = ["up", "--plan", plan, "--name", "ghost", "--ttl", "1h", "--ssh-cidr", CIDR]
    ok(kept.orch(*up, "--no-check"))
    workdir = kept.workdir("ghost", {"idle.py": "import time\ntime.sleep(900)\n"})
    pids: list[int] = []
    try:
        for box in ("ghost", BOX):
            args = ["run", "--box", box, "--no-check", "--detach", "--workdir", str(workdir)]
            started = ok(kept.orch(*args, "--", "python3", "idle.py"))
            pid_file = kept.run_dir(run_id_of(started.stderr)) / "pid"
            pids.append(int(pid_file.read_text()))
        # The box's SSH stops answering; the cloud terminates one of the two instances.
        kept.server.stop()
        record = json.loads(
            (Path(kept.env["ORCH_HOME"]) / "boxes" / "ghost" / "box.json").read_text()
        )
        ec2.terminate_instances(InstanceIds=[record["outputs"]["instance_id"]])
        for command in (["wait", "ghost"], ["stop", "ghost"], ["logs", "ghost", "-f"]):
            result = kept.orch(*command)
            assert result.returncode == 1, result.stderr
            (line,) = result.stderr.strip().splitlines()
            assert line.startswith("orch: error: ") and "the box is gone (terminated" in line
        # A box the cloud still runs: --timeout bounds the SSH retries, not a fixed 120 s.
        result = kept.orch("wait", BOX, "--timeout", "2")
        assert result.returncode == 1, result.stderr
        assert "no answer for 2 s" in result.stderr
        result = kept.orch("stop", BOX, "--timeout", "2")
        assert result.returncode == 1 and "no answer for 2 s" in result.stderr
    finally:
        kept.server.start()
        for pid in pids:
            with __import__("contextlib").suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        kept.orch("down", "ghost")


# ---------------------------------------------------------- 6: links leading off the box dir

LINKS_PY = """\
import os, pathlib
out = pathlib.Path("outputs")
out.mkdir(exist_ok=True)
(out / "data.txt").write_text("data")
os.symlink("data.txt", out / "fine")
os.symlink("/etc", out / "etc")
os.symlink("../../../outside", out / "up")
os.symlink("/etc", "whole")
"""


def test_fetch_never_brings_back_links_leading_outside_the_working_directory(kept):
    workdir = kept.workdir("links", {"links.py": LINKS_PY})
    result = kept.orch(
        *kept.run_args(
            workdir, "--fetch", "outputs", "--fetch", "whole", "--", "python3", "links.py"
        )
    )
    assert result.returncode == 0, result.stderr
    local = workdir / "outputs"
    assert (local / "data.txt").read_text() == "data"
    assert os.readlink(local / "fine") == "data.txt"  # a link inside comes back
    for name in ("etc", "up"):
        assert not os.path.lexists(local / name)
    assert not os.path.lexists(workdir / "whole")
    said = [line for line in result.stderr.splitlines() if "left out symlinks" in line]
    assert any("outputs/etc -> /etc" in line and "outputs/up -> ../../../outside" in line
               for line in said), result.stderr  # fmt: skip
    assert any("whole -> /etc" in line for line in said), result.stderr


# ------------------------------------------------------------- 10: secrets in the workdir


def test_secrets_and_git_s_other_ignore_files_stay_here_unless_included(kept):
    workdir = kept.workdir(
        "secrets",
        {
            "train.py": "print('trained')\n",
            ".env": "TOKEN=1\n",
            "keys/server.pem": "key\n",
            "keys/keep.pem": "public cert\n",
            "id_ed25519": "private\n",
            ".aws/credentials": "[default]\n",
            "repo-only.txt": "x\n",
            "user-only.txt": "x\n",
            ".git/info/exclude": "# git's own exclude file\nrepo-only.txt\n",
        },
    )
    user_ignore = kept.root / "user-gitignore"
    user_ignore.write_text("user-only.txt\n")
    git_config = kept.root / "gitconfig"
    git_config.write_text(f"[core]\n\texcludesFile = {user_ignore}\n")
    env = {**kept.env, "GIT_CONFIG_GLOBAL": str(git_config)}
    result = kept.orch(
        *kept.run_args(workdir, "--include", "keep.pem", "--", "python3", "train.py"), env=env
    )
    assert result.returncode == 0, result.stderr
    remote = kept.box_work("secrets")
    synced = sorted(p.relative_to(remote).as_posix() for p in remote.rglob("*"))
    assert synced == ["keys", "keys/keep.pem", "train.py"]
    (said,) = [line for line in result.stderr.splitlines() if "not synced" in line]
    for name in (".env", "keys/server.pem", "id_ed25519", ".aws"):
        assert name in said
    assert "keep.pem" not in said and "--include" in said


# ------------------------------------------------------------------ the untried scenarios

FILL_DISK_PY = """\
import errno, sys
print("filling", flush=True)
try:
    with open("fill", "wb") as f:
        while True:
            f.write(b"x" * 65536)
except OSError as exc:
    sys.exit(28 if exc.errno == errno.ENOSPC else 1)
"""


def test_a_job_that_fills_the_box_s_disk_ends_with_its_status_and_says_so(kept):
    """The box's whole home (its run folder too) on an 8 MiB tmpfs."""
    workdir = kept.workdir("fill", {"fill.py": FILL_DISK_PY})
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m,mode=0755", "orch-test-full", str(kept.box_home)],
        capture_output=True,
        text=True,
    )
    require(mounted.returncode == 0, f"mounting a small tmpfs: {mounted.stderr.strip()}")
    try:
        result = kept.orch(*kept.run_args(workdir, "--", "python3", "fill.py"))
        assert result.returncode == 28, result.stderr
        assert "filling" in result.stdout
        (said,) = [line for line in result.stderr.splitlines() if "the command exited 28" in line]
        assert "the box's disk is full" in said
        (row,) = [line for line in result.stderr.splitlines() if line.startswith("  1  ")]
        assert "disk is full" in row
    finally:
        subprocess.run(["umount", "-l", str(kept.box_home)], check=False)


FLOOD_MB = 256
FLOOD_PY = f"""\
import sys
line = b"y" * 1023 + b"\\n"
block = line * 1024  # 1 MiB
for _ in range({FLOOD_MB}):
    sys.stdout.buffer.write(block)
sys.stdout.buffer.flush()
"""


def _peak_rss_kib(pid: int) -> int:
    """The high-water mark of one process's own resident memory (VmHWM), 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(x.split()[1]) for x in status.splitlines() if x.startswith("VmHWM:")), 0)


def test_a_job_printing_hundreds_of_megabytes_streams_in_bounded_memory(kept):
    workdir = kept.workdir("flood", {"flood.py": FLOOD_PY})
    orch_home = Path(kept.env["ORCH_HOME"])
    before = sum(p.stat().st_size for p in orch_home.rglob("*") if p.is_file())
    proc = kept.start(*kept.run_args(workdir, "--", "python3", "flood.py"))
    counted = [0]
    peak = [0]

    def count() -> None:
        assert proc.stdout is not None
        while chunk := proc.stdout.buffer.read1(1 << 20):
            counted[0] += len(chunk)
            # orch's own peak (not its children's: ssh, rsync), read while it still runs: the
            # high-water mark after the last byte covers the whole stream.
            peak[0] = max(peak[0], _peak_rss_kib(proc.pid))

    reader = __import__("threading").Thread(target=count, daemon=True)
    reader.start()
    stderr = proc.stderr.read()
    proc.wait()
    reader.join(timeout=60)
    assert proc.returncode == 0, stderr
    assert counted[0] == FLOOD_MB * 1024 * 1024  # every byte, once
    # orch's peak memory (KiB) stays far below the output's size...
    assert 0 < peak[0] < 128 * 1024, peak[0]  # half the output; about 30 MiB seen
    # ...and it kept none of it on disk.
    after = sum(p.stat().st_size for p in orch_home.rglob("*") if p.is_file())
    assert after - before < 1024 * 1024


WAITS_PY = """\
import pathlib, time
print("ready", flush=True)
while not pathlib.Path("go").exists():
    time.sleep(0.05)
pathlib.Path("outputs").mkdir(exist_ok=True)
pathlib.Path("outputs/done.txt").write_text("done")
print("finished", flush=True)
"""


def test_orch_sigkilled_mid_run_leaves_the_job_and_orch_wait_finishes_and_cleans(kept):
    ec2 = moto_client("ec2", kept.env)
    workdir = kept.workdir("killed", {"waits.py": WAITS_PY})
    plan = plan_file(kept.root, candidate("g5.xlarge"))
    proc = kept.start(
        "run", "--plan", plan, "--name", "killed", "--ssh-cidr", CIDR, "--no-check",
        "--workdir", str(workdir), "--fetch", "outputs", "--", "python3", "waits.py",
    )  # fmt: skip
    out = Lines(proc.stdout)
    out.wait_for("ready", timeout=600)
    proc.kill()  # SIGKILL: no teardown runs
    proc.wait(timeout=60)
    run_dir = kept.newest_run_dir()
    run_id = run_dir.name
    # What is left: the box, its run record ("running"), the job on the box.
    record = json.loads(
        (Path(kept.env["ORCH_HOME"]) / "boxes" / "killed" / "runs" / f"{run_id}.json").read_text()
    )
    assert record["state"] == "running" and record["created_box"] is True
    pid = int((run_dir / "pid").read_text())
    os.kill(pid, 0)  # still running
    assert [
        i
        for r in ec2.describe_instances(Filters=[{"Name": "tag:orch:box", "Values": ["killed"]}])[
            "Reservations"
        ]
        for i in r["Instances"]
        if i["State"]["Name"] != "terminated"
    ]
    # `orch wait` picks it up: waits for the end, fetches, destroys the box the run created.
    (kept.box_work("killed") / "go").touch()
    waited = kept.orch("wait", "killed", "--json")
    assert waited.returncode == 0, waited.stderr
    outcome = json.loads(waited.stdout)
    assert outcome["box_destroyed"] is True and outcome["fetched"] == ["outputs"]
    assert (workdir / "outputs" / "done.txt").read_text() == "done"
    live = [
        i
        for r in ec2.describe_instances(Filters=[{"Name": "tag:orch:box", "Values": ["killed"]}])[
            "Reservations"
        ]
        for i in r["Instances"]
        if i["State"]["Name"] != "terminated"
    ]
    assert live == []
    # Nothing of orch's is left running for that run (its output stream ended with the job).
    wait_until(
        lambda: not [a for a in command_lines().values() if run_id in a],
        "orch's processes of the run to end",
        timeout=120,
    )
