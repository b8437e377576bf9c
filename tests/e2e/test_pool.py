"""`orch pool` end to end: real Terraform core + hashicorp/aws against moto, every box's SSH
on one real sshd on loopback, each box with its own key and its own HOME (tests.e2e.sshbox
KeyRouter), the pool record in the local store shared by separate orch processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests import support
from tests.e2e import sshbox
from tests.e2e.conftest import orch_argv
from tests.support import ok, plan_file, require

pytestmark = pytest.mark.e2e

CIDR = "203.0.113.7/32"
MOTO_AMI = "ami-1e749f67"
REPO = Path(__file__).resolve().parents[2]

candidate = partial(
    support.candidate,
    region="us-east-1",
    image={"id": MOTO_AMI},
    root_volume_gib=120,
    ssh_user=__import__("getpass").getuser(),
)


@pytest.fixture
def pool_env(aws_env: dict[str, str], tmp_path: Path):
    require(sshbox.prerequisites() is None, sshbox.prerequisites() or "")
    require(__import__("shutil").which("rsync"), "rsync (orch run syncs with it)")
    server = sshbox.make_sshbox(tmp_path / "sshd")
    server.serve("a10g")
    routes = sshbox.route_to(server, tmp_path / "routes")
    env = {**aws_env, "ORCH_SSH_CONFIG": str(routes)}
    with sshbox.KeyRouter(server, Path(aws_env["ORCH_HOME"]), tmp_path / "homes") as router:
        yield env, router
    server.stop()


def pool_instances(ec2: Any, pool: str, live: bool = True) -> list[dict[str, Any]]:
    pages = ec2.describe_instances(Filters=[{"Name": "tag:orch:pool", "Values": [pool]}])
    found = [i for r in pages["Reservations"] for i in r["Instances"]]
    return [i for i in found if i["State"]["Name"] != "terminated"] if live else found


def nothing_tagged(ec2: Any, pool: str) -> None:
    assert pool_instances(ec2, pool) == []
    groups = ec2.describe_security_groups(Filters=[{"Name": "tag:orch:pool", "Values": [pool]}])
    assert groups["SecurityGroups"] == []


def status(orch: Any, env: dict[str, str], pool: str) -> dict[str, Any]:
    return json.loads(ok(orch("pool", "status", pool, "--json", env=env)).stdout)


def states(orch: Any, env: dict[str, str], pool: str) -> dict[str, str]:
    return {b["box"]: b["state"] for b in status(orch, env, pool)["boxes"]}


def create(orch: Any, env: dict[str, str], tmp_path: Path, pool: str, *more: str) -> None:
    plan = plan_file(tmp_path, candidate("g5.xlarge"))
    ok(orch("pool", "create", pool, "--plan", plan, "--ssh-cidr", CIDR, "--ttl", "2h",
            "--check-timeout", "60", *more, env=env, timeout=900))  # fmt: skip


# ------------------------------------------------------------------------------ scenarios


def test_twenty_concurrent_leases_never_share_a_box(orch, ec2, pool_env, tmp_path):
    env, _ = pool_env
    create(orch, env, tmp_path, "race", "--min", "5", "--max", "8", "--lease-ttl", "30m")
    assert list(states(orch, env, "race").values()) == ["ready"] * 5

    leasers = [
        subprocess.Popen(
            orch_argv(
                ["pool", "lease", "race", "--wait", "20s", "--check-timeout", "60", "--json"]
            ),
            env=env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(20)
    ]
    results = [(p.wait(timeout=900), p.stdout.read(), p.stderr.read()) for p in leasers]
    leased = [json.loads(out) for code, out, _ in results if code == 0]
    refused = [err for code, _, err in results if code != 0]
    boxes = [lease["box"] for lease in leased]
    assert len(boxes) == len(set(boxes)) == 8, results  # never one box twice; --max is 8
    assert len(refused) == 12
    for err in refused:  # the rest waited, then one clear line
        (line,) = [x for x in err.splitlines() if x.startswith("orch: error: ")]
        assert "no box free in pool race within 20 s" in line and "--max 8" in line
    assert len({lease["lease_id"] for lease in leased}) == 8
    assert len(pool_instances(ec2, "race")) == 8
    assert sorted(states(orch, env, "race").values()) == ["leased"] * 8

    # Released clean: reset and ready again; dirty: destroyed. Only with the lease id, or
    # --force: these leases' holders are other processes.
    first, second = boxes[:2]
    lease_of = {lease["box"]: lease["lease_id"] for lease in leased}
    taken = orch("pool", "release", "race", first, env=env)
    assert taken.returncode == 2 and "--lease ID" in taken.stderr
    assert json.loads(ok(orch("pool", "release", "race", first, "--lease", lease_of[first],
                              "--json", env=env)).stdout)["outcome"] == "ready"  # fmt: skip
    ok(orch("pool", "release", "race", second, "--dirty", "--force", env=env))
    after = states(orch, env, "race")
    assert after[first] == "ready" and second not in after

    ok(orch("pool", "delete", "race", "--force", env=env, timeout=900))
    nothing_tagged(ec2, "race")
    assert orch("pool", "status", "race", env=env).returncode == 2


def test_a_killed_lease_holder_s_box_comes_back_and_a_lost_box_is_replaced(
    orch, orch_process, ec2, pool_env, tmp_path
):
    env, router = pool_env
    create(orch, env, tmp_path, "heal", "--min", "1", "--max", "2", "--lease-ttl", "1h")
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "job.py").write_text(
        "import time, pathlib\npathlib.Path('mark').write_text('x')\nprint('working', flush=True)\n"
        "time.sleep(3600)\n"
    )
    # `orch run --pool` holds a lease while its job runs; SIGKILL it: nobody releases.
    holder = orch_process("run", "--pool", "heal", "--workdir", str(workdir), "--", "python3",
                          "job.py", env=env)  # fmt: skip
    deadline = time.monotonic() + 300
    while "leased" not in states(orch, env, "heal").values():
        assert time.monotonic() < deadline and holder.poll() is None
        time.sleep(0.5)
    (box,) = [b for b, s in states(orch, env, "heal").items() if s == "leased"]
    runs = router.home_of(box) / ".orch" / "runs"
    while not list(runs.glob("*/pid")):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    job_pid = int(next(runs.glob("*/pid")).read_text())
    os.kill(job_pid, 0)  # the job outlived its orch

    # Before the lease ends, reconcile leaves the box alone; after it, the box comes back.
    ok(orch("pool", "reconcile", "heal", env=env, timeout=600))
    assert states(orch, env, "heal")[box] == "leased"
    (record,) = Path(env["ORCH_HOME"]).glob("**/heal/pool.json")
    data = json.loads(record.read_text())
    data["boxes"][box]["lease"]["expires_at"] = "2020-01-01T00:00:00Z"  # time passes
    record.write_text(json.dumps(data))
    reconciled = ok(orch("pool", "reconcile", "heal", "--json", env=env, timeout=600))
    result = json.loads(reconciled.stdout)
    assert result["actions"]["lease_recovered"] == [box]
    assert states(orch, env, "heal").get(box) == "ready", reconciled.stderr
    with pytest.raises(ProcessLookupError):  # the reset ended the dead holder's job
        for _ in range(50):
            os.kill(job_pid, 0)
            time.sleep(0.1)
    assert not (router.home_of(box) / "orch").exists()  # and wiped its files

    # A box terminated behind orch's back is replaced by the next reconcile.
    (instance,) = pool_instances(ec2, "heal")
    ec2.terminate_instances(InstanceIds=[instance["InstanceId"]])
    result = json.loads(
        ok(orch("pool", "reconcile", "heal", "--json", env=env, timeout=600)).stdout
    )
    assert result["actions"]["replaced"] == [box] and len(result["actions"]["started"]) == 1
    now = states(orch, env, "heal")
    assert box not in now and list(now.values()) == ["ready"]
    assert len(pool_instances(ec2, "heal")) == 1

    # `orch run --pool`: a job that succeeds gives the box back clean; one that fails, dirty.
    (fresh,) = now
    (workdir / "ok.py").write_text("print('pool job ran')\n")
    ran = ok(orch("run", "--pool", "heal", "--workdir", str(workdir), "--", "python3", "ok.py",
                  env=env, timeout=600))  # fmt: skip
    assert (
        "pool job ran" in ran.stdout and f"box {fresh} went back to pool heal: ready" in ran.stderr
    )
    assert states(orch, env, "heal") == {fresh: "ready"}
    failed = orch("run", "--pool", "heal", "--workdir", str(workdir), "--", "python3", "-c",
                  "raise SystemExit(5)", env=env, timeout=600)  # fmt: skip
    assert (
        failed.returncode == 5 and f"box {fresh} went back to pool heal: destroyed" in failed.stderr
    )
    assert states(orch, env, "heal") == {}

    ok(orch("pool", "delete", "heal", env=env, timeout=900))
    nothing_tagged(ec2, "heal")


def test_a_pool_in_s3_is_shared_by_runners_on_other_machines(
    orch, ec2, s3, pool_env, capacity_proxy, tmp_path
):
    """The record, the boxes' Terraform state and their keys live in the bucket: a runner with
    another ORCH_HOME (another machine) leases, reaches, releases; the creator deletes."""
    env, router = pool_env
    s3.create_bucket(Bucket="pools")
    store = "s3://pools/ci"
    # Conditional writes through the proxy that makes moto's atomic, as S3's are.
    env = {**env, "AWS_ENDPOINT_URL": capacity_proxy.url}
    create(
        orch,
        env,
        tmp_path,
        "shared",
        "--min",
        "1",
        "--max",
        "1",
        "--lease-ttl",
        "30m",
        "--store",
        store,
    )
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="pools")["Contents"]]
    assert "ci/pools/shared/pool.json" in keys
    assert any(k.startswith("ci/pools/shared/keys/shared-") for k in keys)
    assert any(k.startswith("ci/pools/shared/state/") for k in keys)

    other = {**env, "ORCH_HOME": str(tmp_path / "other-machine")}
    leased = json.loads(ok(orch("pool", "lease", "shared", "--store", store, "--json",
                                env=other)).stdout)  # fmt: skip
    box_dir = Path(leased["box_dir"])
    assert box_dir.is_relative_to(tmp_path / "other-machine")
    assert oct((box_dir / "id_ed25519").stat().st_mode & 0o777) == "0o600"
    shown = ok(orch("ssh", leased["box"], "--", "echo", "reached", env=other))
    assert shown.stdout == "reached\n"
    # The pool is full and its one box leased: a second runner waits, then gets one line.
    busy = orch("pool", "lease", "shared", "--store", store, "--wait", "1", env=other)
    assert busy.returncode == 1 and "no box free in pool shared" in busy.stderr
    ok(orch("pool", "release", "shared", leased["box"], "--lease", leased["lease_id"],
            "--store", store, env=other))  # fmt: skip

    ok(orch("pool", "delete", "shared", "--store", store, env=env, timeout=900))
    nothing_tagged(ec2, "shared")
    left = s3.list_objects_v2(Bucket="pools").get("Contents", [])
    assert not [
        o["Key"] for o in left if "/pools/shared/" in o["Key"] and "/state/" not in o["Key"]
    ]


def test_a_forged_entry_naming_an_ordinary_box_never_destroys_it(orch, ec2, aws_env, tmp_path):
    """Whoever can write the pool's store can name any box in it. An ordinary box whose local
    record was even edited to claim the pool is still not the pool's: its instance in the
    cloud does not carry the pool's tags. reconcile, release --dirty and delete drop the entry
    and leave the box running."""
    env = aws_env
    plan = plan_file(tmp_path, candidate("g5.xlarge"))
    name = "forge-0a0a0a"
    up = ok(orch("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--ttl", "1h",
                 "--no-check", "--json", env=env, timeout=900))  # fmt: skip
    instance_id = json.loads(up.stdout)["instance_id"]
    tfvars = Path(env["ORCH_HOME"]) / "boxes" / name / "terraform.tfvars.json"
    values = json.loads(tfvars.read_text())
    values["tags"].update({"orch:pool": "forge", "orch:pool-store": "local"})  # the edit
    tfvars.write_text(json.dumps(values))
    create(orch, env, tmp_path, "forge", "--min", "0", "--max", "2", "--lease-ttl", "30m")
    (record,) = Path(env["ORCH_HOME"]).glob("**/forge/pool.json")

    def forge(state: str) -> None:
        data = json.loads(record.read_text())
        entry = {"state": state, "since": "2026-12-04T10:00:00Z", "by": None, "lease": None,
                 "box": {"expires_at": "2099-01-01T00:00:00Z"}}  # fmt: skip
        if state == "leased":
            entry["lease"] = {"id": "0123456789abcdef", "holder": "h:1:x",
                              "expires_at": "2099-01-01T00:00:00Z"}  # fmt: skip
        data["boxes"][name] = entry
        record.write_text(json.dumps(data))

    def running() -> bool:
        found = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]
        return found["Instances"][0]["State"]["Name"] == "running"

    forge("ready")
    result = json.loads(ok(orch("pool", "reconcile", "forge", "--json", env=env)).stdout)
    (dropped,) = result["actions"]["dropped"]
    assert dropped.startswith(name) and f"instance {instance_id} in AWS is not tagged" in dropped
    assert running() and states(orch, env, "forge") == {}

    forge("leased")
    released = ok(orch("pool", "release", "forge", name, "--dirty", "--force", "--json", env=env))
    assert json.loads(released.stdout)["outcome"] == "dropped: not a box of this pool"
    assert running() and states(orch, env, "forge") == {}

    forge("ready")
    deleted = json.loads(ok(orch("pool", "delete", "forge", "--json", env=env)).stdout)
    assert deleted["destroyed"] == [] and deleted["deleted_by_tag"] == []
    assert [d.split(" ")[0] for d in deleted["dropped"]] == [name] and running()
    ok(orch("down", name, env=env, timeout=900))
