"""The house rules on size (issue 19's "done when"): no function over 80 lines, in the product,
its tests (emulators included) or its benchmarks, and no product module over 600 lines (the
box-side checkpoint agent included: it ships to the box as several modules).

A function's length is counted from its `def` line to its last line, so a click command's
stack of option declarations above the `def` is not counted; a nested function counts inside
its parent and on its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "orchestrator"
CODE = (PACKAGE, ROOT / "tests", ROOT / "benchmarks")
THIRD_PARTY = "site"  # benchmarks/gpu/run_cases.sh unpacks wheels there on a GPU machine
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600


def long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    """(name, lines) of every function in `source` longer than `limit` lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                found.append((node.name, lines))
    return found


def product_modules() -> list[Path]:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 100, "the package was not found where this test looks"
    return modules


def test_the_counter_finds_a_long_function():
    body = "\n".join(f"    x{n} = {n}" for n in range(80))
    assert long_functions(f"def f():\n{body}\n", 80) == [("f", 81)]
    assert long_functions(f"@decorator\ndef f():\n{body[: body.rindex(chr(10))]}\n", 80) == []


def test_no_function_is_over_80_lines():
    modules = sorted(
        path
        for folder in CODE
        for path in folder.rglob("*.py")
        if THIRD_PARTY not in path.relative_to(ROOT).parts
    )
    assert len(modules) > 300, "the code was not found where this test looks"
    over = [
        f"{path.relative_to(ROOT)}:{name} ({lines} lines)"
        for path in modules
        for name, lines in long_functions(path.read_text(), MAX_FUNCTION_LINES)
    ]
    assert over == []


def test_no_product_module_is_over_600_lines():
    over = [
        f"{path.relative_to(PACKAGE.parent)} ({count} lines)"
        for path in product_modules()
        if (count := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert over == []
