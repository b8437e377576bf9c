"""SIGKILL of `orch up` mid-apply (CI timeout, OOM killer), against moto with the real provider.

Terraform dies with orch (PR_SET_PDEATHSIG: SIGINT, Terraform's graceful stop), so no orphan
keeps the state lock; `status`/`list` tell the live apply from the abandoned one, and `down`
removes what was created.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.provision.liveness import activity, process_start
from tests.e2e.test_aws_lifecycle import (
    CIDR,
    assert_nothing_left,
    candidate,
    security_groups_of,
)
from tests.e2e.test_run import wait_until
from tests.support import ok, plan_file

pytestmark = pytest.mark.e2e


def test_sigkill_of_up_leaves_no_orphan_and_status_says_so(
    orch, orch_process, ec2, aws_env, tmp_path
):
    name = "e2e-killed"
    plan = plan_file(tmp_path, candidate("g4dn.xlarge"))
    process = orch_process("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--no-check")
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if "aws_instance.this[0]: creating" in line:
            break
    else:
        pytest.fail("".join(seen))
    record = Path(aws_env["ORCH_HOME"]) / "boxes" / name / "box.json"
    runner = json.loads(record.read_text())["runner"]
    assert runner["pid"] == process.pid and runner["command"] == "up"
    assert runner["terraform"] == "apply"
    terraform_pid = runner["terraform_pid"]
    assert process_start(terraform_pid) is not None

    # While it runs (read in-process: a CLI call here would let the instance start first).
    state = json.loads(record.read_text())
    live = activity(name, state["state"], state["runner"])
    assert live == f"creating: terraform apply running, pid {terraform_pid}"

    # Kill once RunInstances has answered (the instance exists), while the provider still
    # waits for "running" (~10 s on moto): the apply is mid-way, with something to clean up.
    wait_until(lambda: instances_of(ec2, name), "RunInstances to answer", timeout=120)
    process.kill()  # SIGKILL: orch gets no chance to stop Terraform itself
    process.wait(timeout=30)
    process.stderr.close()
    deadline = time.monotonic() + 180
    while process_start(terraform_pid) is not None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert process_start(terraform_pid) is None, "terraform kept running after orch died"

    gone = ok(orch("status", name))
    assert f"creating, but the orch that ran it is gone: run `orch down {name}`" in gone.stdout
    assert "creating (orch gone)" in ok(orch("list")).stdout
    detail = json.loads(ok(orch("status", name, "--json")).stdout)
    assert detail["state"] == "creating" and "is gone" in detail["activity"]

    # Terraform stopped (gracefully: state written, lock released) instead of applying on as
    # an orphan: the apply never finished (no outputs in the state), and `down` does not wait
    # on a lock and removes what the killed apply created.
    tfstate = json.loads((record.parent / "terraform.tfstate").read_text())
    assert "instance_id" not in tfstate.get("outputs", {}), "the orphaned apply ran to the end"
    assert len(security_groups_of(ec2, name)) == 1
    started = time.monotonic()
    result = ok(orch("down", name))
    assert "waiting for Terraform's state lock" not in result.stderr
    assert time.monotonic() - started < 110  # below Terraform's 120 s lock timeout
    assert_nothing_left(ec2, name)


def instances_of(ec2: Any, name: str) -> list[dict[str, Any]]:
    pages = ec2.describe_instances(Filters=[{"Name": "tag:orch:box", "Values": [name]}])
    return [i for r in pages["Reservations"] for i in r["Instances"]]
