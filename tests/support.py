"""Helpers shared by the test suites."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.plan import Candidate, Plan, write_plan


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: object, what: str) -> None:
    """Skip a test whose prerequisite is missing, but fail it in CI (CI=true).

    End-to-end tests must never pass silently in CI because moto, the provider mirror or
    sshd went missing. Callable in a test, a fixture, or at module level (as `require_module`
    is): locally a module-level call skips that module only, not the whole session.
    """
    if condition:
        return
    message = f"prerequisite missing: {what}"
    if in_ci():
        pytest.fail(message + " (CI=true: end-to-end prerequisites are mandatory)")
    pytest.skip(message, allow_module_level=True)


def require_module(name: str, what: str | None = None):  # noqa: ANN201 - the module
    """Import a test dependency; skip locally without it, fail in CI (like `require`)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        require(False, what or f"Python module {name} (pip install -e '.[test]')")


def plan_file(tmp_path: Path, *candidates: Candidate) -> str:
    """Write a plan.json whose choice and alternatives are `candidates`, in order."""
    plan = Plan(
        job={"model": "bert-large"},
        estimate={},
        choice=candidates[0],
        alternatives=list(candidates[1:]),
        created_at="2026-12-02T19:00:00Z",
    )
    return str(write_plan(plan, tmp_path / "plan.json"))


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """Assert a command succeeded, showing its stderr when it did not."""
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stderr[-3000:]}"
    return result
