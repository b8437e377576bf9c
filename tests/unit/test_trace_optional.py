"""Without the `trace` extra: the default paths never import torch, and an unknown family's
error names the extra. Each check runs in a fresh interpreter (sys.modules is per process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Simulates an environment without the extra: importing either module fails.
BLOCK = "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def orch(args: list[str], prelude: str = "") -> str:
    return (
        prelude
        + "import sys\nfrom orchestrator.cli import main\n"
        + "try:\n    main("
        + repr(args)
        + ")\nexcept SystemExit as exc:\n    code = exc.code or 0\nelse:\n    code = 0\n"
    )


def test_default_plan_imports_neither_torch_nor_transformers() -> None:
    code = orch(["plan", "--model", "bert-large", "--json"]) + (
        "heavy = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
        "print('HEAVY', heavy, code, file=sys.stderr)\n"
    )
    result = python(code)
    assert "HEAVY [] 0" in result.stderr, result.stderr[-2000:]


def test_unknown_family_without_the_extra_names_it(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "stablelm", "hidden_size": 2048}))
    for command in ("estimate", "plan"):
        result = python(orch([command, "--hf-config", str(path)], BLOCK) + "sys.exit(code)\n")
        assert result.returncode == 2
        assert result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith("orch: error: ")
        assert "unsupported model_type 'stablelm'" in result.stderr
        assert "pip install 'orch[trace]'" in result.stderr


def test_trace_on_request_without_the_extra_names_it() -> None:
    result = python(
        orch(["estimate", "--model", "bert-large", "--trace"], BLOCK) + "sys.exit(code)\n"
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "pip install 'orch[trace]'" in result.stderr
