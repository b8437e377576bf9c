"""Helpers shared by the test suites."""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: object, what: str) -> None:
    """Skip a test whose prerequisite is missing, but fail it in CI (CI=true).

    End-to-end tests must never pass silently in CI because moto, the provider mirror or
    sshd went missing.
    """
    if condition:
        return
    message = f"prerequisite missing: {what}"
    if in_ci():
        pytest.fail(message + " (CI=true: end-to-end prerequisites are mandatory)")
    pytest.skip(message)


def require_module(name: str, what: str | None = None):  # noqa: ANN201 - the module
    """Import a test dependency; skip locally without it, fail in CI (like `require`)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        require(False, what or f"Python module {name} (pip install -e '.[test]')")
