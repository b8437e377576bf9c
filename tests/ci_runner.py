"""A small stand-in for the GitHub Actions runner: `${{ }}` expressions, `if:` conditions and
step outputs, enough to run examples/github-actions.yml's `run:` steps with bash.

Used by tests/e2e/test_ci_example.py (the workflow end to end) and tests/unit/test_ci_examples.py
(the expression subset and the examples' teardown rules).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ------------------------------------------------------------------------ expressions

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+)|(?P<op>==|!=|&&|\|\||!|\(|\))"
    r"|(?P<call>[A-Za-z_]\w*)\(\)|(?P<name>[A-Za-z_][\w.-]*))"
)


def evaluate(expression: str, context: dict[str, Any], status: dict[str, bool]) -> Any:
    """The subset of the Actions expression language the example uses."""
    parts = []
    position = 0
    expression = expression.strip()
    while position < len(expression):
        match = _TOKEN.match(expression, position)
        if not match or match.end() == position:
            raise ValueError(f"cannot parse expression {expression!r} at {position}")
        position = match.end()
        if match["str"] is not None:
            parts.append(repr(match["str"][1:-1].replace("''", "'")))
        elif match["num"] is not None:
            parts.append(match["num"])
        elif match["op"] is not None:
            parts.append({"&&": " and ", "||": " or ", "!": " not "}.get(match["op"], match["op"]))
        elif match["call"] is not None:
            parts.append(repr(status[match["call"]]))
        else:
            value: Any = context
            for key in match["name"].split("."):
                value = value.get(key, "") if isinstance(value, dict) else ""
            parts.append(repr(value))
    return eval("".join(parts), {"__builtins__": {}}, {})  # noqa: S307 - built from tokens


def substitute(text: str, context: dict[str, Any], status: dict[str, bool]) -> str:
    return re.sub(
        r"\$\{\{(.*?)\}\}", lambda m: str(evaluate(m.group(1), context, status)), str(text)
    )


# ---------------------------------------------------------------------------- the runner


@dataclass
class StepRun:
    name: str
    ran: bool
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""


@dataclass
class Runner:
    workflow: dict[str, Any]
    workspace: Path
    base_env: dict[str, str]
    context: dict[str, Any]
    after_step: dict[str, Callable[[Runner], None]] = field(default_factory=dict)
    runs: list[StepRun] = field(default_factory=list)

    def run_job(self, name: str) -> list[StepRun]:
        job = self.workflow["jobs"][name]
        status = {"always": True, "success": True, "failure": False, "cancelled": False}
        if not evaluate(job.get("if", "true"), self.context, status):
            return []
        self.context["steps"] = {}
        env: dict[str, str] = {}
        self.context["env"] = env  # later entries may refer to earlier ones
        for scope in (self.workflow.get("env", {}), job.get("env", {})):
            for key, value in scope.items():
                env[key] = substitute(value, self.context, status)
        runs = []
        for index, step in enumerate(job["steps"]):
            label = step.get("name") or step.get("uses") or f"step {index}"
            condition = step.get("if", "success()")
            if not evaluate(condition, self.context, status):
                runs.append(StepRun(label, ran=False))
                continue
            if "uses" in step:
                runs.append(StepRun(label, ran=True, returncode=0))
                continue
            run = self._run_step(step, label, env, status)
            runs.append(run)
            if run.returncode != 0:
                status.update(success=False, failure=True)
            elif step.get("id") in self.after_step:
                self.after_step[step["id"]](self)
        self.runs += runs
        return runs

    def _run_step(self, step: dict[str, Any], label: str, env: dict[str, str], status) -> StepRun:
        outputs, extra_env = self.workspace / ".github_output", self.workspace / ".github_env"
        outputs.write_text("")
        extra_env.write_text("")
        step_env = {k: substitute(v, self.context, status) for k, v in step.get("env", {}).items()}
        script = substitute(step["run"], self.context, status)
        result = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
            cwd=self.workspace,
            env={
                **self.base_env,
                **env,
                **step_env,
                "GITHUB_OUTPUT": str(outputs),
                "GITHUB_ENV": str(extra_env),
            },
            capture_output=True,
            text=True,
            timeout=900,
            stdin=subprocess.DEVNULL,
        )
        if step.get("id"):
            self.context["steps"][step["id"]] = {
                "outputs": dict(_key_values(outputs.read_text())),
                "outcome": "success" if result.returncode == 0 else "failure",
            }
        env.update(_key_values(extra_env.read_text()))
        return StepRun(label, True, result.returncode, result.stdout, result.stderr)


def _key_values(text: str) -> list[tuple[str, str]]:
    """`key=value` lines and `key<<DELIM ... DELIM` blocks, as $GITHUB_OUTPUT holds them."""
    pairs, lines = [], iter(text.splitlines())
    for line in lines:
        if "<<" in line and "=" not in line.split("<<", 1)[0]:
            key, delimiter = line.split("<<", 1)
            block = []
            for inner in lines:
                if inner == delimiter:
                    break
                block.append(inner)
            pairs.append((key, "\n".join(block)))
        elif "=" in line:
            key, value = line.split("=", 1)
            pairs.append((key, value))
    return pairs
