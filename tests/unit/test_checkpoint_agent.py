"""The checkpoint agent (orchestrator/boxside/agent.py), run as the box runs it: a subprocess of its
own, against a real moto server over HTTP and the metadata stand-in (tests/sim/metadata.py).

moto is a prerequisite (tests.support.require: skipped locally without it, fatal in CI).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator import boxside
from orchestrator.boxside import checkpoint_store, cloud_metadata, store_clients
from tests.ports import refused_port
from tests.sim.metadata import MetadataService
from tests.support import require

REPO = Path(__file__).resolve().parents[2]
# The agent as orch ships it to a box: agent.py, its modules and metadata.json in one folder.
AGENT = boxside.ship(Path(tempfile.mkdtemp(prefix="orch-agent-")))
PREFIX = "jobs/run-1"
NO_CLIENT = "no S3 client on this box"


# ------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def metadata() -> Iterator[MetadataService]:
    with MetadataService() as service:
        yield service


@pytest.fixture
def md(metadata: MetadataService) -> MetadataService:
    """The module's metadata stand-in, without notices, tokens or recorded requests."""
    metadata.clear()
    metadata.revoke_tokens()
    metadata.requests.clear()
    return metadata


@pytest.fixture
def env(moto_server_url: str, metadata: MetadataService) -> dict[str, str]:
    """The box's environment: credentials and endpoint from standard variables only."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ORCH_"))}
    base.update(
        AWS_ENDPOINT_URL=moto_server_url,
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_DEFAULT_REGION="us-east-1",
        ORCH_AGENT_METADATA_URL=metadata.url,
    )
    return base


@pytest.fixture
def store(bucket: str) -> str:
    return f"s3://{bucket}/{PREFIX}"


# ------------------------------------------------------------------------------ helpers


# How long a wait for an event may last before the test calls it a hang. Only a bound: each
# wait ends as soon as its event comes. An agent's start (boto3's import) and first upload to
# moto took up to 5.4 s of a 10 s allowance with 8 CPU burners on 2 cores.
HANG_S = 120.0


def run_agent(
    env: dict[str, str], *args: str, python: str = sys.executable, timeout: float = HANG_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, str(AGENT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def start_watch(
    env: dict[str, str],
    source: Path,
    store: str,
    state: Path,
    *,
    interval: float,
    cloud: str = "aws",
    poll: float | None = None,
    pid: int | None = None,
) -> subprocess.Popen[str]:
    args = ["--dir", str(source), "--store", store, "--state-dir", str(state)]
    args += ["--interval", str(interval), "--cloud", cloud]
    if poll is not None:
        args += ["--notice-poll", str(poll)]
    if pid is not None:
        args += ["--pid", str(pid)]
    return subprocess.Popen(
        [sys.executable, str(AGENT), "watch", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (the SigCgt mask in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)


def stop(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    """SIGTERM the agent once it takes the signal (a TERM before its handler is set would kill
    it, however slow the machine), and collect (exit status, stdout, stderr)."""
    if process.poll() is None:
        assert wait_until(lambda: catches_sigterm(process.pid) or process.poll() is not None)
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=HANG_S)
    return process.returncode, out, err


def wait_until(predicate: Callable[[], object], timeout: float = HANG_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def keys(s3, bucket: str) -> list[str]:  # noqa: ANN001
    listing = s3.list_objects_v2(Bucket=bucket, Prefix=PREFIX + "/")
    return sorted(item["Key"][len(PREFIX) + 1 :] for item in listing.get("Contents", []))


def latest(s3, bucket: str) -> str:  # noqa: ANN001
    return s3.get_object(Bucket=bucket, Key=f"{PREFIX}/checkpoints/LATEST")["Body"].read().decode()


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def last_seq(state: Path) -> int | None:
    record = read_json(state / "last_upload.json")
    return None if record is None else record["seq"]


def checkpoint_dir(root: Path) -> Path:
    """A training job's output: nested directories, binary data, an empty file."""
    (root / "model" / "shards").mkdir(parents=True)
    (root / "model" / "shards" / "part-0.bin").write_bytes(os.urandom(300_000))
    (root / "model" / "shards" / "part-1.bin").write_bytes(bytes(range(256)) * 64)
    (root / "model" / "config.json").write_text('{"step": 500}')
    (root / "optimizer.pt").write_bytes(os.urandom(4096))
    (root / "empty.marker").write_bytes(b"")
    return root


def boto3_blocker(tmp_path: Path) -> Path:
    """A PYTHONPATH entry that makes `import boto3` raise ImportError."""
    shim = tmp_path / "no-boto3"
    (shim / "boto3").mkdir(parents=True)
    (shim / "boto3" / "__init__.py").write_text("raise ImportError('boto3 is not installed')\n")
    return shim


def manifest(seq: int, files: dict[str, bytes], **extra: object) -> bytes:
    """A manifest for `files` ({relpath: its bytes}), as the agent writes one."""
    import hashlib

    return json.dumps(
        {
            "seq": seq,
            "files": {rel: len(data) for rel, data in files.items()},
            "sha256": {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()},
            "created": "2026-12-03T12:00:00Z",
            **extra,
        }
    ).encode()


def put_checkpoint(s3, bucket: str, seq: int, files: dict[str, bytes], commit: bool) -> None:  # noqa: ANN001
    """Write a checkpoint by hand: its files, and with commit its manifest and LATEST."""
    name = f"{seq:08d}"
    for rel, data in files.items():
        s3.put_object(Bucket=bucket, Key=f"{PREFIX}/checkpoints/{name}/{rel}", Body=data)
    if commit:
        s3.put_object(
            Bucket=bucket,
            Key=f"{PREFIX}/checkpoints/{name}.manifest.json",
            Body=manifest(seq, files),
        )
        s3.put_object(Bucket=bucket, Key=f"{PREFIX}/checkpoints/LATEST", Body=name.encode())


# ------------------------------------------------------------------------------ upload / restore


def test_upload_then_restore_gives_identical_bytes(env, s3, bucket, store, tmp_path) -> None:
    source = checkpoint_dir(tmp_path / "out")
    up = run_agent(env, "upload", "--dir", str(source), "--store", store)
    assert up.returncode == 0, up.stderr
    assert up.stdout.strip() == "orch-agent: uploaded 5 files (checkpoint 00000001)"
    assert keys(s3, bucket) == [
        "checkpoints/00000001.manifest.json",
        "checkpoints/00000001/empty.marker",
        "checkpoints/00000001/model/config.json",
        "checkpoints/00000001/model/shards/part-0.bin",
        "checkpoints/00000001/model/shards/part-1.bin",
        "checkpoints/00000001/optimizer.pt",
        "checkpoints/LATEST",
    ]
    assert latest(s3, bucket) == "00000001"
    body = s3.get_object(Bucket=bucket, Key=f"{PREFIX}/checkpoints/00000001.manifest.json")
    recorded = json.loads(body["Body"].read())
    assert recorded["seq"] == 1
    assert recorded["files"]["model/shards/part-0.bin"] == 300_000
    assert recorded["files"]["empty.marker"] == 0
    part = (source / "model" / "shards" / "part-0.bin").read_bytes()
    assert (
        recorded["sha256"]["model/shards/part-0.bin"]
        == __import__("hashlib").sha256(part).hexdigest()
    )

    target = tmp_path / "fresh" / "ckpt"  # its parent does not exist either
    down = run_agent(env, "restore", "--dir", str(target), "--store", store)
    assert down.returncode == 0, down.stderr
    assert down.stdout.strip() == "orch-agent: restored 5 files (checkpoint 00000001)"
    assert tree(target) == tree(source)
    assert not [p for p in target.rglob("*") if p.name.startswith(".orch-agent-tmp")]


def test_restore_without_checkpoint(env, store, tmp_path) -> None:
    result = run_agent(env, "restore", "--dir", str(tmp_path / "ckpt"), "--store", store)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"orch-agent: no checkpoint in {store}"
    assert (tmp_path / "ckpt").is_dir()


def test_restore_from_a_missing_bucket_fails_with_one_line(env, tmp_path) -> None:
    store = "s3://no-such-bucket-" + uuid.uuid4().hex[:8] + "/x"
    result = run_agent(env, "restore", "--dir", str(tmp_path / "ckpt"), "--store", store)
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("orch-agent: restore failed:")
    assert "NoSuchBucket" in lines[0]


def test_upload_of_an_empty_dir_commits_nothing(env, s3, bucket, store, tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    for directory in (tmp_path / "empty", tmp_path / "missing"):
        result = run_agent(env, "upload", "--dir", str(directory), "--store", store)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"orch-agent: nothing to upload in {directory}"
    assert keys(s3, bucket) == []


def test_half_written_checkpoint_is_never_restored(env, s3, bucket, store, tmp_path) -> None:
    put_checkpoint(s3, bucket, 1, {"weights.bin": b"good" * 100}, commit=True)
    # A writer that died after the files (2) and one that died before LATEST (3).
    put_checkpoint(s3, bucket, 2, {"weights.bin": b"torn"}, commit=False)
    s3.put_object(Bucket=bucket, Key=f"{PREFIX}/checkpoints/00000003/weights.bin", Body=b"late")
    s3.put_object(
        Bucket=bucket,
        Key=f"{PREFIX}/checkpoints/00000003.manifest.json",
        Body=manifest(3, {"weights.bin": b"late"}),
    )

    result = run_agent(env, "restore", "--dir", str(tmp_path / "ckpt"), "--store", store)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "orch-agent: restored 1 files (checkpoint 00000001)"
    assert tree(tmp_path / "ckpt") == {"weights.bin": b"good" * 100}

    # The next upload takes a number no one used and clears the leftovers below it.
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "weights.bin").write_bytes(b"next")
    up = run_agent(env, "upload", "--dir", str(tmp_path / "new"), "--store", store)
    assert up.stdout.strip() == "orch-agent: uploaded 1 files (checkpoint 00000004)"
    assert keys(s3, bucket) == [
        "checkpoints/00000003.manifest.json",
        "checkpoints/00000003/weights.bin",
        "checkpoints/00000004.manifest.json",
        "checkpoints/00000004/weights.bin",
        "checkpoints/LATEST",
    ]


@pytest.mark.parametrize("bad", ["../x", "/etc/cron.d/x"])
def test_manifest_with_an_unsafe_path_is_refused(env, s3, bucket, store, tmp_path, bad) -> None:
    put_checkpoint(s3, bucket, 1, {"ok.bin": b"fine", bad: b"evil"}, commit=True)
    target = tmp_path / "deep" / "ckpt"
    result = run_agent(env, "restore", "--dir", str(target), "--store", store)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "unsafe path in manifest" in lines[0]
    assert repr(bad) in lines[0]
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written == []  # refused before anything was downloaded


def test_retention_keeps_the_newest_two(env, s3, bucket, store, tmp_path) -> None:
    source = tmp_path / "out"
    source.mkdir()
    for step in range(1, 4):
        (source / "step.txt").write_text(f"step {step}")
        result = run_agent(env, "upload", "--dir", str(source), "--store", store)
        assert result.stdout.strip() == f"orch-agent: uploaded 1 files (checkpoint {step:08d})"
    assert keys(s3, bucket) == [
        "checkpoints/00000002.manifest.json",
        "checkpoints/00000002/step.txt",
        "checkpoints/00000003.manifest.json",
        "checkpoints/00000003/step.txt",
        "checkpoints/LATEST",
    ]
    run_agent(env, "restore", "--dir", str(tmp_path / "back"), "--store", store)
    assert (tmp_path / "back" / "step.txt").read_text() == "step 3"


def test_symlinks_leading_out_of_the_dir_are_not_uploaded(env, s3, bucket, store, tmp_path) -> None:
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "key.pem").write_text("private")
    source = tmp_path / "out"
    source.mkdir()
    (source / "weights.bin").write_bytes(b"w" * 10)
    (source / "alias.bin").symlink_to(source / "weights.bin")  # inside: uploaded as a file
    (source / "leak.pem").symlink_to(outside / "key.pem")
    (source / "leakdir").symlink_to(outside)
    result = run_agent(env, "upload", "--dir", str(source), "--store", store)
    assert result.returncode == 0, result.stderr
    assert keys(s3, bucket) == [
        "checkpoints/00000001.manifest.json",
        "checkpoints/00000001/alias.bin",
        "checkpoints/00000001/weights.bin",
        "checkpoints/LATEST",
    ]


def test_store_endpoint_variable_is_honoured(env, moto_server_url, bucket, store, tmp_path) -> None:
    env = {k: v for k, v in env.items() if k != "AWS_ENDPOINT_URL"}
    env["ORCH_STORE_ENDPOINT"] = moto_server_url
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.bin").write_bytes(b"abc")
    up = run_agent(env, "upload", "--dir", str(tmp_path / "out"), "--store", store)
    assert up.returncode == 0, up.stderr
    down = run_agent(env, "restore", "--dir", str(tmp_path / "back"), "--store", store)
    assert down.returncode == 0, down.stderr
    assert tree(tmp_path / "back") == {"a.bin": b"abc"}


# ------------------------------------------------------------------------------ watch


def test_watch_uploads_periodically_and_only_when_changed(env, s3, bucket, store, md, tmp_path):
    source, state = tmp_path / "out", tmp_path / "state"
    source.mkdir()
    (source / "step.txt").write_text("1")
    process = start_watch(env, source, store, state, interval=0.3, poll=0.5)
    try:
        assert wait_until(lambda: last_seq(state) == 1), process.stderr
        time.sleep(1.0)  # three intervals without a change
        assert last_seq(state) == 1
        assert latest(s3, bucket) == "00000001"
        (source / "step.txt").write_text("2")
        (source / "new.bin").write_bytes(b"n")
        assert wait_until(lambda: last_seq(state) == 2)
    finally:
        code, out, err = stop(process)
    assert code == 0, err
    assert out.splitlines()[:2] == [
        "orch-agent: uploaded 1 files (checkpoint 00000001)",
        "orch-agent: uploaded 2 files (checkpoint 00000002)",
    ]
    record = read_json(state / "last_upload.json")
    assert record is not None and record["files"] == 2 and record["at"].endswith("Z")
    assert latest(s3, bucket) == "00000002"
    assert not (state / "interruption.json").exists()
    assert ("GET", "/latest/meta-data/spot/instance-action") in md.requests


def test_watch_does_not_upload_a_freshly_restored_dir_again(env, s3, bucket, store, md, tmp_path):
    source = checkpoint_dir(tmp_path / "out")
    assert run_agent(env, "upload", "--dir", str(source), "--store", store).returncode == 0
    target, state = tmp_path / "box", tmp_path / "state"
    assert run_agent(env, "restore", "--dir", str(target), "--store", store).returncode == 0
    process = start_watch(env, target, store, state, interval=0.2)
    time.sleep(1.0)
    code, out, err = stop(process)
    assert code == 0, err
    assert out == ""
    assert latest(s3, bucket) == "00000001"


def test_a_stop_while_watch_is_starting_still_ends_in_the_final_upload(
    env, s3, bucket, store, md, tmp_path
):
    source, state = tmp_path / "out", tmp_path / "state"
    checkpoint_dir(source)
    process = start_watch(env, source, store, state, interval=600)
    # TERM as soon as the agent takes it: it is still opening the store (importing boto3).
    assert wait_until(lambda: catches_sigterm(process.pid))
    code, out, err = stop(process)
    assert code == 0, err
    assert "(checkpoint 00000001)" in out
    assert latest(s3, bucket) == "00000001"


@pytest.mark.parametrize("cloud", ["aws", "aliyun"])
def test_spot_notice_triggers_an_immediate_upload(env, s3, bucket, store, md, tmp_path, cloud):
    source, state = tmp_path / "out", tmp_path / "state"
    checkpoint_dir(source)
    process = start_watch(env, source, store, state, interval=600, cloud=cloud, poll=0.2)
    try:
        notice_path = {
            "aws": "/latest/meta-data/spot/instance-action",
            "aliyun": "/latest/meta-data/instance/spot/termination-time",
        }[cloud]
        assert wait_until(lambda: md.paths("GET").count(notice_path) >= 2)
        assert last_seq(state) is None  # the interval is far off
        if cloud == "aws":
            md.notice_aws(action="stop", at=None)
        else:
            md.notice_aliyun()
        assert wait_until(lambda: last_seq(state) == 1)
        assert process.poll() is None  # and it keeps going
    finally:
        code, out, err = stop(process)
    assert code == 0, err
    interruption = read_json(state / "interruption.json")
    assert interruption is not None
    assert interruption["cloud"] == cloud
    assert interruption["action"] == ("stop" if cloud == "aws" else "terminate")
    assert interruption["time"].endswith("Z") and interruption["seen_at"].endswith("Z")
    assert f"spot interruption notice ({cloud}: " in out
    assert "orch-agent: uploaded 5 files (checkpoint 00000001)" in out
    # Every notice request carried a token (orch's boxes require one on both clouds).
    assert ("PUT", "/latest/api/token") in md.requests
    assert len([k for k in keys(s3, bucket) if k.startswith("checkpoints/00000001/")]) == 5


def test_a_rebalance_recommendation_checkpoints_at_once(env, s3, bucket, store, md, tmp_path):
    source, state = tmp_path / "out", tmp_path / "state"
    checkpoint_dir(source)
    process = start_watch(env, source, store, state, interval=600, poll=0.2)
    rebalance = "/latest/meta-data/events/recommendations/rebalance"
    try:
        assert wait_until(lambda: md.paths("GET").count(rebalance) >= 2)
        assert last_seq(state) is None  # the interval is far off
        md.recommend_rebalance()
        assert wait_until(lambda: last_seq(state) == 1)
        # It keeps watching for the interruption notice itself, which uploads again.
        (source / "later.bin").write_bytes(b"after the recommendation")
        md.notice_aws()
        assert wait_until(lambda: last_seq(state) == 2)
    finally:
        code, out, err = stop(process)
    assert code == 0, err
    record = read_json(state / "rebalance.json")
    assert record is not None and record["notice_time"].endswith("Z")
    assert "rebalance recommendation (aws, " in out
    assert read_json(state / "interruption.json") is not None


def test_without_keys_the_agent_uses_the_box_s_role(env, s3, bucket, store, md, tmp_path):
    env = {k: v for k, v in env.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    env.pop("AWS_DEFAULT_REGION")
    source = checkpoint_dir(tmp_path / "out")
    refused = run_agent(env, "upload", "--dir", str(source), "--store", store)
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and "no credentials" in refused.stderr
    md.aws_identity = lambda: (
        "orch-box",
        {"AccessKeyId": "ASIAX", "SecretAccessKey": "s", "Token": "t"},
    )
    try:
        up = run_agent(env, "upload", "--dir", str(source), "--store", store)
    finally:
        md.aws_identity = None
    assert up.returncode == 0, up.stderr
    assert latest(s3, bucket) == "00000001"
    assert "/latest/meta-data/iam/security-credentials/orch-box" in md.paths("GET")


@pytest.mark.parametrize(("cloud", "notice_s"), [("aws", 120), ("aliyun", 300)])
def test_a_spot_notice_leaves_the_stop_a_deadline_before_the_reclaim(
    env, store, md, tmp_path, cloud, notice_s
):
    """The agent turns the notice's reclaim time into the deadline orch's stop on a reclaim
    waits for (reclaim_deadline: the time less the final upload's margin)."""
    source, state = tmp_path / "out", tmp_path / "state"
    source.mkdir()
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=notice_s)
    process = start_watch(env, source, store, state, interval=600, cloud=cloud, poll=0.2)
    try:
        if cloud == "aws":
            md.notice_aws(action="terminate", at=at)
        else:
            md.notice_aliyun(at=at)
        assert wait_until(lambda: (state / "reclaim_deadline").exists())
        assert process.poll() is None
    finally:
        code, _, err = stop(process)
    assert code == 0, err
    expected = int(at.timestamp()) - cloud_metadata.UPLOAD_MARGIN_S
    assert (state / "reclaim_deadline").read_text() == f"{expected}\n"
    interruption = read_json(state / "interruption.json")
    assert interruption is not None and interruption["stop_by"] == expected


@pytest.mark.parametrize(
    ("cloud", "body"),
    [
        ("aws", "[" * 100_000),  # nested past the JSON parser's depth
        ("aws", '{"action": "terminate", "time": "2026-13-45T99:99:99Z"}'),
        ("aws", '{"action": "terminate", "time": "9999-12-31T23:59:59Z"}'),
        ("aws", '{"action": "terminate", "time": 1420480920}'),
        ("aws", '{"action": "terminate", "time": "-1"}'),
        ("aws", '"not an object"'),
        ("aliyun", "\x1b]0;owned\x07 2015-01-05 18:02:00"),
        ("aliyun", "2015-01-05T18:02:00+08:00"),
    ],
)
def test_a_garbled_notice_neither_ends_the_watch_nor_sets_a_deadline(
    env, s3, bucket, store, md, tmp_path, cloud, body
):
    source, state = tmp_path / "out", tmp_path / "state"
    checkpoint_dir(source)
    process = start_watch(env, source, store, state, interval=600, cloud=cloud, poll=0.2)
    try:
        md.notice_body(cloud, body)
        assert wait_until(lambda: last_seq(state) == 1)  # still a notice: uploaded at once
        assert process.poll() is None, process.stderr
    finally:
        code, _, err = stop(process)
    assert code == 0, err
    assert "Traceback" not in err
    interruption = read_json(state / "interruption.json")
    assert interruption is not None and interruption["stop_by"] is None
    assert not (state / "reclaim_deadline").exists()  # the stop keeps its short grace


def test_a_garbled_rebalance_recommendation_does_not_end_the_watch(
    env, s3, bucket, store, md, tmp_path
):
    source, state = tmp_path / "out", tmp_path / "state"
    checkpoint_dir(source)
    process = start_watch(env, source, store, state, interval=600, poll=0.2)
    try:
        md.rebalance_body("[" * 100_000)
        assert wait_until(lambda: last_seq(state) == 1)
        assert process.poll() is None
    finally:
        code, _, err = stop(process)
    assert code == 0, err
    record = read_json(state / "rebalance.json")
    assert record is not None and record["notice_time"] == ""


def test_watch_fetches_a_new_token_when_the_old_one_stops_working(env, store, md, tmp_path):
    source, state = tmp_path / "out", tmp_path / "state"
    source.mkdir()
    (source / "a.bin").write_bytes(b"a")
    process = start_watch(env, source, store, state, interval=600, poll=0.2)
    try:
        assert wait_until(lambda: len(md.paths("GET")) >= 2)
        assert md.paths("PUT") == ["/latest/api/token"]  # one token serves many polls
        md.revoke_tokens()
        md.notice_aws(action="terminate")
        assert wait_until(lambda: read_json(state / "interruption.json") is not None)
    finally:
        code, _, err = stop(process)
    assert code == 0, err
    assert len(md.paths("PUT")) == 2


def test_watch_exits_with_a_final_upload_when_the_training_process_exits(
    env, s3, bucket, store, md, tmp_path
):
    source, state = tmp_path / "out", tmp_path / "state"
    source.mkdir()
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    process = start_watch(env, source, store, state, interval=600, cloud="aliyun", pid=trainer.pid)
    try:
        time.sleep(0.8)
        assert process.poll() is None
        (source / "final.bin").write_bytes(b"last words")
        trainer.kill()  # not reaped yet: a zombie still answers kill(pid, 0)
        out, err = process.communicate(timeout=HANG_S)
    finally:
        trainer.wait()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert out.strip() == "orch-agent: uploaded 1 files (checkpoint 00000001)"
    assert last_seq(state) == 1
    body = s3.get_object(Bucket=bucket, Key=f"{PREFIX}/checkpoints/00000001/final.bin")
    assert body["Body"].read() == b"last words"


def test_sigterm_uploads_once_more_and_a_silent_metadata_service_is_no_notice(
    env, s3, bucket, store, tmp_path
):
    source, state = tmp_path / "out", tmp_path / "state"
    source.mkdir()
    with refused_port() as nobody_there:
        env = dict(env, ORCH_AGENT_METADATA_URL=f"http://127.0.0.1:{nobody_there}")
        process = start_watch(env, source, store, state, interval=600, poll=0.1)
        time.sleep(0.8)
        (source / "late.bin").write_bytes(b"written just before the end")
        code, out, err = stop(process)
    assert code == 0, err
    assert out.strip() == "orch-agent: uploaded 1 files (checkpoint 00000001)"
    assert not (state / "interruption.json").exists()
    assert latest(s3, bucket) == "00000001"


def test_watch_survives_storage_errors_and_retries(env, s3, bucket, store, md, tmp_path):
    source, state = tmp_path / "out", tmp_path / "state"
    source.mkdir()
    (source / "a.bin").write_bytes(b"a")
    missing = f"s3://{bucket}-later/{PREFIX}"
    process = start_watch(env, source, missing, state, interval=0.2)
    lines: list[str] = []

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)

    reader = __import__("threading").Thread(target=read, daemon=True)
    reader.start()
    try:
        # Wait for the failure itself (not a guessed time), then for the retry to succeed.
        assert wait_until(lambda: any("upload failed" in line for line in lines))
        assert process.poll() is None  # errors are not fatal
        s3.create_bucket(Bucket=f"{bucket}-later")
        assert wait_until(lambda: last_seq(state) == 1)
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=HANG_S)
        reader.join(timeout=10)
    err = "".join(lines)
    assert code == 0, err
    assert "upload failed (retrying next round)" in err
    assert "NoSuchBucket" in err


# ------------------------------------------------------------------------------ no boto3


def test_without_boto3_or_the_aws_cli_the_builtin_client_does_it_all(
    env, s3, bucket, store, tmp_path
) -> None:
    env = dict(env, PYTHONPATH=str(boto3_blocker(tmp_path)), PATH=str(tmp_path / "empty-bin"))
    source = checkpoint_dir(tmp_path / "out")
    up = run_agent(env, "upload", "--dir", str(source), "--store", store)
    assert up.returncode == 0, up.stderr
    down = run_agent(env, "restore", "--dir", str(tmp_path / "back"), "--store", store)
    assert down.returncode == 0, down.stderr
    assert tree(tmp_path / "back") == tree(source)


def test_boto3_asked_for_without_boto3_or_the_aws_cli_exits_2_with_one_line(
    env, store, tmp_path
) -> None:
    env = dict(env, PYTHONPATH=str(boto3_blocker(tmp_path)), PATH=str(tmp_path / "empty-bin"))
    env["ORCH_AGENT_S3_CLIENT"] = "boto3"  # what OSS endpoints get
    for args in (
        ["restore", "--dir", str(tmp_path / "d"), "--store", store],
        ["upload", "--dir", str(tmp_path), "--store", store],
        ["watch", "--dir", str(tmp_path), "--store", store, "--interval", "1"]
        + ["--cloud", "aws", "--state-dir", str(tmp_path / "s")],
    ):
        result = run_agent(env, *args)
        assert result.returncode == 2, result.stderr
        assert result.stdout == ""
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("orch-agent: " + NO_CLIENT)
        assert "boto3" in lines[0] and "aws CLI" in lines[0]


def test_without_boto3_it_falls_back_to_the_aws_cli(env, s3, bucket, store, tmp_path) -> None:
    # The test extra installs awscli into this interpreter's environment.
    beside = Path(sys.executable).parent / "aws"
    aws = str(beside) if beside.exists() else shutil.which("aws")
    works = (
        aws is not None and subprocess.run([aws, "--version"], capture_output=True).returncode == 0
    )
    require(works, "the aws CLI (pip install -e '.[test]' installs awscli)")
    assert aws is not None
    env = dict(env, PYTHONPATH=str(boto3_blocker(tmp_path)), ORCH_AGENT_S3_CLIENT="boto3")
    env["PATH"] = f"{Path(aws).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    source = tmp_path / "out"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "blob.bin").write_bytes(os.urandom(2048))
    up = run_agent(env, "upload", "--dir", str(source), "--store", store)
    assert up.returncode == 0, up.stderr
    assert up.stdout.strip() == "orch-agent: uploaded 1 files (checkpoint 00000001)"
    down = run_agent(env, "restore", "--dir", str(tmp_path / "back"), "--store", store)
    assert down.returncode == 0, down.stderr
    assert tree(tmp_path / "back") == tree(source)


# ------------------------------------------------------------------------------ the file itself


def stdlib_names() -> set[str]:
    return set(sys.stdlib_module_names)


def imports_of(path: Path) -> set[str]:
    source = path.read_text()
    parsed = ast.parse(source, feature_version=(3, 8))
    assert "removeprefix" not in source and "removesuffix" not in source
    imported = set()
    for node in ast.walk(parsed):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    return imported


def test_every_shipped_module_is_python38_syntax_and_imports_only_stdlib_and_boto3() -> None:
    # Its siblings lie next to it on the box (an import of a module orch does not ship fails
    # here); `orchestrator` only where orch's tests import them.
    shipped = sorted(name for name in boxside.agent_files() if name.endswith(".py"))
    siblings = {name[: -len(".py")] for name in shipped}
    assert {"agent", "box_s3", "checkpoint_store"} <= siblings
    allowed = stdlib_names() | siblings | {"__future__", "boto3", "botocore", "orchestrator"}
    imported = {name: imports_of(AGENT.with_name(name)) for name in shipped}
    assert [name for name, found in imported.items() if found - allowed] == []
    assert imported["box_s3.py"] <= stdlib_names() | {"__future__"}


@pytest.mark.parametrize(
    "bad", ["../x", "a/../../x", "/abs", "a//b", "./a", "a/.", "", "a\\..\\x", "nul\x00"]
)
def test_relative_paths_from_the_store_are_checked(bad: str) -> None:
    with pytest.raises(checkpoint_store.BadCheckpoint, match="unsafe path"):
        checkpoint_store.check_relpath(bad)
    raw = json.dumps({"seq": 3, "files": {"ok/a.bin": 1, bad: 2}}).encode()
    with pytest.raises(checkpoint_store.BadCheckpoint):
        checkpoint_store.parse_manifest(raw, 3)


def test_manifests_are_validated() -> None:
    digest = "ab" * 32
    good = {"seq": 3, "files": {"a/b.bin": 10, "c": 0}, "mtime_ns": {"c": 5}}
    good["sha256"] = {"a/b.bin": digest, "c": digest}
    files, mtimes, digests = checkpoint_store.parse_manifest(json.dumps(good).encode(), 3)
    assert files == {"a/b.bin": 10, "c": 0} and mtimes == {"c": 5} and digests["c"] == digest
    with pytest.raises(checkpoint_store.BadCheckpoint):
        checkpoint_store.check_relpath(7)
    for bad in (
        b"not json",
        b"[]",
        json.dumps({"seq": 4, "files": {}}).encode(),  # names another checkpoint
        json.dumps({"seq": 3, "files": {"a": -1}}).encode(),
        json.dumps({"seq": 3, "files": {"a": True}}).encode(),
        json.dumps({"seq": 3, "files": {"a": "10"}}).encode(),
        json.dumps({**good, "sha256": {"a/b.bin": digest}}).encode(),  # c has no digest
        json.dumps({**good, "sha256": {**good["sha256"], "c": "AB" * 32}}).encode(),
        json.dumps({**good, "mtime_ns": {"c": 10**30}}).encode(),  # past os.utime's range
        json.dumps({**good, "mtime_ns": {"c": 1e30}}).encode(),
        json.dumps({**good, "mtime_ns": {"zz": 1}}).encode(),  # a file not in the list
        json.dumps({**good, "files": {"a/b.bin": 2**63, "c": 0}}).encode(),
    ):
        with pytest.raises(checkpoint_store.BadCheckpoint):
            checkpoint_store.parse_manifest(bad, 3)


class MemoryStore:
    """The store interface over a dict, calling `on_upload(path)` before each file upload."""

    def __init__(self, on_upload: Callable[[str], None] = lambda path: None) -> None:
        self.objects: dict[str, bytes] = {}
        self.on_upload = on_upload

    def get_bytes(self, key: str) -> bytes | None:
        return self.objects.get(key)

    def put_bytes(self, key: str, data: bytes) -> None:
        self.objects[key] = data

    def upload(self, path: str, key: str) -> None:
        self.on_upload(path)
        self.objects[key] = Path(path).read_bytes()

    def download(self, key: str, path: str) -> None:
        Path(path).write_bytes(self.objects[key])

    def list(self, prefix: str) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    def delete(self, key: str) -> None:
        del self.objects[key]


def test_files_that_vanish_mid_upload_are_left_out(tmp_path: Path) -> None:
    for name in ("a.bin", "b.bin", "c.bin"):
        (tmp_path / name).write_bytes(name.encode())

    def trainer_deletes_b(path: str) -> None:
        if path.endswith("a.bin"):
            (tmp_path / "b.bin").unlink()  # between the scan and b's turn

    store = MemoryStore(trainer_deletes_b)
    layout = checkpoint_store.Layout("p")
    seq, uploaded = checkpoint_store.upload(store, layout, str(tmp_path))
    assert seq == 1 and sorted(uploaded) == ["a.bin", "c.bin"]
    manifest = json.loads(store.objects["p/checkpoints/00000001.manifest.json"])
    assert manifest["files"] == {"a.bin": 5, "c.bin": 5}
    assert store.objects["p/checkpoints/LATEST"] == b"00000001"


def test_a_file_rewritten_during_its_upload_is_uploaded_again(tmp_path: Path) -> None:
    target = tmp_path / "model.bin"
    target.write_bytes(b"old")
    rewrites = []

    def trainer_rewrites_once(path: str) -> None:
        if not rewrites:
            rewrites.append(path)
            target.write_bytes(b"new and longer")
            os.utime(target, ns=(1, 1))

    store = MemoryStore(trainer_rewrites_once)
    checkpoint_store.upload(store, checkpoint_store.Layout(""), str(tmp_path))
    assert store.objects["checkpoints/00000001/model.bin"] == b"new and longer"
    manifest = json.loads(store.objects["checkpoints/00000001.manifest.json"])
    assert manifest["files"] == {"model.bin": 14} and manifest["mtime_ns"] == {"model.bin": 1}


def test_a_file_that_never_settles_is_not_committed(tmp_path: Path) -> None:
    target = tmp_path / "model.bin"
    target.write_bytes(b"0")
    count = iter(range(1, 100))

    def trainer_keeps_writing(path: str) -> None:
        target.write_bytes(b"x" * next(count))  # a new size each time: mtimes are coarse

    store = MemoryStore(trainer_keeps_writing)
    with pytest.raises(checkpoint_store.FileChanging):
        checkpoint_store.upload(store, checkpoint_store.Layout(""), str(tmp_path))
    assert "checkpoints/LATEST" not in store.objects
    assert not [k for k in store.objects if k.endswith(".manifest.json")]


def test_oss_endpoints_get_virtual_hosted_addressing() -> None:
    oss = store_clients.client_config("https://oss-cn-hangzhou.aliyuncs.com")
    assert oss.s3 == {"addressing_style": "virtual"}
    assert oss.signature_version == "s3"
    assert oss.request_checksum_calculation == "when_required"
    other = store_clients.client_config("http://127.0.0.1:9000")
    assert not (other.s3 or {}).get("addressing_style")
    assert other.signature_version is None


# ------------------------------------------------------------------------------ integrity


def test_a_file_that_does_not_match_its_sha256_refuses_the_whole_checkpoint(
    env, s3, bucket, store, tmp_path
) -> None:
    source = checkpoint_dir(tmp_path / "out")
    assert run_agent(env, "upload", "--dir", str(source), "--store", store).returncode == 0
    key = f"{PREFIX}/checkpoints/00000001/optimizer.pt"
    s3.put_object(Bucket=bucket, Key=key, Body=os.urandom(4096))  # same size, other bytes
    target = tmp_path / "back"
    result = run_agent(env, "restore", "--dir", str(target), "--store", store)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "optimizer.pt: SHA-256" in lines[0] and "refused" in lines[0]
    assert [p for p in target.rglob("*") if p.is_file()] == []  # nothing restored, no leftovers


def test_a_manifest_with_an_impossible_mtime_is_refused_before_anything_is_written(
    env, s3, bucket, store, tmp_path
) -> None:
    files = {"a.bin": b"first", "b.bin": b"second"}
    put_checkpoint(s3, bucket, 1, files, commit=False)
    body = manifest(1, files, mtime_ns={"a.bin": 10**30, "b.bin": 1})
    s3.put_object(Bucket=bucket, Key=f"{PREFIX}/checkpoints/00000001.manifest.json", Body=body)
    s3.put_object(Bucket=bucket, Key=f"{PREFIX}/checkpoints/LATEST", Body=b"00000001")
    target = tmp_path / "back"
    result = run_agent(env, "restore", "--dir", str(target), "--store", store)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad mtime_ns for 'a.bin'" in lines[0]
    assert [p for p in target.rglob("*") if p.is_file()] == []


def test_watch_records_its_outcome_and_a_lost_store_is_a_failed_final_upload(
    env, s3, bucket, store, md, tmp_path
):
    source, state = tmp_path / "out", tmp_path / "state"
    source.mkdir()
    (source / "a.bin").write_bytes(b"a")
    process = start_watch(env, source, store, state, interval=0.2)
    try:
        assert wait_until(lambda: last_seq(state) == 1)
        # The store goes away mid-run (emptied and deleted), then the job writes more.
        for key in [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]:
            s3.delete_object(Bucket=bucket, Key=key)
        s3.delete_bucket(Bucket=bucket)
        (source / "b.bin").write_bytes(b"b")
    finally:
        code, _, err = stop(process)
    assert code == 1
    assert "the final upload failed" in err
    outcome = read_json(state / "agent.json")
    assert outcome is not None and outcome["final_upload"] == "failed"
    assert outcome["checkpoint"] == "00000001" and outcome["failed_rounds"] >= 1
    assert "NoSuchBucket" in outcome["error"]


def test_watch_records_a_good_final_upload(env, s3, bucket, store, md, tmp_path):
    source, state = tmp_path / "out", tmp_path / "state"
    source.mkdir()
    (source / "first.bin").write_bytes(b"first")
    process = start_watch(env, source, store, state, interval=0.2)
    try:
        assert wait_until(lambda: last_seq(state) == 1)  # running, its signals taken
    finally:
        code, _, err = stop(process)
    assert code == 0, err
    outcome = read_json(state / "agent.json")
    assert outcome is not None and outcome["final_upload"] == "ok"
    assert outcome["checkpoint"] == "00000001" and outcome["error"] is None


def test_a_restore_through_a_symlinked_dir_creates_nothing_outside(tmp_path: Path) -> None:
    """DIR/run is a symlink out of DIR: a manifest path under it is refused before any
    directory is made, so the restore does not create DIR's folders outside it."""
    import hashlib

    outside, root = tmp_path / "outside", tmp_path / "dir"
    outside.mkdir()
    root.mkdir()
    (root / "run").symlink_to(outside)
    data = b"weights"
    store = MemoryStore()
    store.objects = {
        "checkpoints/LATEST": b"00000001",
        "checkpoints/00000001.manifest.json": json.dumps(
            {
                "seq": 1,
                "files": {"run/new/deep/w.bin": len(data)},
                "sha256": {"run/new/deep/w.bin": hashlib.sha256(data).hexdigest()},
            }
        ).encode(),
        "checkpoints/00000001/run/new/deep/w.bin": data,
    }
    with pytest.raises(checkpoint_store.BadCheckpoint, match="leads outside"):
        checkpoint_store.restore(store, checkpoint_store.Layout(""), str(root))
    assert list(outside.iterdir()) == []


def test_a_notice_never_stops_the_group_of_a_pid_that_leads_none(
    env, s3, bucket, store, md, tmp_path
):
    """On a spot notice the agent stops the job by the process group its --pid leads (the
    wrapper's, in both launches). A --pid that leads none is not the wrapper: its group (run by
    hand, a login shell's) must not be TERMed."""
    from datetime import UTC, datetime, timedelta

    source, state = tmp_path / "out", tmp_path / "state"
    source.mkdir()
    leader = subprocess.Popen(
        ["bash", "-c", "sleep 60 & echo $!; wait"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert leader.stdout is not None
    child = int(leader.stdout.readline())
    process = start_watch(env, source, store, state, interval=600, poll=0.2, pid=child)
    try:
        md.notice_aws(at=datetime.now(UTC) + timedelta(seconds=90))
        assert wait_until(lambda: read_json(state / "interruption.json") is not None)
        assert wait_until(lambda: catches_sigterm(process.pid))
        process.send_signal(signal.SIGUSR1)  # the wrapper's "the job has exited"
        _, err = process.communicate(timeout=HANG_S)
        untouched = leader.poll() is None
    finally:
        if leader.poll() is None:
            os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()
        if process.poll() is None:
            process.kill()
    assert untouched, err
    assert not (state / "reclaim_stop").exists()
    assert "leads no process group of its own" in err
