"""tests.support.require / require_module: skip locally, fail under CI=true.

Each case runs pytest in a subprocess on small generated test files, so that a module-level
skip (or failure) is observed the way a developer's or CI's session sees it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

MISSING_AT_MODULE_LEVEL = """
from tests.support import require_module

require_module("orch_no_such_module_for_this_test")


def test_never_runs():
    raise AssertionError("the module should have been skipped or failed")
"""

MISSING_IN_A_TEST = """
from tests.support import require


def test_needs_something():
    require(False, "a tool this machine lacks")
"""

HEALTHY = """
def test_still_runs():
    assert 1 + 1 == 2
"""


def run_pytest(
    tmp_path: Path, ci: str | None, files: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # rootdir here, not the repo's config
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(REPO)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


ALL = {
    "test_a_missing_module.py": MISSING_AT_MODULE_LEVEL,
    "test_b_missing_tool.py": MISSING_IN_A_TEST,
    "test_c_healthy.py": HEALTHY,
}


def test_locally_a_missing_module_skips_only_its_module(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, None, ALL)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "1 passed, 2 skipped" in output, output
    assert "orch_no_such_module_for_this_test" in output
    assert "error" not in output.lower()


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_missing_module_fails_the_session(tmp_path: Path, ci: str) -> None:
    result = run_pytest(tmp_path, ci, {"test_a_missing_module.py": MISSING_AT_MODULE_LEVEL})
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "skipped" not in output, output
    assert "orch_no_such_module_for_this_test" in output
    assert "CI=true: end-to-end prerequisites are mandatory" in output
    assert "1 error" in output, output  # a collection error: nothing passes silently


def test_under_ci_a_missing_prerequisite_in_a_test_fails_it(tmp_path: Path) -> None:
    files = {"test_b_missing_tool.py": MISSING_IN_A_TEST, "test_c_healthy.py": HEALTHY}
    result = run_pytest(tmp_path, "true", files)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "1 failed, 1 passed" in output, output
    assert "CI=true: end-to-end prerequisites are mandatory" in output


def test_no_test_skips_except_through_require() -> None:
    """`require`/`require_module` are the suite's only way to skip: they fail under CI=true.
    A direct pytest.skip, skipif or importorskip would let CI pass without the test."""
    direct = ("pytest.skip(", "importorskip(", "mark.skip", "skipif(")
    found = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "tests").rglob("*.py"))
        if path != REPO / "tests" / "support.py" and path != Path(__file__)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if any(word in line for word in direct)
    ]
    assert found == [], f"skips that bypass tests.support.require: {found}"
