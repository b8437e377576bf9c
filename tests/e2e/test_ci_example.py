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

Two fix-ups stand between steps, both for the emulators' sake: after `plan`, the plan's image
becomes one moto serves and its login user the sshd's user; after `up`, the box's key is
authorized on the sshd.
"""

from __future__ import annotations

import getpass
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

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
TRAIN_PY = "import math\nprint('trained:', math.comb(10, 3))\n"


# ------------------------------------------------------------------------ expressions

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+)|(?P<op>==|!=|&&|\|\||!|\(|\))"
    r"|(?P<call>[A-Za-z_]\w*)\(\)|(?P<name>[A-Za-z_][\w.-]*))"
)


def evaluate(expression: str, context: dict[str, Any], status: dict[str, bool]) -> Any:
    """The subset of the Actions expression language the example uses."""
    parts = []
    position = 0
    expression = expression.strip()
    while position < len(expression):
        match = _TOKEN.match(expression, position)
        if not match or match.end() == position:
            raise ValueError(f"cannot parse expression {expression!r} at {position}")
        position = match.end()
        if match["str"] is not None:
            parts.append(repr(match["str"][1:-1].replace("''", "'")))
        elif match["num"] is not None:
            parts.append(match["num"])
        elif match["op"] is not None:
            parts.append({"&&": " and ", "||": " or ", "!": " not "}.get(match["op"], match["op"]))
        elif match["call"] is not None:
            parts.append(repr(status[match["call"]]))
        else:
            value: Any = context
            for key in match["name"].split("."):
                value = value.get(key, "") if isinstance(value, dict) else ""
            parts.append(repr(value))
    return eval("".join(parts), {"__builtins__": {}}, {})  # noqa: S307 - built from tokens


def substitute(text: str, context: dict[str, Any], status: dict[str, bool]) -> str:
    return re.sub(
        r"\$\{\{(.*?)\}\}", lambda m: str(evaluate(m.group(1), context, status)), str(text)
    )


# ---------------------------------------------------------------------------- the runner


@dataclass
class StepRun:
    name: str
    ran: bool
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""


@dataclass
class Runner:
    workflow: dict[str, Any]
    workspace: Path
    base_env: dict[str, str]
    context: dict[str, Any]
    after_step: dict[str, Callable[[Runner], None]] = field(default_factory=dict)
    runs: list[StepRun] = field(default_factory=list)

    def run_job(self, name: str) -> list[StepRun]:
        job = self.workflow["jobs"][name]
        status = {"always": True, "success": True, "failure": False, "cancelled": False}
        if not evaluate(job.get("if", "true"), self.context, status):
            return []
        self.context["steps"] = {}
        env: dict[str, str] = {}
        self.context["env"] = env  # later entries may refer to earlier ones
        for scope in (self.workflow.get("env", {}), job.get("env", {})):
            for key, value in scope.items():
                env[key] = substitute(value, self.context, status)
        runs = []
        for index, step in enumerate(job["steps"]):
            label = step.get("name") or step.get("uses") or f"step {index}"
            condition = step.get("if", "success()")
            if not evaluate(condition, self.context, status):
                runs.append(StepRun(label, ran=False))
                continue
            if "uses" in step:
                runs.append(StepRun(label, ran=True, returncode=0))
                continue
            run = self._run_step(step, label, env, status)
            runs.append(run)
            if run.returncode != 0:
                status.update(success=False, failure=True)
            elif step.get("id") in self.after_step:
                self.after_step[step["id"]](self)
        self.runs += runs
        return runs

    def _run_step(self, step: dict[str, Any], label: str, env: dict[str, str], status) -> StepRun:
        outputs, extra_env = self.workspace / ".github_output", self.workspace / ".github_env"
        outputs.write_text("")
        extra_env.write_text("")
        step_env = {k: substitute(v, self.context, status) for k, v in step.get("env", {}).items()}
        script = substitute(step["run"], self.context, status)
        result = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
            cwd=self.workspace,
            env={
                **self.base_env,
                **env,
                **step_env,
                "GITHUB_OUTPUT": str(outputs),
                "GITHUB_ENV": str(extra_env),
            },
            capture_output=True,
            text=True,
            timeout=900,
            stdin=subprocess.DEVNULL,
        )
        if step.get("id"):
            self.context["steps"][step["id"]] = {
                "outputs": dict(_key_values(outputs.read_text())),
                "outcome": "success" if result.returncode == 0 else "failure",
            }
        env.update(_key_values(extra_env.read_text()))
        return StepRun(label, True, result.returncode, result.stdout, result.stderr)


def _key_values(text: str) -> list[tuple[str, str]]:
    """`key=value` lines and `key<<DELIM ... DELIM` blocks, as $GITHUB_OUTPUT holds them."""
    pairs, lines = [], iter(text.splitlines())
    for line in lines:
        if "<<" in line and "=" not in line.split("<<", 1)[0]:
            key, delimiter = line.split("<<", 1)
            block = []
            for inner in lines:
                if inner == delimiter:
                    break
                block.append(inner)
            pairs.append((key, "\n".join(block)))
        elif "=" in line:
            key, value = line.split("=", 1)
            pairs.append((key, value))
    return pairs


# ------------------------------------------------------------------------------- the test


def write_shims(folder: Path, ssh_config: Path) -> Path:
    folder.mkdir()
    (folder / "pip").write_text('#!/bin/sh\necho "pip $*" >>"$(dirname "$0")/pip.log"\n')
    real_ssh = shutil.which("ssh")
    (folder / "ssh").write_text(f'#!/bin/sh\nexec {real_ssh} -F {ssh_config} "$@"\n')
    for shim in ("pip", "ssh"):
        (folder / shim).chmod(0o755)
    return folder


def test_github_actions_example_runs_end_to_end(aws_env, s3, ec2, tmp_path):
    yaml = require_module("yaml", "PyYAML, which parses the workflow")
    require(sshbox.prerequisites() is None, sshbox.prerequisites() or "")
    require(shutil.which("jq"), "jq (the workflow reads orch's JSON with it)")
    workflow = yaml.safe_load(WORKFLOW.read_text())
    server = sshbox.make_sshbox(tmp_path / "box")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "train.py").write_text(TRAIN_PY)
    s3.create_bucket(Bucket=STATE_BUCKET)
    routes = tmp_path / "ssh_config"
    routes.write_text("")
    shims = write_shims(tmp_path / "shims", routes)
    base_env = {
        **aws_env,
        "PATH": f"{shims}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "ORCH_SSH_CONFIG": str(routes),
    }
    context = {
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

    def after_plan(runner: Runner) -> None:
        plan_path = workspace / "plan.json"
        plan = json.loads(plan_path.read_text())
        for candidate in [plan["choice"], *plan["alternatives"]]:
            candidate.update(image={"id": MOTO_AMI}, ssh_user=getpass.getuser())
        plan_path.write_text(json.dumps(plan))
        server.serve(FIXTURE_FOR_GPU[plan["choice"]["gpu"]])

    state_keys: list[str] = []

    def after_up(runner: Runner) -> None:
        box = json.loads((workspace / "box.json").read_text())
        listing = s3.list_objects_v2(Bucket=STATE_BUCKET).get("Contents", [])
        state_keys.extend(o["Key"] for o in listing)
        public_key = (Path(box["box_dir"]) / "id_ed25519.pub").read_text()
        options = (server.root / "authorized_keys").read_text().split(" ssh-")[0]
        with (server.root / "authorized_keys").open("a") as keys:
            keys.write(f"{options} {public_key}")
        routes.write_text(f"Host {box['public_ip']}\n  HostName 127.0.0.1\n  Port {server.port}\n")

    runner = Runner(workflow, workspace, base_env, context, {"plan": after_plan, "up": after_up})
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
    check = json.loads((workspace / "check.json").read_text())
    assert check["ok"] is True and check["box"] == box_name
    assert "trained: 120" in train["Train"].stdout  # train.py ran on the box, over SSH
    assert FIXTURE_FOR_GPU[check["expected"]["gpu"]]  # the GPU the plan chose answered
    assert "pip install orch" in (shims / "pip.log").read_text()

    # The state lived in the bucket while the box did; `down` took everything with it.
    assert any(key.endswith(f"{box_name}/terraform.tfstate") for key in state_keys)
    live = ec2.describe_instances(
        Filters=[
            {"Name": "tag:orch:box", "Values": [box_name]},
            {"Name": "instance-state-name", "Values": ["pending", "running", "stopped"]},
        ]
    )["Reservations"]
    assert live == []
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=STATE_BUCKET).get("Contents", [])]
    assert not any(box_name in key for key in keys)

    # The scheduled run: only the sweep job, which destroys an expired leftover.
    leaked = ec2.run_instances(
        ImageId=MOTO_AMI,
        InstanceType="g4dn.xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": "orch:box", "Value": "ci-leaked-by-a-cancelled-run"},
                    {"Key": "orch:expires-at", "Value": "2021-01-01T00:00:00Z"},
                ],
            }
        ],
    )["Instances"][0]["InstanceId"]
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


def test_destroy_step_runs_after_a_failure():
    """The example's `down` step carries `if: always()`: it runs when training failed."""
    yaml = require_module("yaml", "PyYAML, which parses the workflow")
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["train"]["steps"]
    (down,) = [s for s in steps if "orch down" in s.get("run", "")]
    failed = {"always": True, "success": False, "failure": True, "cancelled": True}
    assert evaluate(down["if"], {}, failed) is True
    (train,) = [s for s in steps if s.get("name") == "Train"]
    assert evaluate(train.get("if", "success()"), {}, failed) is False


def test_expression_subset():
    context = {"github": {"event_name": "push"}, "steps": {"up": {"outputs": {"a": "x y"}}}}
    status = {"always": True, "success": True, "failure": False, "cancelled": False}
    assert evaluate("github.event_name != 'schedule'", context, status) is True
    assert evaluate("github.event_name == 'schedule' || always()", context, status) is True
    assert evaluate("!success() && failure()", context, status) is False
    assert substitute("ssh ${{ steps.up.outputs.a }}!", context, status) == "ssh x y!"
    assert dict(_key_values("a=1\nb<<EOF\nline 1\nline 2\nEOF\nc=3=4\n")) == {
        "a": "1",
        "b": "line 1\nline 2",
        "c": "3=4",
    }


def test_gitlab_example_tears_down_in_after_script():
    yaml = require_module("yaml", "PyYAML, which parses the pipeline")
    pipeline = yaml.safe_load((REPO / "examples" / "gitlab-ci.yml").read_text())
    train, sweep = pipeline["train"], pipeline["sweep"]
    assert any(line.startswith("orch up ") and "--ttl" in line for line in train["script"])
    assert any(line.startswith("orch check ") for line in train["script"])
    assert any(line.startswith("orch down ") for line in train["after_script"])
    assert not any(line.startswith("orch down ") for line in train["script"])
    assert "schedule" in sweep["rules"][0]["if"]
    assert sweep["script"] == ['orch sweep --cloud aws --region "$AWS_REGION" --json']
