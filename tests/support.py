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
