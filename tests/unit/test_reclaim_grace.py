"""The grace a job gets when the spot service takes its box back: the agent's deadline from
the notice (orchestrator/boxside/cloud_metadata.py's stop_deadline) and the stop script that
waits for it (orchestrator/run/remote.py's stop_script with reclaim=True), run here with bash
on a real detached job, as tests/unit/test_run_remote.py does."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator import boxside
from orchestrator.boxside import cloud_metadata
from orchestrator.boxside.cloud_metadata import reclaim_epoch, stop_deadline
from orchestrator.run import remote
from orchestrator.run.spec import Store
from tests.sim.metadata import MetadataService
from tests.support import end_runs_under
from tests.unit.test_run_remote import sh, spec_for, start

# AWS's example (spot-instance-termination-notices.html), which ECS's best practices repeat.
EXAMPLE = "2015-01-05T18:02:00Z"
EXAMPLE_EPOCH = 1420480920


# ------------------------------------------------------------------------- the notice's time


def test_both_clouds_reclaim_time_is_read_to_the_second() -> None:
    assert reclaim_epoch(EXAMPLE) == EXAMPLE_EPOCH
    assert reclaim_epoch("2024-02-29T23:59:59Z") == 1709251199  # a leap day


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2015-01-05 18:02:00",  # Tencent's form, not these clouds'
        "2015-01-05T18:02:00",  # no zone
        "2015-01-05T18:02:00+08:00",
        "2015-01-05T18:02:00.5Z",
        "2015-01-05T18:02:00Z\n",
        " 2015-01-05T18:02:00Z",
        "2015-02-30T00:00:00Z",  # no such day
        "2015-01-05T25:02:00Z",
        "٢٠١٥-01-05T18:02:00Z",  # digits, but not ASCII ones
        "1420480920",
        "9" * 5000,
        None,
        1420480920,
    ],
)
def test_anything_else_is_no_time(text: object) -> None:
    assert reclaim_epoch(text) is None
    assert stop_deadline(text, EXAMPLE_EPOCH - 120) is None


def test_the_deadline_keeps_the_upload_margin_before_the_reclaim() -> None:
    margin = cloud_metadata.UPLOAD_MARGIN_S
    assert stop_deadline(EXAMPLE, EXAMPLE_EPOCH - 120) == EXAMPLE_EPOCH - margin  # AWS: 2 min
    assert stop_deadline(EXAMPLE, EXAMPLE_EPOCH - 300) == EXAMPLE_EPOCH - margin  # ECS: ~5 min
    # Already past (a late poll, a skewed clock): kept, the stop then gives its short grace.
    assert stop_deadline(EXAMPLE, EXAMPLE_EPOCH + 60) == EXAMPLE_EPOCH - margin


def test_a_reclaim_time_too_far_ahead_is_not_believed() -> None:
    ahead = cloud_metadata.MAX_NOTICE_AHEAD_S
    assert stop_deadline(EXAMPLE, EXAMPLE_EPOCH - ahead) is not None
    assert stop_deadline(EXAMPLE, EXAMPLE_EPOCH - ahead - 1) is None
    assert stop_deadline("9999-12-31T23:59:59Z", EXAMPLE_EPOCH) is None


# ------------------------------------------------------------------- the stop on a reclaim


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """The box's login home (as in test_run_remote.py); what its runs left running is killed
    after the test."""
    folder = tmp_path / "home"
    folder.mkdir()
    yield folder
    end_runs_under(folder)


# A job that ignores TERM: only KILL ends it, so the stop's grace is how long the stop takes.
DEAF = ("bash", "-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done")


def deaf_job(home: Path, tmp_path: Path, deadline: str | None) -> tuple[str, Path]:
    """A started job that ignores TERM, its agent's reclaim_deadline set to `deadline`."""
    spec = spec_for(tmp_path, *DEAF)
    run_dir = start(home, spec)
    give_up = time.monotonic() + 120  # a bound on a hang: the loop ends once it is ready
    while "ready" not in (run_dir / "output.log").read_text():  # its trap is set
        assert time.monotonic() < give_up, "the job did not start"
        time.sleep(0.05)
    if deadline is not None:
        (run_dir / "reclaim_deadline").write_text(deadline)
    return spec.run_id, run_dir


# The box's clock, pinned for the stop: the grace it computes is then exact. With the real
# clock, a deadline "3 s from now" taken before the job started left as little as 1 s for the
# job's start and the stop script's `date`, which a loaded machine can take.
BOX_NOW = 1_800_000_000


def pin_box_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on the box's `date +%s` (the stop script's clock) answers BOX_NOW: a `date`
    first on PATH, which passes any other use to the real one."""
    bin_dir = tmp_path / "clock"
    bin_dir.mkdir()
    date = bin_dir / "date"
    real = shutil.which("date")
    date.write_text(f'#!/bin/sh\n[ "$*" = "+%s" ] && exec echo {BOX_NOW}\nexec {real} "$@"\n')
    date.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def grace_line(output: str) -> int:
    (line,) = [line for line in output.splitlines() if line.startswith("grace ")]
    return int(line.split()[1])


def test_a_reclaim_stop_waits_for_the_notice_s_deadline(home, tmp_path, monkeypatch):
    run_id, run_dir = deaf_job(home, tmp_path, f"{BOX_NOW + 2}\n")
    pin_box_clock(tmp_path, monkeypatch)
    began = time.monotonic()
    stopped = sh(home, remote.stop_script(run_id, grace_s=1, reclaim=True))
    took = time.monotonic() - began
    assert stopped.returncode == 0, stopped.stderr
    assert grace_line(stopped.stdout) == 2
    assert remote.parse_exit_line(stopped.stdout) == (137, "killed")
    assert took >= 1.9  # not grace_s (1 s): the deadline's


@pytest.mark.parametrize(
    "deadline",
    [
        None,  # no notice seen, or one without a usable time
        "",
        "-5",
        "1e9",
        "12abc",
        "0x7fffffff",
        "$(touch pwned)",
        "9" * 40,  # past the shell's 64 bits
        "1",  # long past
    ],
)
def test_a_reclaim_stop_without_a_usable_deadline_keeps_the_short_grace(home, tmp_path, deadline):
    run_id, run_dir = deaf_job(home, tmp_path, deadline)
    stopped = sh(home, remote.stop_script(run_id, grace_s=1, reclaim=True))
    assert stopped.returncode == 0, stopped.stderr
    assert grace_line(stopped.stdout) == 1
    assert remote.parse_exit_line(stopped.stdout) == (137, "killed")
    assert not (run_dir / "pwned").exists() and not (home / "pwned").exists()


def test_a_reclaim_stop_never_waits_past_the_ceiling(home, tmp_path, monkeypatch):
    monkeypatch.setattr(remote, "RECLAIM_GRACE_MAX_S", 2)
    run_id, _ = deaf_job(home, tmp_path, f"{int(time.time()) + 86400}")
    stopped = sh(home, remote.stop_script(run_id, grace_s=1, reclaim=True))
    assert grace_line(stopped.stdout) == 2
    assert remote.parse_exit_line(stopped.stdout) == (137, "killed")
    assert remote.stop_timeout(reclaim=True) == 2 + 15


def test_a_user_s_stop_keeps_the_short_grace_whatever_the_notice_says(home, tmp_path):
    run_id, _ = deaf_job(home, tmp_path, f"{int(time.time()) + 300}")
    began = time.monotonic()
    stopped = sh(home, remote.stop_script(run_id, grace_s=1))
    assert time.monotonic() - began < 60  # the notice's deadline would be 300 s
    assert "grace" not in stopped.stdout
    assert remote.parse_exit_line(stopped.stdout) == (137, "killed")
    assert remote.stop_timeout() == remote.STOP_GRACE_S + 15


# ------------------------------------------------------- the checkpoint written on the TERM

# The job: on TERM it writes its last checkpoint (a moment's work), then exits.
SAVES_ON_TERM = (
    "trap 'sleep 1; echo last > \"$ORCH_CHECKPOINT_DIR/final.bin\"; exit 143' TERM; "
    "echo ready; while :; do sleep 0.1; done"
)


def agent_of(run_dir: Path) -> int | None:
    """The pid of the run's checkpoint agent (`agent.py watch`), once it runs."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(run_dir / "agent.py").encode() in argv and b"watch" in argv:
            return int(proc.name)
    return None


def agent_env(moto_server_url: str, metadata_url: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": moto_server_url,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "ORCH_AGENT_METADATA_URL": metadata_url,
    }


def launch_with_agent(
    home: Path, tmp_path: Path, env: dict[str, str], script: str, bucket: str
) -> tuple[str, Path]:
    """Start `bash -c script` with the real wrapper and checkpoint agent (moto's S3); return
    once the job said `ready` and the agent takes SIGTERM."""
    from tests.unit.test_checkpoint_agent import catches_sigterm

    store = Store(bucket, "runs")
    spec = spec_for(tmp_path, "bash", "-c", script, env=env, checkpoint_dir="ckpt", store=store)
    assert sh(home, remote.prepare_script(spec, boxside.agent_source())).returncode == 0
    launch = remote.LaunchEnv(1, "aws", store.for_run(spec.run_id), 600.0)
    assert sh(home, remote.launch_script(spec, launch)).returncode == 0
    run_dir = home / ".orch" / "runs" / spec.run_id
    give_up = time.monotonic() + 120  # a bound on a hang: each loop ends on its event
    while "ready" not in (run_dir / "output.log").read_text():
        assert time.monotonic() < give_up, (run_dir / "output.log").read_text()
        time.sleep(0.05)
    agent = agent_of(run_dir)
    while agent is None or not catches_sigterm(agent):  # it takes the TERM now
        assert time.monotonic() < give_up, "the agent did not start"
        time.sleep(0.05)
        agent = agent if agent is not None else agent_of(run_dir)
    return spec.run_id, run_dir


def latest_file(s3: object, bucket: str, run_id: str, name: str) -> bytes:
    prefix = f"runs/{run_id}/checkpoints"
    latest = s3.get_object(Bucket=bucket, Key=f"{prefix}/LATEST")["Body"].read().decode().strip()
    return s3.get_object(Bucket=bucket, Key=f"{prefix}/{latest}/{name}")["Body"].read()


def test_what_the_job_writes_on_its_term_is_the_last_checkpoint(
    home, tmp_path, moto_server_url, s3, bucket
):
    """Stopping the job TERMs its whole group, the agent too: the agent must still upload
    after the job has exited, or the checkpoint the job writes on TERM never leaves the box."""
    from tests.ports import refused_port

    with refused_port() as nobody:  # no metadata service: no notice
        env = agent_env(moto_server_url, f"http://127.0.0.1:{nobody}")
        run_id, run_dir = launch_with_agent(home, tmp_path, env, SAVES_ON_TERM, bucket)
        stopped = sh(home, remote.stop_script(run_id, grace_s=20))
    assert remote.parse_exit_line(stopped.stdout) == (143, "cmd"), stopped
    assert (run_dir / "agent.exit").read_text().strip() == "0"
    assert latest_file(s3, bucket, run_id, "final.bin") == b"last\n"


# ------------------------------------------------- the box's own stop on a spot notice (EC2)

# The job counts the TERMs it gets; on the first it writes its last checkpoint, then exits.
COUNTS_TERMS = (
    'trap \'echo term >> "$ORCH_WORKDIR/terms.log"; sleep 2;'
    ' echo last > "$ORCH_CHECKPOINT_DIR/final.bin"; exit 143\' TERM; '
    "echo ready; while :; do sleep 0.1; done"
)


@pytest.fixture
def md() -> Iterator[MetadataService]:
    with MetadataService() as service:
        yield service


def wait_for(path: Path, seconds: float = 120) -> None:
    """Until `path` exists; `seconds` only bounds a hang."""
    give_up = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < give_up, f"{path.name} never came"
        time.sleep(0.05)


def test_a_notice_seen_on_the_box_stops_the_job_and_orch_s_stop_only_waits(
    home, tmp_path, moto_server_url, s3, bucket, md
):
    """EC2 shows a reclaim only once the instance is shutting down, so orch's stop comes too
    late there: the agent stops the job itself on the notice (one TERM), the job's last
    checkpoint goes up, and orch's stop on the reclaim (Aliyun's case) sends no second TERM
    and KILLs nothing: it waits for the job's own end."""
    env = agent_env(moto_server_url, md.url)
    run_id, run_dir = launch_with_agent(home, tmp_path, env, COUNTS_TERMS, bucket)
    md.notice_aws(at=datetime.now(UTC) + timedelta(seconds=62))  # deadline in ~32 s
    terms = home / "orch" / "work" / "project" / "terms.log"
    wait_for(terms)  # the agent's notice poll: every 5 s
    assert (run_dir / "reclaim_stop").read_text().strip().isdigit()
    stopped = sh(home, remote.stop_script(run_id, grace_s=1, reclaim=True))
    assert remote.parse_exit_line(stopped.stdout) == (143, "cmd"), stopped
    assert terms.read_text() == "term\n"  # one TERM: the handler ran once
    assert (run_dir / "agent.exit").read_text().strip() == "0"
    assert latest_file(s3, bucket, run_id, "final.bin") == b"last\n"
    status = remote.parse_status(sh(home, remote.status_script(run_id)).stdout)
    assert status.reclaim_stopped and status.exit_code == 143


# A job that ignores TERM, with a checkpoint written before the notice.
DEAF_SAVED = (
    "trap '' TERM; echo one > \"$ORCH_CHECKPOINT_DIR/model.bin\"; "
    "echo ready; while :; do sleep 0.1; done"
)


def test_a_job_that_outlives_the_deadline_is_killed_but_not_its_wrapper_or_agent(
    home, tmp_path, moto_server_url, s3, bucket, md
):
    """At the deadline the agent KILLs the job, not itself (its final upload follows) nor the
    wrapper (it writes the job's exit status): the run ends by itself before the box goes."""
    env = agent_env(moto_server_url, md.url)
    run_id, run_dir = launch_with_agent(home, tmp_path, env, DEAF_SAVED, bucket)
    md.notice_aws(at=datetime.now(UTC) + timedelta(seconds=33))  # deadline in ~3 s
    wait_for(run_dir / "exit")
    assert (run_dir / "exit").read_text().split() == ["137", "cmd"]
    assert (run_dir / "agent.exit").read_text().strip() == "0"
    assert json.loads((run_dir / "agent.json").read_text())["final_upload"] == "ok"
    assert latest_file(s3, bucket, run_id, "model.bin") == b"one\n"
    assert remote.parse_status(sh(home, remote.status_script(run_id)).stdout).reclaim_stopped


@pytest.mark.parametrize("left", ["reclaim_deadline", "reclaim_stop"])
def test_a_new_attempt_forgets_the_last_attempt_s_reclaim(home, tmp_path, left):
    """The last attempt's notice deadline, or the agent's own stop, is not the new one's."""
    spec = spec_for(tmp_path, "true")
    run_dir = start(home, spec)
    (run_dir / left).write_text(f"{int(time.time()) + 300}\n")
    assert sh(home, remote.prepare_script(spec, None)).returncode == 0
    assert not (run_dir / left).exists()
    status = remote.parse_status(sh(home, remote.status_script(spec.run_id)).stdout)
    assert not status.reclaim_stopped


def test_the_status_line_says_when_the_box_stopped_the_job_for_a_reclaim() -> None:
    line = "pid=4 alive=0 exit=143 cmd size=3 free=12 reclaim=1"
    assert remote.parse_status(line).reclaim_stopped
    assert not remote.parse_status(line.replace("reclaim=1", "reclaim=0")).reclaim_stopped
    assert not remote.parse_status("pid=4 alive=0 exit=143 cmd size=3 free=12").reclaim_stopped
    assert not remote.parse_status(line.replace("reclaim=1", "reclaim=2")).found


# The job counts the TERMs it gets and, after the first, waits for `release` to exit.
WAITS_FOR_RELEASE = (
    'trap \'echo term >> "$ORCH_WORKDIR/terms.log";'
    ' while [ ! -e "$ORCH_WORKDIR/release" ]; do sleep 0.1; done; exit 143\' TERM; '
    "echo ready; while :; do sleep 0.1; done"
)


def test_a_notice_after_orch_s_own_stop_sends_no_second_term(
    home, tmp_path, moto_server_url, s3, bucket, md
):
    """On ECS orch may stop the job (reclaim=True) before the agent polls the notice: the
    agent, TERMed with the job, then sends no TERM of its own (the job's handler runs)."""
    import subprocess

    env = agent_env(moto_server_url, md.url)
    run_id, run_dir = launch_with_agent(home, tmp_path, env, WAITS_FOR_RELEASE, bucket)
    work = home / "orch" / "work" / "project"
    script = remote.stop_script(run_id, grace_s=60, reclaim=True)
    box_env = {"HOME": str(home), "PATH": os.environ["PATH"]}
    stopping = subprocess.Popen(["bash", "-c", script], env=box_env, stdout=subprocess.PIPE,
                                text=True)  # fmt: skip
    try:
        wait_for(work / "terms.log")
        md.notice_aws(at=datetime.now(UTC) + timedelta(seconds=62))
        give_up = time.monotonic() + 120  # a bound on a hang
        while "already being stopped" not in (run_dir / "output.log").read_text():
            assert time.monotonic() < give_up, (run_dir / "output.log").read_text()
            time.sleep(0.05)
        assert not (run_dir / "reclaim_stop").exists()
        (work / "release").touch()
        out, _ = stopping.communicate(timeout=120)
    finally:
        if stopping.poll() is None:
            stopping.kill()
    assert remote.parse_exit_line(out) == (143, "cmd"), out
    assert (work / "terms.log").read_text() == "term\n"
