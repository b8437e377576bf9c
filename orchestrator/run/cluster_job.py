"""One attempt of a run on a cluster box (issue 24): every node prepared, synced and started in
parallel, rank 0's output streamed while every node is watched, every node's status gathered
and every node's log fetched.

A node is lost when its cloud says its instance is gone or reclaimed, when SSH has not answered
for --ssh-lost-after, or when its job vanished without an exit status (the machine rebooted, or
its processes were killed). A node whose job fails while rank 0 still runs ends the attempt
too: the others would only wait on it. Either way every node's job is stopped (TERM, then KILL:
remote.stop_script) before the attempt ends, so no half of a job keeps a cluster busy.

The run's exit status is the worst node's: the first non-zero status, in rank order, of a node
that ended by itself, else of a node orch stopped.
"""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TypeVar

from orchestrator import clouds
from orchestrator.check.transport import SshTransport, Unreachable
from orchestrator.clouds.base import CloudError
from orchestrator.clouds.values import InstanceState
from orchestrator.errors import EXIT_FAILURE, OrchError
from orchestrator.provision.boxes import Box
from orchestrator.provision.cluster import ClusterNode
from orchestrator.run import recovery, remote, shell, sync
from orchestrator.run.spec import RunSpec
from orchestrator.run.stream import LogFollower, SshLost, StreamStopped

Say = Callable[[str], None]
T = TypeVar("T")
R = TypeVar("R")
MAX_PARALLEL = 16
STATUS_TIMEOUT_S = 20.0
FINISH_GRACE_S = 60.0  # after rank 0 ends, how long the other nodes get to end by themselves
# What torchrun's static rendezvous says when a node never joins (rank 0's store, and a node
# that cannot reach it; torch/csrc/distributed/c10d/TCPStore*.cpp), and c10d's own errors.
RENDEZVOUS_ERRORS = (
    "waiting for clients",
    "The client socket has timed out",
    "RendezvousTimeoutError",
    "RendezvousClosedError",
)


class NodeLost(OrchError):
    """A node went away while the job ran (its cloud's word, or SSH silent, or its job gone)."""

    def __init__(self, index: int, why: str, state: InstanceState | None = None):
        super().__init__(f"node {index} of the cluster is lost: {why}")
        self.index, self.why, self.state = index, why, state


def reclaimed(lost: NodeLost) -> bool:
    """The node was lost to its cloud's spot service (not to silence or a vanished job)."""
    return lost.state is not None and lost.state.spot_reclaimed


class _NodeFailed(Exception):
    def __init__(self, index: int):
        self.index = index


@dataclass(slots=True)
class NodeJob:
    node: ClusterNode
    transport: SshTransport
    spec: RunSpec  # this node's command and environment (run/launcher.py)
    remote_dir: str = ""
    started: bool = False
    exit_code: int | None = None
    step: str = ""
    stopped: bool = False  # orch stopped it (its status is a consequence, not a cause)
    log: str | None = None  # where its fetched output.log is, here
    last_answer: float = field(default_factory=time.monotonic)

    @property
    def index(self) -> int:
        return self.node.index


def parallel(function: Callable[[T], R], items: list[T]) -> list[R]:
    """function(item) for every item at once; the first failure (in item order) is raised
    once every call has ended."""
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(items))) as pool:
        futures = [pool.submit(function, item) for item in items]
        errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error
    return [f.result() for f in futures]


@dataclass(slots=True)
class ClusterJob:
    box: Box
    jobs: list[NodeJob]
    say: Say
    ssh_lost_after_s: float = 300.0
    watch_interval_s: float = 15.0
    lost: NodeLost | None = None
    failed: int | None = None  # the node whose job failed while rank 0 ran

    # ------------------------------------------------------------------------- start

    def start(self, agent_source: str | None, launch_for: Callable[[NodeJob], remote.LaunchEnv]):
        """Prepare and sync every node, then start the job on each (all at once)."""

        def prepare(job: NodeJob) -> None:
            script = remote.prepare_script(job.spec, agent_source)
            out = shell.call_ok(job.transport, script, what=f"preparing node {job.index}")
            try:
                job.remote_dir = remote.prepared_dir(out)
            except ValueError as exc:
                raise OrchError(f"preparing node {job.index}: {exc}") from None
            sync.push(job.transport, job.spec.workdir, job.remote_dir, job.spec.excludes,
                      job.spec.includes, self.say if job.index == 0 else None)  # fmt: skip

        def launch(job: NodeJob) -> None:
            script = remote.launch_script(job.spec, launch_for(job))
            what = f"starting the job on node {job.index}"
            shell.call_ok(job.transport, script, what=what, retry_s=30)
            job.started = True
            job.last_answer = time.monotonic()  # it answered: silence counts from here

        self.say(
            f"syncing {self.jobs[0].spec.workdir} to {len(self.jobs)} nodes of {self.box.name}"
        )
        parallel(prepare, self.jobs)
        try:
            parallel(launch, self.jobs)
        except OrchError:
            self.stop_all()
            raise

    # ------------------------------------------------------------------------ follow

    def follow(self, sink: BinaryIO) -> None:
        """Stream rank 0's output until its job ends, watching every node meanwhile. Raises
        NodeLost; a node that failed first is in `failed` (its status comes with finish())."""
        rank0 = self.jobs[0]
        follower = LogFollower(
            rank0.transport, rank0.spec.run_id, sink, self.say, lost_after_s=self.ssh_lost_after_s
        )
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(self.watch_interval_s):
                try:
                    self._check_all(rank0_running=True)
                except NodeLost as lost:
                    self.lost = lost
                except _NodeFailed as failed:
                    self.failed = failed.index
                else:
                    continue
                follower.stop()
                return

        thread = threading.Thread(target=watch, name="orch-node-watch", daemon=True)
        thread.start()
        try:
            follower.follow()
        except StreamStopped:
            if self.lost is None and self.failed is None:
                raise OrchError("the output stream was stopped") from None
        except SshLost as exc:
            self.lost = NodeLost(0, exc.message)
        finally:
            stop.set()
            thread.join(timeout=STATUS_TIMEOUT_S + 5)
        if self.lost is not None:
            self.stop_all(reclaim=reclaimed(self.lost))
            raise self.lost

    def _check_all(self, *, rank0_running: bool) -> None:
        results = parallel(lambda job: self._check(job, rank0_running), self.jobs)
        for outcome in results:
            if isinstance(outcome, NodeLost):
                raise outcome
        for job, outcome in zip(self.jobs, results, strict=True):
            if outcome == "failed" and job.index > 0:
                raise _NodeFailed(job.index)

    def _check(self, job: NodeJob, rank0_running: bool) -> NodeLost | str:
        """One look at a node: NodeLost, "failed" (its job ended non-zero), "done" or "ok"."""
        state = self._cloud_state(job.node)
        if recovery.gone(state):
            assert state is not None
            why = f"its instance is {state.state}" + (f" ({state.reason})" if state.reason else "")
            return NodeLost(job.index, why, state)
        try:
            result = job.transport.run(
                remote.status_script(job.spec.run_id), STATUS_TIMEOUT_S, on_stdin=True
            )
        except Unreachable:
            silent = time.monotonic() - job.last_answer
            if silent > self.ssh_lost_after_s:
                return NodeLost(job.index, f"no SSH answer for {silent:.0f} s")
            return "ok"
        job.last_answer = time.monotonic()
        status = remote.parse_status(result.stdout)
        if not status.found:
            return NodeLost(job.index, "the run is not on it any more (was it replaced?)")
        if status.done and status.reclaim_stopped:
            return NodeLost(job.index, recovery.NOTICE_STOPPED_WHY, recovery.NOTICE_STOPPED)
        if status.done:
            job.exit_code, job.step = status.exit_code, status.step
            return "failed" if status.exit_code else "done"
        if not status.alive:
            return NodeLost(job.index, "its job vanished without an exit status")
        return "ok"

    def _cloud_state(self, node: ClusterNode) -> InstanceState | None:
        if not node.instance_id:
            return None
        try:
            cloud = clouds.get(self.box.cloud)
            return clouds.instance_state_of(cloud, self.box.region, node.instance_id)
        except CloudError:
            return None

    # ------------------------------------------------------------------------ finish

    def finish(self, grace_s: float = FINISH_GRACE_S) -> None:
        """Rank 0's output ended: gather every node's status, giving the others `grace_s` to
        end by themselves (they do, once rank 0's workers are gone); stop what still runs.
        Raises NodeLost for a node that went away meanwhile."""
        if self.failed is not None:
            self.say(f"the job failed on node {self.failed}: stopping it on every node")
            self.stop_all()
        deadline = time.monotonic() + grace_s
        stopping = False
        while True:
            outcomes = parallel(lambda job: self._check(job, False), self.jobs)
            lost = next((o for o in outcomes if isinstance(o, NodeLost)), None)
            if lost is not None:
                self.stop_all(reclaim=reclaimed(lost))
                raise lost
            if all(job.exit_code is not None for job in self.jobs):
                return
            # Rank 0 failed (a rendezvous that never completed, a crash): the job is over.
            rank0_failed = bool(self.jobs[0].exit_code) and not self.jobs[0].stopped
            if not stopping and (rank0_failed or time.monotonic() > deadline):
                if not rank0_failed:
                    waiting = ", ".join(str(j.index) for j in self.jobs if j.exit_code is None)
                    self.say(f"node {waiting} still runs {grace_s:.0f} s after rank 0: stopping it")
                stopping = True
                self.stop_all()  # what cannot be stopped is lost after --ssh-lost-after
                continue
            time.sleep(0.5)

    def stop_all(self, *, reclaim: bool = False) -> None:
        """Stop the job on every node that may run it (TERM, then KILL); best effort.
        `reclaim`: a node's spot reclaim ends the attempt; KILL waits, on a node whose agent
        saw the notice, for the deadline it left (remote.stop_script)."""

        def stop(job: NodeJob) -> None:
            if not job.started or job.exit_code is not None:
                return
            lost = self.lost
            if lost is not None and lost.index == job.index and lost.state is None:
                return  # silent or its job gone (SSH said so): nothing there to stop or wait for
            try:
                out = shell.call_ok(
                    job.transport,
                    remote.stop_script(job.spec.run_id, reclaim=reclaim),
                    what=f"stopping the job on node {job.index}",
                    timeout=remote.stop_timeout(reclaim),
                    retry_s=10,
                )
            except OrchError as exc:
                self.say(f"could not stop the job on node {job.index}: {exc.one_line()}")
                return
            parsed = remote.parse_exit_line(out)
            if parsed:
                job.exit_code, job.step = parsed
                job.stopped = True

        parallel(stop, self.jobs)

    # ---------------------------------------------------------------------- results

    def exit_code(self) -> int:
        """The worst node's status (see the module's docstring)."""
        for by_itself in (True, False):
            for job in self.jobs:
                if job.exit_code and job.stopped != by_itself:
                    return job.exit_code
        if any(job.exit_code is None for job in self.jobs):
            return EXIT_FAILURE
        return 0

    def failure_line(self, join_timeout_s: int) -> str | None:
        """Which node failed first and how; a rendezvous that never completed says so."""
        code = self.exit_code()
        if code == 0:
            return None
        culprit = next((j for j in self.jobs if j.exit_code == code), self.jobs[0])
        line = f"node {culprit.index}: {culprit.step or 'the job'} exited {code}"
        if any(self._rendezvous_failed(job) for job in self.jobs if job.exit_code):
            line += (
                f"; the rendezvous did not complete within {join_timeout_s} s (a node never"
                " joined: see its log)"
            )
        return line

    def _rendezvous_failed(self, job: NodeJob) -> bool:
        rd = remote.run_dir(job.spec.run_id)
        patterns = " ".join(f"-e {shlex.quote(p)}" for p in RENDEZVOUS_ERRORS)
        script = f"tail -c 65536 {rd}/output.log 2>/dev/null | grep -q -F {patterns}"
        try:
            return job.transport.run(script, STATUS_TIMEOUT_S, on_stdin=True).exit_code == 0
        except (Unreachable, OrchError):
            return False

    def fetch_logs(self, folder: Path) -> list[str]:
        """Every reachable node's output.log into `folder`/node-I.log; the paths fetched."""
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)

        def fetch(job: NodeJob) -> str | None:
            if not job.remote_dir:
                return None
            home = job.remote_dir[: -len(f"/{remote.work_dir(job.spec)}")]
            source = f"{home}/{remote.RUNS_DIR}/{job.spec.run_id}/output.log"
            target = folder / f"node-{job.index}.log"
            try:
                if sync.pull_file(job.transport, source, target):
                    job.log = str(target)
                    return job.log
            except OrchError as exc:
                self.say(f"node {job.index}'s log could not be fetched: {exc.one_line()}")
            return None

        return [path for path in parallel(fetch, self.jobs) if path]


def stop_everywhere(
    pairs: list[tuple[ClusterNode, SshTransport]], run_id: str, retry_s: float
) -> list[tuple[int, str | None, str | None]]:
    """Stop run `run_id` on every node at once (`orch stop` of a cluster box): per node, its
    index, "exit N" or "it was not running", or the error that kept it from being stopped."""

    def stop(pair: tuple[ClusterNode, SshTransport]) -> tuple[int, str | None, str | None]:
        node, transport = pair
        try:
            out = shell.call_ok(
                transport,
                remote.stop_script(run_id),
                what=f"stopping the run on node {node.index}",
                timeout=remote.STOP_GRACE_S + 15,
                retry_s=retry_s,
            )
        except OrchError as exc:
            return node.index, None, exc.one_line()
        parsed = remote.parse_exit_line(out)
        return node.index, f"exit {parsed[0]}" if parsed else "it was not running", None

    return parallel(stop, pairs)
