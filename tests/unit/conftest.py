"""Fixtures the unit tests share."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def moto_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One moto server for the unit tests that read EC2 (the quota checks' usage)."""
    from tests.e2e.conftest import moto_server_process

    with moto_server_process(tmp_path_factory.mktemp("moto")) as url:
        yield url


@pytest.fixture
def moto(moto_server_url: str) -> str:
    """That server's URL, reset first: no instance of an earlier test."""
    reset = urllib.request.Request(f"{moto_server_url}/moto-api/reset", method="POST")
    urllib.request.urlopen(reset, timeout=10).close()
    return moto_server_url
