"""provision/node_replace.py: one node of a cluster replaced in its own Terraform root, only
when the saved plan replaces no other node (issue 24 item 5)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from orchestrator.provision import node_replace
from orchestrator.provision.node_replace import NodeNotReplaced

NODES = "module.box.aws_instance.this"


class FakeTerraform:
    """`saved_plan` answers with these resource changes; `apply_saved` records its call."""

    def __init__(self, directory, changes):
        self.directory, self.changes, self.applied = directory, changes, []

    def saved_plan(self, path, replace=()):
        (self.directory / path).write_text("plan")
        self.replace = replace
        return {"resource_changes": self.changes}

    def apply_saved(self, path):
        self.applied.append(path)
        return "applied"


def change(address, *actions):
    return {"address": address, "change": {"actions": list(actions)}}


def test_the_node_alone_is_applied_from_its_saved_plan(tmp_path):
    box = SimpleNamespace(directory=tmp_path)
    terraform = FakeTerraform(tmp_path, [
        change(f"{NODES}[1]", "delete", "create"),
        change(f"{NODES}[0]", "no-op"),
        change("module.box.aws_eip.this[0]", "update"),  # follows node 0's interface: fine
    ])  # fmt: skip
    assert node_replace._apply_node_alone(box, terraform, NODES, 1) == "applied"  # type: ignore[arg-type]
    assert terraform.replace == (f"{NODES}[1]",)
    assert terraform.applied == [node_replace.PLAN_FILE]
    assert not (tmp_path / node_replace.PLAN_FILE).exists()  # it holds the root's values


def test_a_plan_that_would_replace_another_node_is_refused(tmp_path):
    box = SimpleNamespace(directory=tmp_path)
    terraform = FakeTerraform(tmp_path, [
        change(f"{NODES}[0]", "delete", "create"),  # drift: a whole new cluster, not this path
        change(f"{NODES}[1]", "create"),
    ])  # fmt: skip
    with pytest.raises(NodeNotReplaced, match=r"would also replace node 0 \(their configur"):
        node_replace._apply_node_alone(box, terraform, NODES, 1)  # type: ignore[arg-type]
    assert terraform.applied == [] and not (tmp_path / node_replace.PLAN_FILE).exists()
