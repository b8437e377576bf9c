"""Fixtures the unit tests share."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import reset_moto, with_cloud_credentials


@pytest.fixture(scope="session")
def moto_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One moto server per test worker for the unit tests that reach AWS: EC2 (the quota
    checks' usage, the placement-group stand-in) and S3 (the box-side store, the checkpoint
    agent, the pool record). The suite runs `--dist loadfile`, so one file's tests run
    together; S3 tests keep apart by bucket, EC2 tests reset the server first."""
    from tests.e2e.conftest import moto_server_process

    with moto_server_process(tmp_path_factory.mktemp("moto")) as url:
        yield url


@pytest.fixture
def moto(moto_server_url: str) -> str:
    """That server's URL, reset first: no instance of an earlier test."""
    reset_moto(moto_server_url)
    return moto_server_url


@pytest.fixture
def s3(moto_server_url: str):  # noqa: ANN201 - a boto3 client
    import boto3  # a dependency of orch itself

    return boto3.client(
        "s3",
        endpoint_url=moto_server_url,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    )


@pytest.fixture
def bucket(s3) -> str:  # noqa: ANN001
    """A new, empty bucket of that server's, for one test."""
    name = "test-" + uuid.uuid4().hex[:12]
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A job's folder as `orch` runs in it: the current directory (an orch.yaml goes here),
    ORCH_HOME beneath it, every built-in cloud's credentials set."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    with_cloud_credentials(monkeypatch)
    return tmp_path
