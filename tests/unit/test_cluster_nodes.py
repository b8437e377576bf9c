"""A cluster box's nodes from its record (provision/cluster.py): validated before they reach
ssh or torchrun's --rdzv-endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import OrchError
from orchestrator.provision.boxes import Box
from orchestrator.provision.cluster import cluster_nodes, node_count
from tests.support import candidate


def box(outputs: dict[str, Any], tmp_path: Path) -> Box:
    return Box(name="c1", directory=tmp_path, cloud="aws", region="us-east-1",
               candidate=candidate("g5.xlarge"), state="up", created_at="2026-12-05T08:00:00Z",
               expires_at=None, outputs=outputs, owner="t", state_url=None)  # fmt: skip


def node(index: int, public: str | None = "203.0.113.5", private: str = "10.0.1.4") -> dict:
    return {"index": index, "instance_id": f"i-{index}", "public_ip": public,
            "private_ip": private, "availability_zone": "us-east-1a"}  # fmt: skip


def test_an_ordinary_box_is_one_node_from_its_plain_outputs(tmp_path: Path):
    outputs = {"instance_id": "i-0", "public_ip": "198.51.100.7", "private_ip": "10.0.0.9"}
    (only,) = cluster_nodes(box(outputs, tmp_path))
    assert (only.index, only.public_ip, only.private_ip) == (0, "198.51.100.7", "10.0.0.9")
    assert not only.reached_via_rank0 and node_count(box(outputs, tmp_path)) == 1


def test_a_cluster_s_nodes_rank_0_first_and_the_unaddressed_ones_via_rank_0(tmp_path: Path):
    nodes = cluster_nodes(box({"nodes": [node(0), node(1, None, "10.0.1.5")]}, tmp_path))
    assert [n.index for n in nodes] == [0, 1]
    assert nodes[1].public_ip is None and nodes[1].reached_via_rank0
    assert nodes[1].private_ip == "10.0.1.5" and nodes[1].availability_zone == "us-east-1a"


@pytest.mark.parametrize(
    "nodes, message",
    [
        ("10.0.0.1", "damaged"),  # not a list
        ([], "damaged"),  # empty
        ([node(0)] * 65, "damaged"),  # more than 64
        ([node(0), "x"], "node 1 in its record is damaged"),
        ([node(0), node(2)], "indexes are not 0..1"),  # a gap
        ([node(1), node(0)], "indexes are not 0..1"),  # rank 0 not first
        ([node(0), {**node(1), "index": True}], "bad index"),
        ([node(0), node(1, "-oProxyCommand=sh")], "bad address"),  # an option for ssh
        ([node(0), node(1, "box.example.com")], "bad address"),  # a host name
        ([node(0, private="10.0.0.1:29400")], "bad address"),  # a port smuggled in
    ],
)
def test_damaged_node_lists_and_bad_addresses_are_refused(tmp_path: Path, nodes, message):
    with pytest.raises(OrchError, match=message):
        cluster_nodes(box({"nodes": nodes}, tmp_path))
