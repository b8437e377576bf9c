"""Run examples/github-actions.yml's `run:` steps, as GitHub would, against local stand-ins.

The workflow file is parsed (PyYAML) and each job's steps run in order with bash, the way
the Actions runner does: `${{ }}` expressions substituted, `if:` conditions evaluated
(`always()`, `github.event_name == ...`), step outputs read back from $GITHUB_OUTPUT. What the
runner's network would give the job, the test gives it instead:

  - AWS: moto_server (AWS_ENDPOINT_URL), with the Terraform provider from the local mirror;
  - the box: a real sshd on loopback whose nvidia-smi prints the captured output of the GPU
    the plan chose. moto's instance address is mapped to it by an ssh_config, handed to
    `orch check` through ORCH_SSH_CONFIG and to plain `ssh` by a wrapper that adds `-F`;
  - `uses:` actions (checkout, setup-python, AWS credentials) are what the harness already
    provides; `pip install orch` is a no-op (orch is installed in the test venv).

One fix-up stands between steps, for the emulators' sake: after `plan`, the plan's image
becomes one moto serves and its login user the sshd's user. Every address moto hands out is
routed to the sshd by ORCH_SSH_CONFIG (which also offers the sshd's own test key), and the
sshd's logins get a HOME of their own: the box's disk, where `orch run` syncs and runs.
"""

from __future__ import annotations

import getpass
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.ci_runner import Runner
from tests.e2e import sshbox
from tests.support import require, require_module

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "examples" / "github-actions.yml"
MOTO_AMI = "ami-1e749f67"
STATE_BUCKET = "orch-ci-example-state"
SSH_CIDR = "203.0.113.7/32"
# Catalog GPU -> the captured nvidia-smi output the stand-in box answers with.
FIXTURE_FOR_GPU = {
    "T4": "t4",
    "V100-16GB": "v100",
    "A10G": "a10g",
    "L4": "l4",
    "A100-40GB": "a100-40gb",
    "A100-80GB": "a100-80gb-mig",
    "H100-80GB": "h100",
}
TRAIN_PY = (
    "import math, pathlib\n"
    "print('trained:', math.comb(10, 3))\n"
    "pathlib.Path('outputs').mkdir(exist_ok=True)\n"
    "pathlib.Path('outputs/model.txt').write_text('weights')\n"
)


# ------------------------------------------------------------------------------- the test


def write_shims(folder: Path, ssh_config: Path) -> Path:
    folder.mkdir()
    (folder / "pip").write_text('#!/bin/sh\necho "pip $*" >>"$(dirname "$0")/pip.log"\n')
    real_ssh = shutil.which("ssh")
    (folder / "ssh").write_text(f'#!/bin/sh\nexec {real_ssh} -F {ssh_config} "$@"\n')
    for shim in ("pip", "ssh"):
        (folder / shim).chmod(0o755)
    return folder


def push_context() -> dict[str, Any]:
    """The `github`, `vars` and `secrets` contexts of a push to main."""
    return {
        "github": {
            "event_name": "push",
            "run_id": "8123456789",
            "run_attempt": "1",
            "repository": "example/trainer",
            "ref": "refs/heads/main",
        },
        "vars": {"ORCH_STATE_BUCKET": STATE_BUCKET, "ORCH_SSH_CIDR": SSH_CIDR},
        "secrets": {"AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/ci"},
    }


def assert_nothing_left(ec2: Any, s3: Any, box_name: str) -> None:
    """`orch run` took everything with it: the instance, and the state in the bucket."""
    live = ec2.describe_instances(
        Filters=[
            {"Name": "tag:orch:box", "Values": [box_name]},
            {"Name": "instance-state-name", "Values": ["pending", "running", "stopped"]},
        ]
    )["Reservations"]
    assert live == []
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=STATE_BUCKET).get("Contents", [])]
    assert not any(box_name in key for key in keys)


def leak_an_expired_instance(ec2: Any, box_name: str) -> str:
    """An instance a cancelled run left behind, tagged as orch's and long expired."""
    tags = [{"Key": "orch:box", "Value": box_name},
            {"Key": "orch:expires-at", "Value": "2021-01-01T00:00:00Z"}]  # fmt: skip
    return ec2.run_instances(
        ImageId=MOTO_AMI, InstanceType="g4dn.xlarge", MinCount=1, MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )["Instances"][0]["InstanceId"]  # fmt: skip


def test_github_actions_example_runs_end_to_end(aws_env, s3, ec2, tmp_path):
    yaml = require_module("yaml", "PyYAML, which parses the workflow")
    require(sshbox.prerequisites() is None, sshbox.prerequisites() or "")
    require(shutil.which("jq"), "jq (the workflow reads orch's JSON with it)")
    workflow = yaml.safe_load(WORKFLOW.read_text())
    server = sshbox.make_sshbox(tmp_path / "box")
    sshbox.set_box_environment(server, tmp_path / "box-home")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "train.py").write_text(TRAIN_PY)
    s3.create_bucket(Bucket=STATE_BUCKET)
    routes = sshbox.route_every_host(server, tmp_path / "ssh_config")
    shims = write_shims(tmp_path / "shims", routes)
    base_env = {
        **aws_env,
        "PATH": f"{shims}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "ORCH_SSH_CONFIG": str(routes),
    }

    def after_plan(runner: Runner) -> None:
        plan_path = workspace / "plan.json"
        plan = json.loads(plan_path.read_text())
        for candidate in [plan["choice"], *plan["alternatives"]]:
            candidate.update(image={"id": MOTO_AMI}, ssh_user=getpass.getuser())
        plan_path.write_text(json.dumps(plan))
        server.serve(FIXTURE_FOR_GPU[plan["choice"]["gpu"]])

    runner = Runner(workflow, workspace, base_env, push_context(), {"plan": after_plan})
    try:
        train = {run.name: run for run in runner.run_job("train")}
        assert runner.run_job("sweep") == []  # not a scheduled event
    finally:
        server.stop()

    for run in train.values():
        assert run.ran, f"step {run.name!r} was skipped"
        assert run.returncode == 0, f"{run.name}: exit {run.returncode}\n{run.stderr[-3000:]}"
    box_name = runner.context["env"]["BOX"]
    assert box_name == "ci-8123456789-1"
    report = json.loads((workspace / "run.json").read_text())
    assert report["exit_code"] == 0 and report["box"] == box_name and report["box_destroyed"]
    assert "trained: 120" in train["Train"].stderr  # train.py ran on the box (--json: stderr)
    assert (workspace / "outputs" / "model.txt").read_text() == "weights"  # fetched back
    assert "nothing to destroy" in train["Destroy the box"].stdout
    assert "pip install orch" in (shims / "pip.log").read_text()

    assert_nothing_left(ec2, s3, box_name)

    # The scheduled run: only the sweep job, which destroys an expired leftover.
    leaked = leak_an_expired_instance(ec2, "ci-leaked-by-a-cancelled-run")
    runner.context["github"]["event_name"] = "schedule"
    assert runner.run_job("train") == []
    sweep = {run.name: run for run in runner.run_job("sweep")}
    result = sweep["Sweep expired boxes"]
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    destroyed = {b["box"] for b in report["boxes"] if b["action"] == "destroyed"}
    assert "ci-leaked-by-a-cancelled-run" in destroyed
    state = ec2.describe_instances(InstanceIds=[leaked])["Reservations"][0]["Instances"][0]
    assert state["State"]["Name"] == "terminated"
