"""`orch up` on AWS boots the newest PyTorch Deep Learning AMI published at that moment.

Real parts: orch as a subprocess, Terraform core with the real hashicorp/aws provider, moto
over HTTP. moto refuses to create parameters under /aws/ and ships no DLAMI ones, so the
session's proxy (tests/e2e/conftest.py, `CapacityProxy.ssm_parameters`) serves them in SSM's
own JSON shapes; everything else goes to moto.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from orchestrator.clouds.aws.images import DLAMI_PYTORCH_SSM
from tests import support
from tests.support import ok, plan_file

pytestmark = pytest.mark.e2e

CIDR = "203.0.113.7/32"
ROOT = "/aws/service/deeplearning/ami/x86_64/"
candidate = partial(support.candidate, cloud="aws", region="us-east-1", price_per_hour=0.5)


def pytorch(version: str, ubuntu: str) -> str:
    return f"{ROOT}oss-nvidia-driver-gpu-pytorch-{version}-ubuntu-{ubuntu}/latest/ami-id"


@pytest.fixture
def dlamis(capacity_proxy, ec2):  # noqa: ANN001, ANN201 - the proxy, holding DLAMI parameters
    images = sorted(i["ImageId"] for i in ec2.describe_images(Owners=["amazon"])["Images"])[:6]
    capacity_proxy.ssm_parameters = {
        DLAMI_PYTORCH_SSM: images[0],  # the catalog's: PyTorch 2.11 on Ubuntu 24.04
        pytorch("2.10", "22.04"): images[1],
        pytorch("2.9", "24.04"): images[2],
        pytorch("2.12", "22.04"): images[3],
        pytorch("2.12", "24.04"): images[4],  # the newest: highest PyTorch, then Ubuntu
        f"{ROOT}base-oss-nvidia-driver-ubuntu-24.04/latest/ami-id": images[5],  # not PyTorch
        **{f"{ROOT}filler-{n:02d}/latest/ami-id": images[5] for n in range(12)},  # 2 pages+
    }
    yield capacity_proxy.ssm_parameters
    capacity_proxy.ssm_parameters = {}


def test_up_boots_the_newest_pytorch_dlami_and_records_it(
    orch, ec2, aws_env, capacity_proxy, dlamis, tmp_path
):
    name = "e2e-dlami"
    plan = plan_file(tmp_path, candidate("g5.xlarge", image={"ssm_parameter": DLAMI_PYTORCH_SSM}))
    env = {**aws_env, "AWS_ENDPOINT_URL": capacity_proxy.url}
    up = orch("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--no-check", env=env)
    ok(up)
    newest = pytorch("2.12", "24.04")
    assert f"image: {newest} ({dlamis[newest]})" in up.stderr
    (instance,) = [
        i
        for r in ec2.describe_instances(Filters=[{"Name": "tag:orch:box", "Values": [name]}])[
            "Reservations"
        ]
        for i in r["Instances"]
        if i["State"]["Name"] != "terminated"
    ]
    assert instance["ImageId"] == dlamis[newest] != dlamis[DLAMI_PYTORCH_SSM]
    # The box record says which image was used: the parameter and the AMI it held.
    status = json.loads(ok(orch("status", name, "--json", env=env)).stdout)
    record = json.loads((Path(status["box_dir"]) / "box.json").read_text())
    assert record["candidate"]["image"] == {"ssm_parameter": newest}
    assert record["outputs"]["ami_id"] == dlamis[newest]
    ok(orch("down", name, env=env))


def test_without_a_listed_dlami_the_plan_s_parameter_stays_with_a_warning(
    orch, aws_env, capacity_proxy, tmp_path
):
    """moto lists no DLAMI: `up` says so and hands the plan's parameter to Terraform, which
    names it when it cannot read it (one line, exit 1)."""
    name = "e2e-nodlami"
    plan = plan_file(tmp_path, candidate("g5.xlarge", image={"ssm_parameter": DLAMI_PYTORCH_SSM}))
    result = orch("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--no-check")
    assert result.returncode == 1
    assert f"no PyTorch DLAMI is listed in us-east-1; using the plan's {DLAMI_PYTORCH_SSM}" in (
        result.stderr
    )
    assert result.stderr.strip().splitlines()[-1].startswith("orch: error: ")
    assert DLAMI_PYTORCH_SSM in result.stderr.strip().splitlines()[-1]
    ok(orch("down", name))
