"""`orch up --nodes N` and `orch run --nodes N` (issue 24): they size and pick a cluster as
`orch plan --nodes` does, a job file's resources.nodes too; a cluster's launch request reaches
provisioning with the plan's node count (Aliyun's too)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.provision import inputs, launch
from tests.support import Tripwire, candidate, plan_file, run_cli, with_cloud_credentials

CIDR = "203.0.113.7/32"
BIG = ["--model", "llama-2-70b", "--batch", "1", "--seq", "2048", "--zero", "3"]
AWS = ["--grad-checkpointing", "--cloud", "aws", "--instance-type", "p5en.48xlarge"]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    with_cloud_credentials(monkeypatch)
    monkeypatch.setattr(inputs, "discover_caller_cidr", lambda: CIDR)
    return tmp_path


def capture_up(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []

    def fake_up(request: Any, *_args: Any, **_kwargs: Any) -> None:
        seen.append(request)
        raise Tripwire("up")

    monkeypatch.setattr(launch, "up", fake_up)
    return seen


def capture_run(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    from orchestrator.run import session

    seen: list[Any] = []

    def fake_run(request: Any, *_args: Any) -> None:
        seen.append(request)
        raise Tripwire("run")

    monkeypatch.setattr(session, "Run", fake_run)
    return seen


def test_up_nodes_plans_a_cluster_and_launches_it(here, capsys, monkeypatch):
    seen = capture_up(monkeypatch)
    with pytest.raises(Tripwire):
        run_cli(capsys, "up", "--name", "c1", "--no-check", "--yes", *BIG, *AWS, "--nodes", "2")
    (request,) = seen
    assert request.plan.choice.nodes == 2
    assert request.plan.choice.instance_type == "p5en.48xlarge"
    assert {c.nodes for c in request.plan.candidates()} == {2}  # exactly N: no other count


def test_up_nodes_auto_picks_the_count_plan_picks(here, capsys, monkeypatch):
    seen = capture_up(monkeypatch)
    code, out, err = run_cli(capsys, "plan", "--json", *BIG, *AWS, "--nodes", "auto")
    assert code == 0, err
    planned = json.loads(out)["choice"]["nodes"]
    with pytest.raises(Tripwire):
        run_cli(capsys, "up", "--name", "c1", "--no-check", "--yes", *BIG, *AWS, "--nodes", "auto")
    assert seen[0].plan.choice.nodes == planned > 1  # 70B, ZeRO-3: one box is not enough


def test_run_nodes_plans_a_cluster_for_the_run(here, capsys, monkeypatch):
    seen = capture_run(monkeypatch)
    with pytest.raises(Tripwire):
        run_cli(capsys, "run", "--yes", *BIG, *AWS, "--nodes", "2", "--", "python", "train.py")
    (request,) = seen
    assert request.up_options.plan.choice.nodes == 2 and request.box_name == request.spec.run_id


def test_a_job_file_s_nodes_plan_a_cluster_on_up_and_run(here, capsys, monkeypatch):
    (here / "orch.yaml").write_text(
        "model: llama-2-70b\njob:\n  batch: 1\n  seq: 2048\n  zero: 3\n  grad_checkpointing: true\n"
        "resources:\n  nodes: 2\n  cloud: aws\n  instance_type: p5en.48xlarge\n"
        "run:\n  command: python train.py\n"
    )
    ups, runs = capture_up(monkeypatch), capture_run(monkeypatch)
    with pytest.raises(Tripwire):
        run_cli(capsys, "up", "--name", "c1", "--no-check", "--yes")
    with pytest.raises(Tripwire):
        run_cli(capsys, "run", "--yes")
    assert ups[0].plan.choice.nodes == 2 and runs[0].up_options.plan.choice.nodes == 2
    # A flag overrides the file.
    with pytest.raises(Tripwire):
        run_cli(capsys, "up", "--name", "c1", "--no-check", "--yes", "--nodes", "3")
    assert ups[1].plan.choice.nodes == 3


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["up", "--name", "c1", "--nodes", "2", "--plan", "PLAN"], "either --plan or"),
        (["run", "--nodes", "2", "--plan", "PLAN", "--", "true"], "either --plan or"),
    ],
)
def test_nodes_with_a_plan_file_is_a_usage_error(here, capsys, monkeypatch, argv, words):
    capture_up(monkeypatch)
    capture_run(monkeypatch)
    plan = plan_file(here, candidate("g5.xlarge"))
    code, _, err = run_cli(capsys, *[plan if a == "PLAN" else a for a in argv])
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1


def test_nodes_with_an_existing_box_is_a_usage_error(here, capsys, monkeypatch):
    capture_run(monkeypatch)
    code, _, err = run_cli(capsys, "run", "--box", "b1", "--nodes", "2", "--", "true")
    assert code == 2 and "drop --nodes" in err
    code, _, err = run_cli(capsys, "run", "--pool", "p1", "--nodes", "2", "--", "true")
    assert code == 2 and "drop --nodes" in err


@pytest.mark.parametrize("value", ["0", "65", "two", "1.5"])
def test_bad_nodes_on_up_and_run_are_one_line(here, capsys, monkeypatch, value):
    capture_up(monkeypatch)
    capture_run(monkeypatch)
    for command, tail in ((["up", "--name", "c1"], []), (["run"], ["--", "true"])):
        argv = [*command, "--model", "gpt2", "--nodes", value, "--yes", *tail]
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and err.startswith("orch: error: --nodes"), err
        assert len(err.strip().splitlines()) == 1


def test_an_aliyun_cluster_reaches_provisioning(here, capsys, monkeypatch):
    seen = capture_up(monkeypatch)
    argv = ["--model", "gpt2", "--cloud", "aliyun", "--nodes", "2", "--yes"]
    with pytest.raises(Tripwire):
        run_cli(capsys, "up", "--name", "c1", "--no-check", *argv)
    assert seen[0].plan.choice.nodes == 2 and seen[0].plan.choice.cloud == "aliyun"
