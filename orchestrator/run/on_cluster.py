"""The job's command on each node (run/launcher.py applied to a RunSpec), and one attempt of
`orch run` on a cluster box (run/cluster_job.py does the nodes' work)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from orchestrator.check.cluster import node_transports
from orchestrator.check.ports import free_ports
from orchestrator.check.transport import SshTransport
from orchestrator.errors import OrchError, UsageError
from orchestrator.provision.boxes import Box, orch_home
from orchestrator.provision.cluster import ClusterNode
from orchestrator.run import checkpoints, remote
from orchestrator.run.cluster_job import ClusterJob, NodeJob
from orchestrator.run.launcher import (
    Topology,
    node_command,
    node_env,
    reserved_env_clash,
    resolve_launcher,
)
from orchestrator.run.spec import RunSpec

PORT_PROBE_TIMEOUT_S = 30.0
LOCAL_RUNS = "runs"  # $ORCH_HOME/runs/RUN_ID/attempt-A/node-I.log: kept after the box goes


def logs_dir(run_id: str, attempt: int) -> Path:
    """Where an attempt's node logs land here: each attempt (recovery) keeps its own."""
    return orch_home() / LOCAL_RUNS / run_id / f"attempt-{attempt}"


def topology_of(box: Box, nodes: list[ClusterNode], run_id: str, join_timeout_s: int) -> Topology:
    """One box: its job meets itself on the loopback. A cluster: at rank 0's private address."""
    if len(nodes) == 1:
        ips: tuple[str, ...] = ("127.0.0.1",)
    else:
        missing = [str(n.index) for n in nodes if not n.private_ip]
        if missing:
            raise OrchError(f"box {box.name}: node {', '.join(missing)} has no private address")
        ips = tuple(str(n.private_ip) for n in nodes)
    gpus = int(box.candidate.gpu_count or 1)
    return Topology(node_ips=ips, gpus_per_node=gpus, run_id=run_id, join_timeout_s=join_timeout_s)


def rendezvous_ports(
    transport: SshTransport, launcher: str, num_nodes: int
) -> tuple[int, int] | None:
    """Two ports node 0 names free for this attempt (torchrun's store, MASTER_PORT), when the
    launch uses them; None otherwise, or when node 0 cannot say (Topology derives them)."""
    if launcher == "none" and num_nodes == 1:
        return None
    ports = free_ports(transport, 2, PORT_PROBE_TIMEOUT_S)
    return (ports[0], ports[1]) if ports else None


def refuse_env_clash(spec: RunSpec, topology: Topology, launcher: str) -> None:
    """A name the user set with --env that orch sets on every node is a usage error."""
    clash = reserved_env_clash(spec.env, topology, launcher)
    if clash:
        raise UsageError(f"--env {clash}: orch sets {clash} on every node")


def node_specs(spec: RunSpec, topology: Topology, launcher: str) -> list[RunSpec]:
    """Each node's RunSpec: the command under the launcher, the cluster in the environment."""
    refuse_env_clash(spec, topology, launcher)
    return [
        replace(
            spec,
            command=node_command(spec.command, topology, rank, launcher),
            env={**spec.env, **node_env(topology, rank, launcher)},
        )
        for rank in range(topology.num_nodes)
    ]


def attempt_on_cluster(run: Any, box: Box, attempt: Any, agent_source: str | None) -> None:
    """One attempt on every node of `box` (`run`: the session.Run doing it). Raises
    cluster_job.NodeLost when a node goes; every node's job is stopped by then."""
    request, spec, report = run.request, run.spec, run.report
    if request.detach:
        raise UsageError("--detach works on one box: a cluster run stays attached")
    pairs = node_transports(box, request.ssh_config)
    nodes = [node for node, _ in pairs]
    topology = topology_of(box, nodes, spec.run_id, request.join_timeout_s)
    shape = (topology.num_nodes, topology.gpus_per_node)
    if run.world is not None and run.world != shape:
        raise OrchError(f"the new cluster is {shape[0]} x {shape[1]} GPUs; the run needs "
                        f"{run.world[0]} x {run.world[1]} (the same world size)")  # fmt: skip
    run.world = shape
    launcher = resolve_launcher(request.launcher, *shape)
    ports = rendezvous_ports(pairs[0][1], launcher, topology.num_nodes)
    specs = node_specs(spec, replace(topology, ports=ports), launcher)
    jobs = [NodeJob(node, t, s) for (node, t), s in zip(pairs, specs, strict=True)]
    cluster = ClusterJob(box, jobs, run.say, request.ssh_lost_after_s, request.watch_interval_s)
    run.cluster = cluster
    store = spec.store.for_run(spec.run_id) if spec.store else None

    def launch_for(job: NodeJob) -> remote.LaunchEnv:
        # Every node restores the checkpoint; rank 0 alone uploads it.
        return remote.LaunchEnv(attempt.number, box.cloud, store, spec.checkpoint_interval_s,
                                upload=job.index == 0)  # fmt: skip

    if request.check:
        check_every_node(box, pairs, request.check_timeout, run.say)
    cluster.start(agent_source, launch_for)
    run.job_started, attempt.job_started = True, time.time()
    run.remote_dir = jobs[0].remote_dir
    run._save_record("running")
    run.say(
        f"run {spec.run_id} started on {shape[0]} nodes x {shape[1]} GPUs of box {box.name}"
        f" (launcher {launcher}); attempt {attempt.number}"
    )
    try:
        cluster.follow(run.sink)
        cluster.finish()
    finally:
        report.node_logs += cluster.fetch_logs(logs_dir(spec.run_id, attempt.number))
    code = final = cluster.exit_code()
    if spec.store:
        saved, final, report.error = checkpoints.settle(jobs[0].transport, spec.run_id, code)
        attempt.checkpoint = saved.to_dict()
    report.exit_code = final
    line = cluster.failure_line(request.join_timeout_s)
    run._close_attempt("completed" if code == 0 else "failed", line or "", code)
    if line:
        run.say(line)
    run._fetch(jobs[0].transport)
    run._save_record("done", exit_code=final)


def check_every_node(
    box: Box, pairs: list[tuple[ClusterNode, Any]], timeout: float, say: Any
) -> None:
    """The GPU check of every node, in parallel, as `orch check CLUSTER` does before its
    all_reduce (check/cluster.py); one line naming each node that fails."""
    from orchestrator.check.cluster import gpu_verdict

    say(f"checking the GPUs of the {len(pairs)} nodes of box {box.name}")
    _, problems = gpu_verdict(box, pairs, timeout)
    if problems:
        raise OrchError(f"box {box.name} does not match its plan: {problems}")
