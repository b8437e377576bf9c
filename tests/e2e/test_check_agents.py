"""`orch check --via cloud-assistant` (Aliyun emulator) and `--via ssm` (moto): no SSH at all.

Neither emulator runs commands. The Aliyun emulator answers a registered pattern with the
output we give it (here: the captured T4 inventory), so the test covers RunCommand,
DescribeInvocationResults, base64 decoding and the check logic. moto's SSM records the command
and reports an empty success, so that test covers the SSM plumbing only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.check import nvidia_smi
from tests.e2e.test_check_ssh import make_candidate
from tests.support import require

pytestmark = pytest.mark.e2e
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia-smi"
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKn0Jrp2lK/puazuJtOAswdqZ9EaaIaScLQ/19IU1Juf t"


def orch(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def csv_of(fixture: str) -> str:
    """The capture as `--format=csv,noheader,nounits` prints it."""
    lines = [x for x in (FIXTURES / f"{fixture}.csv").read_text().splitlines() if x[:1] != "#"]
    header, *rows = (line.split(",") for line in lines)
    picked = [[dict(zip(header, row, strict=True))[f] for f in nvidia_smi.INVENTORY_FIELDS]
              for row in rows]  # fmt: skip
    return "".join(", ".join(row) + "\n" for row in picked)


def save_box(home: Path, name: str, cloud: str, region: str, instance_id: str, gpu: str):
    from orchestrator.provision.boxes import Box, box_directory

    candidate = make_candidate(gpu, 1, 16)
    box = Box(name, box_directory(name), cloud, region, candidate, "up", "2026-01-01T00:00:00Z",
              None, {"instance_id": instance_id}, "test", None)  # fmt: skip
    box.save()
    return box


def test_check_via_cloud_assistant(tmp_path, monkeypatch):
    try:
        from tests.sim.aliyun.data import SYSTEM_IMAGES, zones_of
        from tests.sim.aliyun.server import RunningEmulator
    except ImportError as exc:
        require(False, f"the Aliyun emulator (tests/sim/aliyun): {exc}")
        raise
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    with RunningEmulator() as emulator:
        backend = emulator.backend
        backend.settings.launch_delay_s = 0
        backend.settings.command_delay_s = 0.2
        region = "cn-hangzhou"
        vpc = backend.create_vpc(region, "10.0.0.0/16", "v", "", {})
        vswitch = backend.create_vswitch(region, vpc.id, zones_of(region)[0], "10.0.1.0/24",
                                         "s", "", {})  # fmt: skip
        group = backend.create_security_group(region, vpc.id, "g", "", "normal", {})
        image = next(i.image_id for i in SYSTEM_IMAGES if "ubuntu_22_04" in i.image_id)
        (instance_id,) = backend.run_instances(
            region=region, instance_type="ecs.gn6i-c4g1.xlarge", image_id=image,
            vswitch_id=vswitch.id, security_group_ids=[group.id],
        )  # fmt: skip
        # The box answers our probe with the captured T4 inventory.
        backend.add_command_output(r"nvidia-smi --query-gpu=index,name,", csv_of("t4"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("ALIBABA_")}
        env.update(
            ALIBABA_CLOUD_ENDPOINT_ECS=emulator.endpoint,
            ALIBABA_CLOUD_ACCESS_KEY_ID="test",
            ALIBABA_CLOUD_ACCESS_KEY_SECRET="test",
        )
        save_box(tmp_path / "home", "ali", "aliyun", region, instance_id, "T4")
        result = orch(env, "check", "ali", "--via", "cloud-assistant", "--json", "--timeout", "60")
        assert result.returncode == 0, result.stderr + result.stdout
        report = json.loads(result.stdout)
        assert report["transport"] == f"cloud-assistant {instance_id}"
        assert report["gpus"][0]["uuid"] == "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"

        # Same box, plan says A10: a mismatch through the agent too.
        save_box(tmp_path / "home", "ali2", "aliyun", region, instance_id, "A10")
        mismatch = orch(env, "check", "ali2", "--via", "cloud-assistant", "--timeout", "60")
        assert mismatch.returncode == 3
        assert "[FAIL] gpu_model" in mismatch.stdout


def test_check_via_ssm_sends_the_probe(moto_server, tmp_path, monkeypatch):
    import boto3

    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL=moto_server, AWS_ACCESS_KEY_ID="testing",
               AWS_SECRET_ACCESS_KEY="testing")  # fmt: skip
    region = "ap-southeast-2"
    ec2 = boto3.client("ec2", region_name=region, endpoint_url=moto_server,
                       aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    (instance,) = ec2.run_instances(ImageId="ami-1e749f67", MinCount=1, MaxCount=1)["Instances"]
    save_box(tmp_path / "home", "viassm", "aws", region, instance["InstanceId"], "T4")
    result = orch(env, "check", "viassm", "--via", "ssm", "--json", "--timeout", "30")
    # moto runs nothing and answers an empty success: no GPUs, so a mismatch (exit 3).
    assert result.returncode == 3, result.stderr
    report = json.loads(result.stdout)
    assert report["transport"] == f"ssm {instance['InstanceId']}"
    assert "reported no GPUs" in report["checks"][1]["message"]
    ssm = boto3.client("ssm", region_name=region, endpoint_url=moto_server,
                       aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    (command,) = ssm.list_commands(InstanceId=instance["InstanceId"])["Commands"]
    assert command["DocumentName"] == "AWS-RunShellScript"
    assert "nvidia-smi --query-gpu=index,name," in command["Parameters"]["commands"][0]
