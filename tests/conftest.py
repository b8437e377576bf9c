"""Keep every test away from the user's own orch state, caches and price overlays."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def isolated_user_dirs(tmp_path_factory: pytest.TempPathFactory):
    """Point XDG state/data/cache homes and ORCH_HOME at a temporary tree for the session.

    Subprocesses (the `orch` CLI, Terraform) inherit the environment, so a developer's real
    boxes, price overlay (~/.local/share/orch) and catalog cache never change test results.
    """
    root = tmp_path_factory.mktemp("user-dirs")
    # `orch plan` fits its table to $COLUMNS; something in the test process exports one into
    # the C environment (children saw COLUMNS=80 while os.environ had none). Tests that want a
    # width set it themselves.
    os.environ.pop("COLUMNS", None)
    os.unsetenv("COLUMNS")
    saved = {k: os.environ.get(k) for k in _KEYS}
    for key, sub in _KEYS.items():
        os.environ[key] = str(root / sub)
    yield root
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


_KEYS = {
    "XDG_STATE_HOME": "state",
    "XDG_DATA_HOME": "data",
    "XDG_CACHE_HOME": "cache",
    "ORCH_HOME": "state/orch",
}
