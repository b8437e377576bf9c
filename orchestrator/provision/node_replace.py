"""Replace one node of a cluster in its own Terraform root (issue 24 item 5).

    lock the name -> init -> terraform apply -replace=<node_resource>[k] (the same rendered
    root and terraform.tfvars.json the cluster was created with) -> record the new outputs

Terraform destroys node k and creates it again with the same configuration ("-replace=ADDRESS
... This is helpful when one or more remote objects have become degraded",
https://developer.hashicorp.com/terraform/cli/commands/plan#replace-address); a node the cloud
already took back is gone from the refreshed state and is simply created. The other nodes, the
placement group (deployment set), the security group and the key are not touched, so the
other nodes keep their instance ids and the new node joins the same placement group.

The replacement is planned first (`terraform plan -out`, read with `terraform show -json`) and
that very plan applied, only when it replaces no other node. A plan that would (drift in the
other nodes' configuration) raises NodeNotReplaced with nothing changed; any apply error (no
capacity in the group's zone, a quota, anything else) raises it with the box left "failed".
Either way the caller re-provisions the whole cluster, whose `down` removes what is left.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from typing import Any

from orchestrator import clouds
from orchestrator.errors import OrchError
from orchestrator.provision import state_backend
from orchestrator.provision.boxes import Box, box_lock, load_box
from orchestrator.provision.cluster import ClusterNode, cluster_nodes, node_count
from orchestrator.provision.steps import init, set_state, tell_state_lock, terraform_for
from orchestrator.provision.terraform import Interrupted, TerraformError

Say = Callable[[str], None]
PLAN_FILE = "replace-node.tfplan"


class NodeNotReplaced(OrchError):
    """The node could not be replaced in place (the whole cluster may still be)."""


def can_replace_node(box: Box) -> bool:
    """Whether the box is a cluster whose cloud names its nodes' Terraform resource."""
    return node_count(box) > 1 and clouds.node_resource_of(clouds.get(box.cloud)) is not None


def replace_node(name: str, index: int, say: Say, progress: Say | None = None) -> Box:
    """Replace node `index` of cluster `name`; returns its record with the new node's
    addresses and instance id. Raises NodeNotReplaced when the apply fails."""
    with box_lock(name):
        box = load_box(name)
        resource = clouds.node_resource_of(clouds.get(box.cloud))
        before = cluster_nodes(box)
        if resource is None or not 0 <= index < len(before) or len(before) < 2:
            raise NodeNotReplaced(f"box {name} has no node {index} that orch can replace alone")
        location = state_backend.parse_state_url(box.state_url) if box.state_url else None
        say(f"replacing node {index} of box {name} alone: the other nodes and its group stay")
        previous = box.runner
        set_state(box, "creating", None, location)
        terraform = terraform_for(box, progress)
        try:
            init(box, terraform, location)
            tell_state_lock(box, previous, location, say)
            applied = _apply_node_alone(box, terraform, resource, index)
            outputs = applied.outputs()
            box.outputs = outputs if outputs is not None else terraform.output()
            after = cluster_nodes(box)
            if len(after) != len(before):
                raise TerraformError(f"the cluster came back with {len(after)} nodes")
        except NodeNotReplaced:
            set_state(box, "up", None, location)  # only planned: nothing changed
            raise
        except TerraformError as exc:
            set_state(box, "failed", f"replacing node {index}: {exc.message}", location)
            raise NodeNotReplaced(f"node {index} could not be replaced: {exc.message}") from None
        except Interrupted:
            set_state(box, "failed", f"interrupted while replacing node {index}", location)
            raise
        set_state(box, "up", None, location)
    _forget_host_keys(box, before[index])
    return box


def _apply_node_alone(box: Box, terraform: Any, resource: str, index: int) -> Any:
    """Plan the replacement first and apply that very plan, only if it replaces no other node:
    drift elsewhere (a changed launch template, a market option the cloud reads back
    differently) could make Terraform replace every node, which is a whole new cluster, not
    this path (NodeNotReplaced: the caller re-provisions it instead). The plan file holds the
    root's values: it lives in the private box directory and is removed after."""
    path = box.directory / PLAN_FILE
    try:
        plan = terraform.saved_plan(path.name, replace=(f"{resource}[{index}]",))
        prefix = f"{resource}["
        others = sorted(
            str(change.get("address")).removeprefix(prefix).rstrip("]")
            for change in plan.get("resource_changes") or []
            if str(change.get("address", "")).startswith(prefix)
            and change.get("address") != f"{prefix}{index}]"
            and "delete" in ((change.get("change") or {}).get("actions") or [])
        )
        if others:
            raise NodeNotReplaced(
                f"node {index} cannot be replaced alone: the plan would also replace node "
                f"{', '.join(others)} (their configuration drifted)"
            )
        return terraform.apply_saved(path.name)
    finally:
        path.unlink(missing_ok=True)


def _forget_host_keys(box: Box, old: ClusterNode) -> None:
    """The lost node's addresses leave the box's pinned known_hosts: a replacement that gets
    one of them again (a private address reused in the subnet) has a new host key, which would
    otherwise look like someone in the middle. Best effort (`ssh-keygen -R` handles hashed
    entries too)."""
    keygen = shutil.which("ssh-keygen")
    if keygen is None or not box.known_hosts_path.exists():
        return
    for address in {old.public_ip, old.private_ip} - {None}:
        subprocess.run(
            [keygen, "-R", str(address), "-f", str(box.known_hosts_path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
            timeout=30,
        )
