"""SSH to each node of a cluster box (orchestrator/provision/cluster.py): its own address, or
rank 0 as the jump host for a node without a public one.

Every node uses the box's key and the box's known_hosts (one pin per address). A node reached
through rank 0 gets an explicit ProxyCommand, `ssh <rank 0's options> -W %h:%p rank0`, given
first on the command line so it wins over any ProxyJump in ssh_config (ssh_config(5): the
first value obtained is used). It is what ProxyJump would run (ssh.c), but carries the box's
key, pinned known_hosts and non-interactive options to the hop, which ProxyJump does not.
`%h:%p` rather than `[%h]:%p`: node addresses inside a VPC are IPv4, and the brackets would
need quotes that rsync's -e parsing refuses (run/shell.py).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from orchestrator.check.transport import SshTransport, resolve_ssh_config
from orchestrator.errors import OrchError
from orchestrator.provision.boxes import Box
from orchestrator.provision.cluster import ClusterNode, cluster_nodes


@dataclass(slots=True)
class JumpedSshTransport(SshTransport):
    """A node reached through another transport (rank 0) as its jump host."""

    via: SshTransport | None = None

    @property
    def description(self) -> str:
        hop = f" via {self.via.host}" if self.via is not None else ""
        return f"ssh {self.user}@{self.host}{hop}"

    def argv(
        self, script: str, connect_timeout: int | None = None, hop_log: Path | None = None
    ) -> list[str]:
        base = SshTransport.argv(self, script, connect_timeout, None)
        if self.via is None:
            return base
        proxy = proxy_command(self.via, connect_timeout or self.connect_timeout)
        return [base[0], "-o", f"ProxyCommand={proxy}", *base[1:]]


def proxy_command(hop: SshTransport, connect_timeout: int) -> str:
    argv = hop.argv("true", connect_timeout, None)
    cut = argv.index("--")
    # ssh expands %h, %p, ... in ProxyCommand: the hop's own arguments are escaped.
    words = [shlex.quote(arg.replace("%", "%%")) for arg in argv[:cut]]
    return " ".join([*words, "-W", "%h:%p", "--", shlex.quote(argv[cut + 1].replace("%", "%%"))])


def node_transport(
    box: Box, node: ClusterNode, rank0: SshTransport | None, ssh_config: str | None
) -> SshTransport:
    """The transport of one node (`rank0`: node 0's, for the nodes reached through it)."""
    user = str((box.outputs or {}).get("ssh_user") or box.candidate.ssh_user)
    config = resolve_ssh_config(ssh_config)
    if node.reached_via_rank0:
        if rank0 is None or not node.private_ip:
            raise OrchError(f"box {box.name}: node {node.index} has no address to reach it by")
        return JumpedSshTransport(
            host=node.private_ip,
            user=user,
            key_path=box.key_path,
            known_hosts_path=box.known_hosts_path,
            ssh_config=config,
            via=rank0,
        )
    host = node.public_ip or node.private_ip
    if not host:
        raise OrchError(f"box {box.name}: node {node.index} has no address recorded")
    return SshTransport(
        host=host,
        user=user,
        key_path=box.key_path,
        known_hosts_path=box.known_hosts_path,
        ssh_config=config,
    )


def node_transports(box: Box, ssh_config: str | None) -> list[tuple[ClusterNode, SshTransport]]:
    """Every node of the box with its transport, rank 0 first."""
    nodes = cluster_nodes(box)
    rank0 = node_transport(box, nodes[0], None, ssh_config)
    return [(nodes[0], rank0)] + [
        (node, node_transport(box, node, rank0, ssh_config)) for node in nodes[1:]
    ]
