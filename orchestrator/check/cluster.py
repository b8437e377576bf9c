"""`orch check CLUSTER`: every node's GPUs in parallel, then an all_reduce across the nodes.

A cluster is one box record whose outputs carry its nodes (orchestrator/provision/cluster.py).
Each node's GPUs are checked as a single box's are (verify.run_check over SSH, a node without
a public address reached through node 0). When every node passes, a short all_reduce runs
across all of them under torchrun (allreduce.py) and its bus bandwidth is compared with what
the type's network should give (busbw.py). The exit status is the worst of all: 3 for a node
that does not match its plan or an all_reduce far below its expectation, 1 for a node that
never answered or an all_reduce that could not run.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.check import allreduce, busbw
from orchestrator.check.transport import SshTransport, resolve_ssh_config
from orchestrator.check.untrusted import printable
from orchestrator.check.verify import CheckReport, Expected, run_check
from orchestrator.errors import EXIT_CHECK_FAILED, EXIT_FAILURE, EXIT_OK, OrchError
from orchestrator.provision.cluster import ClusterNode, cluster_nodes

if TYPE_CHECKING:
    from orchestrator.provision.boxes import Box

# The all_reduce is short: a rendezvous, 25 collectives of a few hundred MiB.
ALLREDUCE_LIMIT_S = 300.0


@dataclass(slots=True)
class NodeCheck:
    node: ClusterNode
    transport: str
    report: CheckReport | None = None
    unreachable: str = ""  # why the node never answered (escaped)

    @property
    def exit_code(self) -> int:
        return self.report.exit_code if self.report else EXIT_FAILURE

    @property
    def address(self) -> str:
        return self.node.public_ip or f"{self.node.private_ip} via node 0"

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.node.index,
            "address": self.address,
            "transport": self.transport,
            "ok": self.exit_code == EXIT_OK,
            "exit_code": self.exit_code,
            "unreachable": self.unreachable or None,
            "report": self.report.to_dict() if self.report else None,
        }


@dataclass(slots=True)
class AllreduceCheck:
    settings: allreduce.ProbeSettings
    expectation: busbw.Expectation
    run: allreduce.AllreduceRun | None = None
    verdict: busbw.Verdict | None = None
    skipped: str = ""

    @property
    def exit_code(self) -> int:
        if self.skipped:
            return EXIT_OK  # the nodes' own failures carry the exit status
        if self.verdict is None:
            return EXIT_FAILURE
        return EXIT_OK if self.verdict.ok else EXIT_CHECK_FAILED

    @property
    def line(self) -> str:
        if self.skipped:
            return f"skipped: {self.skipped}"
        if self.verdict is not None:
            return self.verdict.line
        return self.run.problem if self.run else "not run"

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.exit_code == EXIT_OK and not self.skipped,
            "line": self.line,
            "backend": self.settings.backend,
            "size_bytes": self.settings.size_bytes,
            "expected": self.expectation.to_dict(),
            "skipped": self.skipped or None,
            "run": self.run.to_dict() if self.run else None,
            "verdict": self.verdict.to_dict() if self.verdict else None,
        }


@dataclass(slots=True)
class ClusterReport:
    box: str
    nodes: list[NodeCheck] = field(default_factory=list)
    allreduce: AllreduceCheck | None = None

    @property
    def exit_code(self) -> int:
        codes = [n.exit_code for n in self.nodes]
        if self.allreduce is not None:
            codes.append(self.allreduce.exit_code)
        return max(codes, default=EXIT_OK)

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        gpus = [g for n in self.nodes if n.report for g in n.report.to_dict()["gpus"]]
        return {
            "box": self.box,
            "ok": self.ok,
            "exit_code": self.exit_code,
            "nodes": [n.to_dict() for n in self.nodes],
            "allreduce": self.allreduce.to_dict() if self.allreduce else None,
            "gpus": gpus,  # every node's, for the driver version sizing reads (check/record.py)
        }


def node_transports(box: Box, ssh_config: str | None) -> list[tuple[ClusterNode, SshTransport]]:
    """An SSH transport per node; one without a public address goes through node 0."""
    nodes = cluster_nodes(box)
    config = resolve_ssh_config(ssh_config)
    user = str((box.outputs or {}).get("ssh_user") or box.candidate.ssh_user)

    def transport(host: str | None, via: SshTransport | None, index: int) -> SshTransport:
        if not host:
            raise OrchError(f"box {box.name}: node {index} has no address recorded")
        return SshTransport(
            host=host,
            user=user,
            key_path=box.key_path,
            known_hosts_path=box.known_hosts_path,
            ssh_config=config,
            via=via,
        )

    rank0 = transport(nodes[0].public_ip or nodes[0].private_ip, None, 0)
    pairs = [(nodes[0], rank0)]
    for node in nodes[1:]:
        if node.reached_via_rank0:
            pairs.append((node, transport(node.private_ip, rank0, node.index)))
        else:
            pairs.append((node, transport(node.public_ip, None, node.index)))
    return pairs


def _check_node(
    node: ClusterNode, transport: SshTransport, expected: Expected, box: str, timeout: float
) -> NodeCheck:
    check = NodeCheck(node, transport.description)
    try:
        check.report = run_check(
            transport, expected, box_name=f"{box} node {node.index}", timeout=timeout
        )
    except OrchError as exc:  # Unreachable, a changed host key, a bad ssh_config
        check.unreachable = printable(exc.one_line(), 500)
    return check


def check_nodes(
    box: Box, pairs: list[tuple[ClusterNode, SshTransport]], timeout: float
) -> list[NodeCheck]:
    expected = Expected.from_candidate(box.candidate)
    with ThreadPoolExecutor(max_workers=min(16, len(pairs))) as pool:
        futures = [
            pool.submit(_check_node, node, transport, expected, box.name, timeout)
            for node, transport in pairs
        ]
        return [future.result() for future in futures]


def is_cluster(box: Box) -> bool:
    """Several nodes in the record. A box without a `nodes` output is a single box whatever
    its address is (a host name or an ssh_config alias are fine there)."""
    if (box.outputs or {}).get("nodes") is None:
        return False
    return len(cluster_nodes(box)) > 1


def gpu_verdict(
    box: Box, pairs: list[tuple[ClusterNode, SshTransport]], timeout: float
) -> tuple[int, str]:
    """Every node's GPUs checked in parallel, for `orch up` and `orch run` on a cluster:
    (the worst exit status, one escaped line naming each node that failed; "" when all
    pass). `pairs`: node_transports(box, ssh_config)."""
    checks = check_nodes(box, pairs, timeout)
    failed = [c for c in checks if c.exit_code != EXIT_OK]
    parts = []
    for check in failed:
        if check.report is None:
            parts.append(f"node {check.node.index} never answered ({check.unreachable})")
        else:
            problems = "; ".join(printable(c.message) for c in check.report.failures())
            parts.append(f"node {check.node.index}: {problems}")
    return max((c.exit_code for c in failed), default=EXIT_OK), " | ".join(parts)


def expectation_for(
    box: Box, nodes: int, world_size: int, override_gbps: float | None
) -> busbw.Expectation:
    """--expect-busbw when given, else what the plan assumed for the box's type."""
    if override_gbps is not None:
        return busbw.given_expectation(override_gbps)
    from orchestrator.catalog import find_instance
    from orchestrator.catalog.interconnect import interconnect_of
    from orchestrator.catalog.network import network_of

    name = box.candidate.instance_type
    network = network_of(box.cloud, name)
    try:
        inside = interconnect_of(find_instance(box.cloud, name).family)
    except OrchError:
        inside = None
    box_rate = inside.busbw_gbps if inside else None
    return busbw.expected_for(name, network, nodes, world_size, box_rate)


def check_cluster(
    box: Box,
    *,
    ssh_config: str | None,
    timeout: float,
    backend: str = "nccl",
    size_bytes: int = allreduce.DEFAULT_SIZE_MIB * 2**20,
    expect_busbw: float | None = None,
) -> ClusterReport:
    pairs = node_transports(box, ssh_config)
    report = ClusterReport(box.name, check_nodes(box, pairs, timeout))
    per_node = max(1, int(box.candidate.gpu_count or 1))
    settings = allreduce.ProbeSettings(
        backend, size_bytes, per_node, min(timeout, ALLREDUCE_LIMIT_S)
    )
    world = per_node * len(pairs)
    check = AllreduceCheck(settings, expectation_for(box, len(pairs), world, expect_busbw))
    report.allreduce = check
    failed = [n.node.index for n in report.nodes if n.exit_code != EXIT_OK]
    if failed:
        which = ", ".join(map(str, failed))
        check.skipped = f"{'node' if len(failed) == 1 else 'nodes'} {which} failed the GPU check"
        return report
    rendezvous = pairs[0][0].private_ip or pairs[0][1].host
    launches = [
        allreduce.NodeLaunch(node.index, transport, node.private_ip) for node, transport in pairs
    ]
    check.run = allreduce.run_allreduce(launches, rendezvous, settings)
    if check.run.measurement is not None:
        check.verdict = busbw.verdict(check.run.measurement, check.expectation)
    return report
