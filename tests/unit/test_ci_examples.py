"""The CI examples' teardown rules and the workflow-expression subset (no emulator).

These were in tests/e2e/test_ci_example.py, whose end-to-end test runs the workflow against
moto and a loopback sshd.
"""

from __future__ import annotations

from pathlib import Path

from tests.ci_runner import _key_values, evaluate, substitute
from tests.support import require_module

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "examples" / "github-actions.yml"


def test_destroy_step_runs_after_a_failure():
    """The example's `down` step carries `if: always()`: it runs when training failed."""
    yaml = require_module("yaml", "PyYAML, which parses the workflow")
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["train"]["steps"]
    (down,) = [s for s in steps if "orch down" in s.get("run", "")]
    failed = {"always": True, "success": False, "failure": True, "cancelled": True}
    assert evaluate(down["if"], {}, failed) is True
    (train,) = [s for s in steps if s.get("name") == "Train"]
    assert evaluate(train.get("if", "success()"), {}, failed) is False


def test_expression_subset():
    context = {"github": {"event_name": "push"}, "steps": {"up": {"outputs": {"a": "x y"}}}}
    status = {"always": True, "success": True, "failure": False, "cancelled": False}
    assert evaluate("github.event_name != 'schedule'", context, status) is True
    assert evaluate("github.event_name == 'schedule' || always()", context, status) is True
    assert evaluate("!success() && failure()", context, status) is False
    assert substitute("ssh ${{ steps.up.outputs.a }}!", context, status) == "ssh x y!"
    assert dict(_key_values("a=1\nb<<EOF\nline 1\nline 2\nEOF\nc=3=4\n")) == {
        "a": "1",
        "b": "line 1\nline 2",
        "c": "3=4",
    }


def test_gitlab_example_tears_down_in_after_script():
    yaml = require_module("yaml", "PyYAML, which parses the pipeline")
    pipeline = yaml.safe_load((REPO / "examples" / "gitlab-ci.yml").read_text())
    train, sweep = pipeline["train"], pipeline["sweep"]
    (run,) = [line for line in train["script"] if line.startswith("orch run ")]
    assert "--ttl 3h" in run and "--state" in run and " -- python3 train.py" in run
    assert any(line.startswith("orch down ") for line in train["after_script"])
    assert not any(line.startswith("orch down ") for line in train["script"])
    assert "schedule" in sweep["rules"][0]["if"]
    assert sweep["script"] == ['orch sweep --cloud aws --region "$AWS_REGION" --json']


def test_pool_example_runs_through_the_pool_and_reconciles_on_a_schedule():
    yaml = require_module("yaml", "PyYAML, which parses the workflow")
    workflow = yaml.safe_load((REPO / "examples" / "github-actions-pool.yml").read_text())
    train = workflow["jobs"]["train"]["steps"]
    (run,) = [s["run"] for s in train if "orch run" in s.get("run", "")]
    assert "--pool gpu" in run and "--pool-store" in run and " -- python3 train.py" in run
    reconcile = [s.get("run", "") for s in workflow["jobs"]["reconcile"]["steps"]]
    assert any(r.startswith("orch pool reconcile gpu") for r in reconcile)
    assert any(r.startswith("orch sweep ") for r in reconcile)
    assert "schedule" in workflow["jobs"]["reconcile"]["if"]
    assert workflow[True]["schedule"][0]["cron"]  # PyYAML reads the `on:` key as True
