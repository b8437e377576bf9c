"""`orch run` on Alibaba Cloud, end to end: spot recovery from an ECS reclaim.

Real parts: orch as a subprocess, Terraform core, the aliyun_gpu module, the alicloud test
provider against the ECS/VPC emulator; the box's SSH served by a real sshd on loopback (every
address routed to it by ORCH_SSH_CONFIG), real rsync; the checkpoint agent on the "box" speaking
S3 to the session's moto server as the S3-compatible store (ORCH_STORE_ENDPOINT, as for OSS),
with the STS credentials of the box's instance RAM role (the emulator's RAM and STS) served by
the metadata stand-in, which also gives the spot notice (tests/sim/metadata.py, Aliyun's
security hardening mode). Modelled on tests/e2e/test_run.py's AWS scenarios.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests import support
from tests.e2e import sshbox
from tests.e2e.aliyun.test_aliyun_lifecycle import instances, leftovers
from tests.e2e.test_run import COUNTER_PY, HOLD, Lines, wait_until
from tests.support import plan_file, require

pytestmark = pytest.mark.e2e

REGION = "cn-hangzhou"
CIDR = "203.0.113.7/32"
# moto's server lives for the whole session (the AWS tests' checkpoints are in bucket "ckpt").
BUCKET = "orch-aliyun-ckpt"
# The counter's length: 18 s, most of it still to go once the notice comes (at count 5), so the
# first box is reclaimed mid-count even while the job runs on through the notice (the agent
# polls the metadata every 5 s; orch asks ECS every second, then stops the job).
TARGET, DELAY = 60, "0.3"

candidate = partial(
    support.candidate,
    cloud="aliyun",
    region=REGION,
    price_per_hour=1.2,
    root_volume_gib=120,
    ssh_user=os.environ.get("USER") or getpass.getuser(),  # the sshd's only allowed login
)


@pytest.fixture
def box_server(tmp_path: Path):
    require(sshbox.prerequisites() is None, sshbox.prerequisites() or "")
    require(shutil.which("rsync"), "rsync (orch run syncs with it)")
    server = sshbox.make_sshbox(tmp_path / "sshd")
    server.serve("t4")  # ecs.gn6i's GPU
    yield server
    server.stop()


@pytest.fixture
def oss(moto_server: str):  # noqa: ANN201 - a boto3 client
    """The checkpoint store: moto's S3 standing in for OSS (both speak the S3 API)."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=moto_server,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def checkpointed_count(store: Any, bucket: str) -> int:
    """How far the newest committed checkpoint of the run in `bucket` got."""
    listing = store.list_objects_v2(Bucket=bucket, Prefix="runs/")["Contents"]
    (latest,) = [o["Key"] for o in listing if o["Key"].endswith("/checkpoints/LATEST")]
    seq = store.get_object(Bucket=bucket, Key=latest)["Body"].read().decode().strip()
    state = store.get_object(Bucket=bucket, Key=latest.replace("LATEST", f"{seq}/state.json"))
    return len(json.loads(state["Body"].read())["done"])


def empty_bucket(store: Any, bucket: str) -> None:
    store.create_bucket(Bucket=bucket)  # us-east-1: creating an owned bucket again is fine
    for item in store.list_objects_v2(Bucket=bucket).get("Contents", []):
        store.delete_object(Bucket=bucket, Key=item["Key"])


def run_args(plan: str, name: str, workdir: Path, *more: str) -> list[str]:
    return ["run", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--workdir", str(workdir),
            "--watch-interval", "1", *more]  # fmt: skip


def route_to_box(
    env: dict[str, str], box: sshbox.SshBox, tmp_path: Path, extra: dict[str, str] | None = None
) -> Path:
    """The box's HOME (its disk) and environment; every address the emulator hands out reaches
    the sshd. `env` is the aliyun_orch fixtures' own dict, so their runs see ORCH_SSH_CONFIG."""
    home = tmp_path / "box-home"
    sshbox.set_box_environment(box, home, extra)
    env["ORCH_SSH_CONFIG"] = str(sshbox.route_every_host(box, tmp_path / "routes"))
    return home


def lose_the_disk(home: Path, run_dir: Path) -> None:
    """What the instance's release takes: its processes (the job's group, if still there) and
    its disk (the run folder and the synced working directory)."""
    with contextlib.suppress(ProcessLookupError):  # orch stopped it during the notice already
        os.killpg(int((run_dir / "pid").read_text()), signal.SIGKILL)
    shutil.rmtree(home / ".orch")
    shutil.rmtree(home / "orch")


def released(aliyun: Any, instance_id: str) -> bool:
    backend = aliyun.backend
    return backend.wait_for(lambda: instance_id not in backend.instances, timeout=0.5)


def start_spot_counter_run(
    aliyun_orch_process: Callable[..., subprocess.Popen[str]], tmp_path: Path
) -> tuple[subprocess.Popen[str], Path]:
    """`orch run` of the counter on a spot box, checkpointing to the bucket every second and
    allowed one spot recovery; its process and the working directory (outputs come back)."""
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "counter.py").write_text(COUNTER_PY)
    plan = plan_file(tmp_path, candidate("ecs.gn6i-c4g1.xlarge", "spot"))
    proc = aliyun_orch_process(
        *run_args(plan, "run-spot", workdir, "--checkpoint-dir", "ckpt",
                  "--store", f"s3://{BUCKET}/runs", "--checkpoint-interval", "1",
                  "--spot-recovery", "1", "--fetch", "outputs", "--json",
                  "--", "python3", "counter.py", str(TARGET), DELAY, str(HOLD)),
    )  # fmt: skip
    return proc, workdir


def give_the_spot_notice(metadata: Any, home: Path, store: Any) -> tuple[Path, int]:
    """The spot service gives notice (metadata instance/spot/termination-time): the agent sees
    it and uploads the checkpoint at once. The box's run folder and the count checkpointed."""
    metadata.notice_aliyun()
    (run_dir,) = (home / ".orch" / "runs").iterdir()
    wait_until((run_dir / "interruption.json").exists, "the agent to see the notice")
    assert json.loads((run_dir / "interruption.json").read_text())["cloud"] == "aliyun"
    wait_until((run_dir / "last_upload.json").exists, "an upload")
    saved = checkpointed_count(store, BUCKET)
    assert saved >= 5
    return run_dir, saved


def check_one_recovery_from_the_reclaim(report: dict[str, Any], out: Lines, stop_now: bool) -> None:
    """The report: the first spot box lost to the reclaim, the second (in the region's other
    zone) completed."""
    assert report["exit_code"] == 0 and report["recoveries"] == 1 and report["box_destroyed"]
    lost, finished = report["attempts"]
    assert lost["outcome"] == "reclaimed" and "Recycling" in lost["reason"]
    assert lost["instance_type"] == "ecs.gn6i-c4g1.xlarge" and lost["market"] == "spot"
    assert finished["outcome"] == "completed" and finished["market"] == "spot"
    assert finished["zone"] != lost["zone"]  # the region's other zone first
    assert report["time_lost_s"] > 0 and report["cost_usd"] is not None
    if not stop_now:  # the job was stopped (TERM) on the old box during the notice
        assert "stopping run" in "\n".join(out.lines) and lost["exit_code"] == 143


def check_resumed_from_the_checkpoint_once(out: Lines, saved: int, workdir: Path) -> None:
    """The second attempt resumed from the checkpoint, and the count finished exactly once."""
    resumed = [line for line in out.lines if line.startswith("attempt=2 resumed=1 from=")]
    assert len(resumed) == 1 and saved <= int(resumed[0].rsplit("=", 1)[1]) <= HOLD
    count = json.loads((workdir / "outputs" / "count.json").read_text())
    assert count == list(range(1, TARGET + 1))
    assert [line for line in out.lines if line.startswith("attempt=")][0].startswith(
        "attempt=1 resumed=0"
    )


def check_both_boxes_and_their_roles_are_gone(aliyun: Any, ecs: Any, identity: Any) -> None:
    """Both boxes are gone, with their networks, groups and key pairs, and their RAM roles."""
    assert instances(ecs, "run-spot") == [] and leftovers(ecs) == {}
    # Each box read its own role's credentials from the metadata (one role per box, created
    # for it: a checkpoint reached the bucket only through them), and down removed both roles
    # and policies.
    assert len({instance for instance, _ in identity.issued}) == 2
    roles = {role for _, role in identity.issued}
    assert len(roles) == 2 and all(role.startswith("orch-run-spot-") for role in roles)
    assert aliyun.backend.ram.summary() == {"roles": [], "policies": [], "attachments": []}


# ------------------------------------------------------------------------------ scenarios


@pytest.mark.parametrize(
    "stop_now",
    [
        pytest.param(False, id="running-through-the-notice"),  # what ECS does
        pytest.param(True, id="stopped-at-the-notice"),  # the emulator's default
    ],
)
def test_spot_reclaim_mid_run_recovers_from_the_checkpoint_exactly_once(
    aliyun, aliyun_env, aliyun_orch_process, ecs, oss, moto_server, box_server, tmp_path, stop_now
):
    from tests.sim.identity import EmulatorInstanceIdentity
    from tests.sim.metadata import MetadataService

    empty_bucket(oss, BUCKET)
    with MetadataService() as metadata:
        # What a real box has: the store's endpoint and the metadata service, which serves the
        # spot notice and the STS credentials of the instance RAM role Terraform attached (no
        # keys in its environment: without the role, no checkpoint reaches the bucket).
        identity = EmulatorInstanceIdentity(aliyun.backend, "run-spot")
        metadata.aliyun_identity = identity
        home = route_to_box(
            aliyun_env,
            box_server,
            tmp_path,
            {
                "ORCH_STORE_ENDPOINT": moto_server,
                "AWS_DEFAULT_REGION": REGION,
                "ORCH_AGENT_METADATA_URL": metadata.url,
            },
        )
        proc, workdir = start_spot_counter_run(aliyun_orch_process, tmp_path)
        out = Lines(proc.stderr)  # under --json, CMD's output and orch's lines are on stderr
        out.wait_for("count 5", timeout=300)
        [first] = instances(ecs, "run-spot")
        assert first.spot_strategy == "SpotAsPriceGo"

        run_dir, saved = give_the_spot_notice(metadata, home, oss)
        # ...and ECS locks the instance (Recycling) to release it.
        aliyun.backend.reclaim_spot(first.instance_id, stop_now=stop_now)
        if not stop_now:
            # Still running: orch sees the lock, stops the job there and releases the box
            # itself (DeleteInstance) before the release is due; only then is the disk gone.
            wait_until(lambda: released(aliyun, first.instance_id), "orch's DeleteInstance", 180)
            assert first.instance_id not in aliyun.backend.released  # orch's doing, not ECS's
        lose_the_disk(home, run_dir)
        metadata.clear()  # the next box has no notice

        stdout = proc.stdout.read()
        assert proc.wait(timeout=600) == 0, "\n".join(out.lines[-40:])
        out.thread.join(timeout=10)
    check_one_recovery_from_the_reclaim(json.loads(stdout), out, stop_now)
    check_resumed_from_the_checkpoint_once(out, saved, workdir)
    check_both_boxes_and_their_roles_are_gone(aliyun, ecs, identity)


def test_run_exit_status_is_the_command_s_and_the_box_is_gone(
    aliyun_env, aliyun_orch, ecs, box_server, tmp_path
):
    route_to_box(aliyun_env, box_server, tmp_path)
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "fail.py").write_text(
        "import pathlib, sys\npathlib.Path('outputs').mkdir()\n"
        "pathlib.Path('outputs', 'log.txt').write_text('ran\\n')\nprint('failing', flush=True)\n"
        "sys.exit(3)\n"
    )
    plan = plan_file(tmp_path, candidate("ecs.gn6i-c4g1.xlarge", "spot"))
    result = aliyun_orch(
        *run_args(plan, "run-exit3", workdir, "--fetch", "outputs", "--json",
                  "--", "python3", "fail.py"),
    )  # fmt: skip
    assert result.returncode == 3, result.stderr[-3000:]
    assert "failing" in result.stderr and "the command exited 3" in result.stderr
    report = json.loads(result.stdout)
    (attempt,) = report["attempts"]
    assert (attempt["outcome"], attempt["exit_code"]) == ("failed", 3)
    assert attempt["cloud"] == "aliyun" and report["box_destroyed"] is True
    assert (workdir / "outputs" / "log.txt").read_text() == "ran\n"  # fetched all the same
    assert instances(ecs, "run-exit3") == [] and leftovers(ecs) == {}
