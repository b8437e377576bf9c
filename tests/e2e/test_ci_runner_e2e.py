"""`orch up --ci-runner github` end to end: real Terraform core + hashicorp/aws against moto,
JIT registration at the loopback GitHub stand-in (tests/sim/github_api.py, which accepts only
JIT registration), and the JIT config handed to the box over real SSH (one sshd on loopback
where the box gets in with its own key and has its own HOME: tests/e2e/sshbox.py).

The user data moto recorded must carry the runner section and no credential at all (the job
on the box could read user data back from the metadata service); the config must arrive in
the login user's home, mode 0600; and `orch down` must delete the runner, which never took a
job.
"""

from __future__ import annotations

import base64
import getpass
import json
from functools import partial
from pathlib import Path

import pytest

from tests import support
from tests.e2e import sshbox
from tests.sim.github_api import GitHubApi, Token
from tests.support import ok, plan_file, require

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
    ssh_user=getpass.getuser(),  # the loopback sshd's user
)


def test_up_hands_the_jit_config_over_ssh_and_down_removes_the_unused_runner(
    orch, aws_env, ec2, moto_ami, tmp_path
) -> None:
    require(sshbox.prerequisites() is None, sshbox.prerequisites() or "")
    server = sshbox.make_sshbox(tmp_path / "sshd")
    routes = sshbox.route_to(server, tmp_path / "routes")
    plan = plan_file(tmp_path, candidate("g4dn.xlarge", image={"id": moto_ami}))
    home = Path(aws_env["ORCH_HOME"])
    try:
        with (
            GitHubApi(tokens={TOKEN: Token({REPO})}) as api,
            sshbox.KeyRouter(server, home, tmp_path / "homes") as router,
        ):
            env = {**aws_env, "GH_TOKEN": TOKEN, "ORCH_SSH_CONFIG": str(routes)}
            args = ["--ci-runner", "github", "--ci-repo", REPO, "--ci-url", api.url]
            mirror = "http://127.0.0.1:9/actions-runner.tar.gz"
            up = ok(
                orch(
                    "up", "--plan", plan, "--name", "ci-e2e", "--ssh-cidr", "203.0.113.7/32",
                    "--ttl", "1h", "--no-check", "--json", *args, "--runner-url", mirror,
                    env=env, timeout=900,
                )
            )  # fmt: skip
            box = json.loads(up.stdout)
            ((runner_id, config),) = api.jit_configs.items()
            assert box["ci_runner"] == {
                "kind": "github",
                "label": "orch-ci-e2e",
                "repo": REPO,
                "runner_id": runner_id,
            }
            attribute = ec2.describe_instance_attribute(
                InstanceId=box["instance_id"], Attribute="userData"
            )
            user_data = base64.b64decode(attribute["UserData"]["Value"]).decode()
            assert "trap orch_ci_runner EXIT" in user_data and mirror in user_data
            assert config not in user_data and TOKEN not in user_data
            assert "ACTIONS_RUNNER_INPUT_JITCONFIG" in user_data
            handed = router.home_of("ci-e2e") / ".orch-ci-runner.jit"
            assert handed.read_text() == config and handed.stat().st_mode & 0o077 == 0
            for path in home.rglob("*"):  # nothing on this machine keeps it
                if path.is_file():
                    assert config not in path.read_text(errors="replace"), path

            ok(orch("down", "ci-e2e", env=env, timeout=900))
            assert api.runners[REPO] == []
            assert [r.method for r in api.requests] == ["POST", "DELETE"]
            assert api.violations == []
    finally:
        server.stop()
