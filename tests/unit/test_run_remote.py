"""The box side of `orch run`, run here with bash: the scripts orch sends over SSH prepare,
launch (setsid: no systemd here), follow, report and stop a real detached job.

HOME points at a temporary folder, as a box's login home."""

from __future__ import annotations

import io
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.run import remote
from orchestrator.run.spec import RunSpec
from tests.support import end_runs_under, require


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """The box's login home; what its runs left running is killed after the test."""
    folder = tmp_path / "home"
    folder.mkdir()
    yield folder
    end_runs_under(folder)


def sh(home: Path, script: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}
    return subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=timeout
    )


def spec_for(tmp_path: Path, *command: str, **changes: object) -> RunSpec:
    workdir = tmp_path / "project"
    workdir.mkdir(exist_ok=True)
    return RunSpec(command=list(command), workdir=workdir, **changes)  # type: ignore[arg-type]


def start(home: Path, spec: RunSpec) -> Path:
    prepared = sh(home, remote.prepare_script(spec, None))
    assert prepared.returncode == 0, prepared.stderr
    assert remote.prepared_dir(prepared.stdout) == f"{home}/orch/work/project"
    launched = sh(home, remote.launch_script(spec, remote.LaunchEnv(attempt=1, cloud="aws")))
    assert launched.returncode == 0, launched.stderr
    assert launched.stdout.startswith("started ") and launched.stdout.split()[-1] == "setsid"
    return home / ".orch" / "runs" / spec.run_id


def wait_done(home: Path, spec: RunSpec, timeout: float = 120) -> remote.JobStatus:
    """The job's status once it is done (`timeout`: a bound on a hang, not a wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = remote.parse_status(sh(home, remote.status_script(spec.run_id)).stdout)
        if status.done:
            return status
        time.sleep(0.05)
    raise AssertionError("the job did not finish")


def test_a_job_runs_detached_with_its_environment_and_keeps_its_status(home, tmp_path):
    hostile = 'it\'s "quoted" $HOME `date` \\ end'
    spec = spec_for(
        tmp_path,
        "bash", "-c", 'printf "%s|%s|%s\\n" "$SECRET" "$ORCH_ATTEMPT" "$PWD"; exit 4',
        env={"SECRET": hostile},
        setup="echo setup-first > marker",
    )  # fmt: skip
    run_dir = start(home, spec)
    status = wait_done(home, spec)
    assert (status.exit_code, status.step) == (4, "cmd")
    log = (run_dir / "output.log").read_text()
    assert f"{hostile}|1|{home}/orch/work/project\n" in log
    assert (home / "orch" / "work" / "project" / "marker").read_text() == "setup-first\n"
    # The value reached the job in memory only: no file of the run holds it.
    for path in run_dir.iterdir():
        if path.name != "output.log":
            assert "quoted" not in path.read_text(errors="replace"), path.name
    assert oct(run_dir.stat().st_mode & 0o777) == "0o700"


def test_env_names_the_wrapper_uses_itself_reach_the_job_unchanged(home, tmp_path):
    """The wrapper sources the env file into its own shell: a --env name that was also one of
    its variables (run_dir: the job never started; child, agent: emptied) must not change the
    wrapper, and the job must see the value the user gave."""
    names = ("run_dir", "child", "agent", "agent_rc", "rc", "restored")
    env = {name: f"user-{name}" for name in names}
    shown = " ".join(f"{name}=${{{name}-unset}}" for name in names)
    spec = spec_for(tmp_path, "bash", "-c", f'echo "{shown}"', env=env)
    run_dir = start(home, spec)
    status = wait_done(home, spec)
    assert (status.exit_code, status.step) == (0, "cmd")
    expected = " ".join(f"{name}=user-{name}" for name in names)
    assert (run_dir / "output.log").read_text() == expected + "\n"


@pytest.mark.parametrize(
    "name",
    ["ORCH_WORKDIR", "ORCH_PATH", "ORCH_CLOUD_NAME", "ORCH_CHECKPOINT_UPLOAD", "_orch_run_dir"],
)
def test_env_names_of_orch_s_own_launch_are_refused(name):
    """orch sets these for the wrapper (ORCH_WORKDIR: where the job runs; ORCH_CHECKPOINT_UPLOAD:
    whether the agent uploads); a user value would move the job or stop its checkpoints."""
    from orchestrator.errors import UsageError
    from orchestrator.run.spec import parse_env

    with pytest.raises(UsageError, match=name):
        parse_env([f"{name}=/tmp"])


def test_a_failing_setup_ends_the_run_before_the_command(home, tmp_path):
    spec = spec_for(tmp_path, "touch", "ran", setup="echo preparing; exit 7")
    start(home, spec)
    status = wait_done(home, spec)
    assert (status.exit_code, status.step) == (7, "setup")
    assert not (home / "orch" / "work" / "project" / "ran").exists()


def test_follow_reads_from_an_offset_until_the_job_ends(home, tmp_path):
    spec = spec_for(tmp_path, "bash", "-c", "for i in 1 2 3 4 5; do echo line$i; sleep 0.1; done")
    start(home, spec)
    whole = sh(home, remote.follow_script(spec.run_id, 0))
    assert whole.returncode == 0
    assert whole.stdout == "".join(f"line{i}\n" for i in range(1, 6))
    rest = sh(home, remote.follow_script(spec.run_id, len("line1\nline2\n")))
    assert rest.stdout == "line3\nline4\nline5\n"
    assert sh(home, remote.follow_script("r-20260101-000000-abcdef", 0)).returncode == 3


def test_stop_terms_the_command_and_keeps_its_status(home, tmp_path):
    script = "trap 'echo terminated; exit 143' TERM; echo ready; while :; do sleep 0.1; done"
    spec = spec_for(tmp_path, "bash", "-c", script)
    run_dir = start(home, spec)
    deadline = time.monotonic() + 120  # a bound on a hang: the loop ends once it is ready
    while "ready" not in (run_dir / "output.log").read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    stopped = sh(home, remote.stop_script(spec.run_id))
    assert remote.parse_exit_line(stopped.stdout) == (143, "cmd")
    assert "terminated" in (run_dir / "output.log").read_text()
    assert_gone(int((run_dir / "pid").read_text()))


def test_stop_kills_a_command_that_ignores_term(home, tmp_path):
    spec = spec_for(tmp_path, "bash", "-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done")
    run_dir = start(home, spec)
    deadline = time.monotonic() + 120  # a bound on a hang: the loop ends once it is ready
    while "ready" not in (run_dir / "output.log").read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    stopped = sh(home, remote.stop_script(spec.run_id, grace_s=1))
    assert remote.parse_exit_line(stopped.stdout) == (137, "killed")
    assert_gone(int((run_dir / "pid").read_text()))


def assert_gone(pid: int, timeout: float = 60) -> None:
    """The wrapper exits right after it writes `exit`: give it that moment."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, f"process {pid} is still there"
        time.sleep(0.05)


def test_status_of_a_run_that_is_not_there(home):
    status = remote.parse_status(sh(home, remote.status_script("r-20260101-000000-abcdef")).stdout)
    assert not status.found and not status.done


def test_parse_status_reads_the_line_and_refuses_junk():
    done = remote.parse_status("pid=42 alive=0 exit=3 cmd size=  120\n")
    assert (done.pid, done.alive, done.exit_code, done.step, done.size) == (
        42,
        False,
        3,
        "cmd",
        120,
    )
    running = remote.parse_status("pid=42 alive=1 exit=- size=0")
    assert running.found and running.alive and not running.done
    assert not remote.parse_status("pid=42 alive=1 exit=$(reboot) size=0").found


FAKE_SYSTEMD_RUN = (
    Path(__file__).resolve().parents[1] / "fixtures" / "systemd" / "fake_systemd_run.py"
)
FAKE_SUDO = "#!/bin/bash\n# sudo -n [--preserve-env=...] CMD...: run CMD (as NOPASSWD: ALL would)\n"
FAKE_SUDO += 'while [ "${1#-}" != "$1" ]; do shift; done\nexec "$@"\n'


def systemd_box(tmp_path: Path) -> tuple[list[str], Path]:
    """argv prefix running a script where /run/systemd/system exists (a private mount
    namespace) and systemd-run / sudo are the stand-ins; and the unit record's path."""
    import shutil
    import sys

    unshare = shutil.which("unshare")
    require(unshare, "unshare (util-linux), for a private /run/systemd")
    probe = ["true"] if os.geteuid() == 0 else ["--map-root-user", "true"]
    require(
        subprocess.run([unshare, "--mount", *probe], capture_output=True).returncode == 0,
        "mount namespaces (unshare --mount)",
    )
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    (fakes / "systemd-run").write_text(f"#!{sys.executable}\n{FAKE_SYSTEMD_RUN.read_text()}")
    (fakes / "sudo").write_text(FAKE_SUDO)
    for path in fakes.iterdir():
        path.chmod(0o755)
    record = tmp_path / "unit.json"
    setup = (
        "mount -t tmpfs orch-test /run/systemd && mkdir /run/systemd/system && "
        f'export PATH={fakes}:"$PATH" FAKE_SYSTEMD_RECORD={record} && exec bash -c "$0"'
    )
    mapping = [] if os.geteuid() == 0 else ["--map-root-user"]
    return [unshare, "--mount", "--propagation", "private", *mapping, "bash", "-c", setup], record


def test_with_systemd_env_values_never_become_unit_properties(home, tmp_path):
    """systemd.exec(5): Environment= is readable by anyone over D-Bus (`systemctl show`).
    The values reach the job through the 0600 env file, which is gone once the job runs."""
    prefix, record = systemd_box(tmp_path)
    secret = "s3cr3t-'value' $HOME"
    spec = spec_for(tmp_path, "bash", "-c", 'printf "got=%s\\n" "$TOKEN"', env={"TOKEN": secret})
    assert sh(home, remote.prepare_script(spec, None)).returncode == 0
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}
    launched = subprocess.run(
        [*prefix, remote.launch_script(spec, remote.LaunchEnv(attempt=1, cloud="aws"))],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    assert launched.stdout.split()[-1] == "systemd"
    assert wait_done(home, spec).exit_code == 0
    run_dir = home / ".orch" / "runs" / spec.run_id
    assert f"got={secret}\n" in (run_dir / "output.log").read_text()
    unit = json.loads(record.read_text())
    assert "TOKEN" not in json.dumps(unit) and "s3cr3t" not in json.dumps(unit)
    # Stopped before the network at shutdown (remote.SHUTDOWN_ORDER), one argument.
    assert "--property=After=network.target network-online.target" in unit["argv"]
    assert unit["environment"]["ORCH_WORKDIR"] == f"{home}/orch/work/project"
    assert not (run_dir / "env").exists()


def test_a_launch_deletes_the_env_file_before_it_reports_the_job_started(home, tmp_path):
    spec = spec_for(tmp_path, "bash", "-c", 'echo "$TOKEN" > seen; sleep 30', env={"TOKEN": "v"})
    run_dir = start(home, spec)
    # `started` is printed after the wrapper wrote its pid, which it does after reading env.
    assert not (run_dir / "env").exists()
    sh(home, remote.stop_script(spec.run_id, grace_s=5))


def test_the_links_a_fetch_leaves_out_are_those_leading_outside_the_working_directory(tmp_path):
    from orchestrator.run.sync import unsafe_links_script

    work = tmp_path / "work"
    (work / "outputs" / "sub").mkdir(parents=True)
    (work / "deep").mkdir()
    for link, target in (
        ("outputs/etc", "/etc"),
        ("outputs/up", "../../x"),
        ("outputs/sub/ok", "../../train.py"),  # climbs, but stays inside
        ("outputs/in", "sub"),
        ("whole", "/etc"),
        ("deep/parent", "/tmp"),
    ):
        os.symlink(target, work / link)

    def listed(path: str) -> list[str]:
        result = subprocess.run(
            ["bash", "-c", unsafe_links_script(str(work), path)], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        return sorted(result.stdout.splitlines())

    assert listed("outputs") == ["outputs/etc -> /etc", "outputs/up -> ../../x"]
    assert listed("whole") == ["whole -> /etc"]
    assert listed("deep/parent/x") == ["deep/parent -> /tmp"]  # a parent folder that is a link
    assert listed("missing") == []


def test_rsync_filter_lines_name_the_secrets_left_out(tmp_path):
    from orchestrator.run import ignores

    output = "\n".join(
        [
            "[sender] hiding file .env because of pattern .env",
            "[sender] hiding directory .aws because of pattern .aws/",
            "[sender] hiding file keys/a b.pem because of pattern *.pem",
            "[sender] hiding directory data because of pattern data/",  # .gitignore: not said
            "sending incremental file list",
        ]
    )
    assert ignores.secrets_left_out(output) == [".env", ".aws", "keys/a b.pem"]
    args = ignores.filter_args(tmp_path, ["keep.pem"], ["*.tmp"])
    assert args[0] == "--include=keep.pem"  # first match wins: --include beats the secrets
    assert args.index("--exclude=.env") < args.index("--filter=:- .gitignore")
    assert args[-2:] == ["--exclude=*.tmp", "--debug=FILTER1"]


FILL_DISK = (
    "import errno, sys\n"
    "try:\n"
    "    with open('fill', 'wb') as f:\n"
    "        while True:\n"
    "            f.write(b'x' * 65536)\n"
    "except OSError as exc:\n"
    "    sys.exit(28 if exc.errno == errno.ENOSPC else 1)\n"
)


@pytest.fixture
def small_disk(tmp_path: Path):  # noqa: ANN201 - the folder
    """A 4 MiB tmpfs as the box's home (root may mount here; no loop device needed)."""
    folder = tmp_path / "small-home"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "orch-test-full", str(folder)],
        capture_output=True,
        text=True,
    )
    require(mounted.returncode == 0, f"mounting a small tmpfs: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_job_that_fills_the_disk_still_leaves_its_exit_status(small_disk, tmp_path):
    import sys

    spec = spec_for(tmp_path, sys.executable, "-c", FILL_DISK)
    start(small_disk, spec)
    status = wait_done(small_disk, spec, timeout=60)
    assert (status.exit_code, status.step) == (28, "cmd")
    assert status.disk_full and status.free_kib is not None and status.free_kib < 64


def test_status_reports_the_free_space():
    status = remote.parse_status("pid=4 alive=0 exit=1 cmd size=3 free=12")
    assert status.free_kib == 12 and status.disk_full
    assert remote.parse_status("pid=4 alive=1 exit=- size=3 free=-").free_kib is None
    assert not remote.parse_status("pid=4 alive=1 exit=- size=3 free=99999").disk_full


def test_a_stop_while_the_stream_connects_is_not_lost(monkeypatch):
    """stop() between the follower's look at its flag and the new ssh process being known
    (it ran after `_stopped.is_set()` and before `self._proc = proc`): the connection that
    starts must end at once, not when the job ends (here: never)."""
    import threading

    from orchestrator.run import stream

    follower = stream.LogFollower(None, "r-20261205-080000-abcdef", io.BytesIO(), lambda _: None)  # type: ignore[arg-type]

    def argv(transport: object, script: str) -> list[str]:
        follower.stop()  # the watch thread's stop, in the window
        return ["sleep", "120"]  # a stream that lasts as long as the job

    monkeypatch.setattr(stream, "stream_argv", argv)
    ended = threading.Event()
    outcome: list[BaseException] = []

    def follow() -> None:
        try:
            follower.follow()
        except BaseException as exc:  # noqa: BLE001 - what ended it is the result
            outcome.append(exc)
        ended.set()

    threading.Thread(target=follow, daemon=True).start()
    assert ended.wait(30), "the stream went on after stop()"
    assert isinstance(outcome[0], stream.StreamStopped)


def test_a_quiet_job_s_stream_dropping_once_is_not_ssh_lost(monkeypatch):
    """A connection that stayed up (ssh's keepalives answered) for longer than --ssh-lost-after
    while the job printed nothing, then dropped: SSH answered until that moment. It was
    counted silent since the connection began, so one drop after a quiet stretch ended the
    run with SshLost (job stopped, box destroyed)."""
    import itertools
    import types

    from orchestrator.run import stream

    clock = [1000.0]
    monkeypatch.setattr(stream, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(stream, "backoff_delays", lambda *args: itertools.repeat(0.0))
    said: list[str] = []
    follower = stream.LogFollower(
        None, "r-20261205-080000-abcdef", io.BytesIO(), said.append, lost_after_s=300.0
    )  # type: ignore[arg-type]
    connections = iter([(600.0, 255, False), (1.0, 0, True)])  # (seconds up, ssh exit, bytes)

    def once() -> tuple[int, bool]:
        up, code, got = next(connections)
        clock[0] += up
        return code, got

    monkeypatch.setattr(stream.LogFollower, "_once", lambda self: once())
    follower.follow()  # the second connection reads the rest; no SshLost
    assert follower.reconnects == 1 and said[0].startswith("output stream dropped")


def test_what_a_test_s_run_leaves_running_is_ended(tmp_path):
    """tests.support.end_runs_under (the `home` fixture's clean-up): a job that ignores TERM,
    and its command, are gone after it."""
    box_home = tmp_path / "box"
    box_home.mkdir()
    spec = spec_for(tmp_path, "bash", "-c", "trap '' TERM; echo ready; exec sleep 600")
    run_dir = start(box_home, spec)
    give_up = time.monotonic() + 120  # a bound on a hang: the loop ends once it is ready
    while "ready" not in (run_dir / "output.log").read_text():
        assert time.monotonic() < give_up, "the job did not start"
        time.sleep(0.05)
    wrapper = int((run_dir / "pid").read_text())
    group = [p.name for p in Path("/proc").iterdir() if p.name.isdigit() and _in_group(p, wrapper)]
    assert len(group) >= 2  # the wrapper and the job's `sleep`
    end_runs_under(box_home)
    give_up = time.monotonic() + 60
    while any(Path(f"/proc/{pid}/stat").exists() and _in_group(Path(f"/proc/{pid}"), wrapper)
              for pid in group):  # fmt: skip
        assert time.monotonic() < give_up, "the run's processes outlived end_runs_under"
        time.sleep(0.05)


def _in_group(proc: Path, group: int) -> bool:
    """Whether live process `proc` (/proc/PID) is in process group `group` (zombies are not)."""
    try:
        fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] != "Z" and int(fields[2]) == group
