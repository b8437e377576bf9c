"""Multi-node plans (issue 24 item 1): the plan file's `nodes`, sharding over nodes, EFA vs
TCP scaling, ranking (type, nodes) pairs by cost per job, and `--nodes` on the command line."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.errors import UsageError
from orchestrator.plan import Candidate, Plan, read_plan
from tests.support import candidate, plan_file

# ------------------------------------------------------------------------------ plan file


def test_a_plan_file_keeps_each_candidate_s_nodes(tmp_path: Path) -> None:
    path = plan_file(tmp_path, candidate("p5.48xlarge", nodes=2), candidate("g5.xlarge"))
    assert json.loads(Path(path).read_text())["choice"]["nodes"] == 2
    plan = read_plan(path)
    assert [c.nodes for c in plan.candidates()] == [2, 1]


def test_an_older_plan_without_nodes_reads_as_one_node(tmp_path: Path) -> None:
    data = json.loads(Path(plan_file(tmp_path, candidate("g5.xlarge"))).read_text())
    del data["choice"]["nodes"]
    assert Plan.from_dict(data).choice.nodes == 1


@pytest.mark.parametrize("nodes", [0, -1, 65, 1.5, "2", True, None])
def test_a_plan_with_bad_nodes_is_refused_naming_the_candidate(nodes: object) -> None:
    row = candidate("g5.xlarge").to_dict()
    with pytest.raises(UsageError, match="plan alternative 1: nodes"):
        Candidate.from_dict(dict(row, nodes=nodes), "alternative 1")
    assert replace(candidate("g5.xlarge"), nodes=64).nodes == 64
