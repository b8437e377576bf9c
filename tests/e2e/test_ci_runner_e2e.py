"""`orch up --ci-runner github` end to end: real Terraform core + hashicorp/aws against moto,
registration at the loopback GitHub stand-in (tests/sim/github_api.py).

The user data moto recorded must carry the runner section (with the registration token, never
the caller's token), and `orch down` must delete the runner that config.sh would have
registered but that never took a job.
"""

from __future__ import annotations

import base64
import json
from functools import partial

import pytest

from tests import support
from tests.sim.github_api import GitHubApi, Token
from tests.support import ok, plan_file

pytestmark = pytest.mark.e2e

REPO = "octo-org/gpu-app"
TOKEN = "ghp_e2etoken0123456789"
candidate = partial(
    support.candidate,
    region="us-east-1",
    price_per_hour=0.5,
    samples_per_s=100.0,
    hours=1.0,
    cost=0.5,
    memory_per_gpu_bytes=2**30,
    memory_fraction=0.5,
    root_volume_gib=120,
)


def test_up_registers_before_terraform_and_down_removes_the_unused_runner(
    orch, aws_env, ec2, moto_ami, tmp_path
) -> None:
    plan = plan_file(tmp_path, candidate("g4dn.xlarge", image={"id": moto_ami}))
    with GitHubApi(tokens={TOKEN: Token({REPO})}) as api:
        env = {**aws_env, "GH_TOKEN": TOKEN}
        args = ["--ci-runner", "github", "--ci-repo", REPO, "--ci-url", api.url]
        mirror = "http://127.0.0.1:9/actions-runner.tar.gz"
        up = ok(
            orch(
                "up", "--plan", plan, "--name", "ci-e2e", "--ssh-cidr", "203.0.113.7/32",
                "--ttl", "1h", "--no-check", "--json", *args, "--runner-url", mirror, env=env,
            )
        )  # fmt: skip
        box = json.loads(up.stdout)
        assert box["ci_runner"] == {"kind": "github", "label": "orch-ci-e2e", "repo": REPO}
        attribute = ec2.describe_instance_attribute(
            InstanceId=box["instance_id"], Attribute="userData"
        )
        user_data = base64.b64decode(attribute["UserData"]["Value"]).decode()
        assert "trap orch_ci_runner EXIT" in user_data and mirror in user_data
        assert api.registration_tokens[0] in user_data and TOKEN not in user_data
        assert "--name ci-e2e --labels orch-ci-e2e --ephemeral" in user_data

        api.register_runner(REPO, "ci-e2e", ["orch-ci-e2e"])  # config.sh ran, no job came
        ok(orch("down", "ci-e2e", env=env))
        assert api.runners[REPO] == []
        assert [r.method for r in api.requests] == ["POST", "GET", "DELETE"]
        assert api.violations == []
