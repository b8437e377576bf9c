"""`orch run`: from a working directory to a finished job, and nothing left running.

    box (up from the plan, or an existing one) -> check -> prepare -> sync -> launch detached
      -> stream output (reconnecting) while the cloud is watched -> status -> fetch -> down

Every way out tears down: the command fails, setup fails, sync fails, orch is cancelled
(SIGINT, SIGTERM, SIGHUP: the job is stopped and its outputs fetched first), SSH is lost for
good. When the cloud takes the box back and --spot-recovery allows, the box is replaced (the
region's other zones first, then the plan's alternatives; on-demand after N spot losses with
--fallback-on-demand), the latest checkpoint is restored there and the command runs again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

from orchestrator import clouds
from orchestrator.catalog.loader import price_of
from orchestrator.check.untrusted import printable
from orchestrator.clouds.base import CloudError
from orchestrator.clouds.values import InstanceState
from orchestrator.errors import EXIT_FAILURE, EXIT_INTERRUPTED, OrchError, UsageError
from orchestrator.plan import Candidate, Plan
from orchestrator.provision import launch, node_replace, teardown
from orchestrator.provision.boxes import Box, box_exists, load_box
from orchestrator.provision.cluster import cluster_nodes, node_count
from orchestrator.provision.node_replace import NodeNotReplaced, can_replace_node
from orchestrator.provision.request import UpRequest
from orchestrator.provision.terraform import Interrupted
from orchestrator.run import checkpoints, on_cluster, recovery, remote, shell, sync, terminal
from orchestrator.run import record as records
from orchestrator.run.cluster_job import NodeLost
from orchestrator.run.launcher import resolve_launcher
from orchestrator.run.recovery import UNREACHABLE, RecoveryPolicy
from orchestrator.run.report import Attempt, RunReport, iso
from orchestrator.run.signals import Cancelled, cancellable, deferred
from orchestrator.run.spec import RunSpec
from orchestrator.run.stream import LogFollower, SshLost, StreamStopped
from orchestrator.run.watch import BoxWatch

Say = Callable[[str], None]


class BoxLost(OrchError):
    """The cloud took the box back (or it stopped) while the job ran; on a cluster, one node
    went (`node`: its index; state "unreachable" when SSH, not the cloud, says so)."""

    def __init__(self, state: InstanceState, node: int | None = None, message: str = ""):
        why = state.reason or state.state
        super().__init__(message or f"the box's instance is {state.state} ({why})")
        self.state = state
        self.node = node

    @property
    def recoverable(self) -> bool:
        """A spot reclaim, or a cluster node that stopped answering (run/recovery.py)."""
        return recovery.recoverable(self.state, self.node)


@dataclass(slots=True)
class RunRequest:
    spec: RunSpec
    box_name: str
    up_options: UpRequest | None = None  # None: run on the existing box `box_name`
    keep: bool = False  # keep a box this run created
    detach: bool = False
    check: bool = True
    check_timeout: float = 900.0
    ssh_config: str | None = None
    spot_recovery: int = 0
    fallback_on_demand: bool = False
    watch_interval_s: float = 15.0
    ssh_lost_after_s: float = 300.0
    launcher: str = "auto"  # auto | torchrun | none (run/launcher.py)
    join_timeout_s: int = 600  # torchrun's rendezvous join_timeout

    @property
    def plan(self) -> Plan | None:
        return self.up_options.plan if self.up_options else None

    def __post_init__(self) -> None:
        if self.spot_recovery < 0 or self.spot_recovery > 20:
            raise UsageError("--spot-recovery takes 0 to 20 recoveries")
        if self.spot_recovery and self.plan is None:
            raise UsageError("--spot-recovery needs a plan (--plan or plan options), not --box")
        if self.detach and self.spot_recovery:
            raise UsageError("--detach cannot recover from spot losses: orch is not there")
        if not 0.2 <= self.watch_interval_s <= 3600:
            raise UsageError("--watch-interval must be between 0.2 s and 1 hour")


def _agent_source() -> str:
    # A module of this package (shipped in wheels too); the box runs it as a script.
    return (Path(__file__).parents[1] / "boxside" / "agent.py").read_text()


class Run:
    """One `orch run`; `execute()` returns its report (exit_code is the command's status)."""

    def __init__(self, request: RunRequest, say: Say, progress: Say | None, sink: BinaryIO):
        self.request = request
        self.spec = request.spec
        self.say = say
        self.progress = progress
        self.sink = sink
        self.box: Box | None = None
        self.created = request.plan is not None
        self.report = RunReport(run_id=self.spec.run_id, box=request.box_name, exit_code=1)
        self.job_started = False  # on the current box
        self.remote_dir = ""  # the job's working directory on the box (absolute)
        self.detached = False
        self.cluster: Any = None  # on a cluster box: the attempt's cluster_job.ClusterJob
        self.world: tuple[int, int] | None = None  # (nodes, GPUs per node) of the first attempt

    # ------------------------------------------------------------------------------ main

    def execute(self) -> RunReport:
        with cancellable():
            stop_job = False
            unexpected: Exception | None = None
            try:
                self._run()
            except (Cancelled, Interrupted) as exc:
                self.report.exit_code = EXIT_INTERRUPTED
                self.report.error = exc.message
                self._close_attempt("cancelled", exc.message)
                stop_job = True
            except OrchError as exc:
                self.report.exit_code = exc.exit_code if exc.exit_code != 0 else EXIT_FAILURE
                self.report.error = exc.one_line()
                lost = isinstance(exc, (BoxLost, SshLost))
                self._close_attempt("lost" if lost else "failed", exc.message)
                stop_job = not isinstance(exc, BoxLost)
            except Exception as exc:  # here, not on the box (a full disk: OSError); raised after
                unexpected, stop_job = exc, True
                self.report.exit_code, self.report.error = EXIT_FAILURE, str(exc)
                self._close_attempt("failed", str(exc))
            self._teardown(stop_job=stop_job)
        terminal.finish(self.sink)  # what a terminal sink held back of the last line
        if unexpected is not None:
            raise unexpected
        return self.report

    def _run(self) -> None:
        self.box = self._first_box()
        policy = RecoveryPolicy(self.request.spot_recovery, self.request.fallback_on_demand)
        used = 0
        while True:
            try:
                self._attempt()
                return
            except BoxLost as lost:
                self._close_attempt(
                    "reclaimed" if lost.state.spot_reclaimed else "lost", lost.message
                )
                self.report.attempts[-1].lost_node = lost.node
                # Only the spot service's reclaim (or a cluster node gone silent) is recovered
                # from: a box someone terminated or stopped was meant to go.
                next_one = policy.after_loss(used, lost.state, lost.node)
                if next_one is None:
                    raise
                used = next_one.number
                self.box = self._recover(lost, next_one)

    # ------------------------------------------------------------------------- the box

    def _first_box(self) -> Box:
        request = self.request
        if request.plan is None:
            box = load_box(request.box_name)
            if box.state != "up":
                raise UsageError(f"box {box.name} is {box.state}, not up", hint="see `orch status`")
            zone = str((box.outputs or {}).get("availability_zone") or "")
            self._open_attempt(box.candidate, time.time(), zone)
            self._set_on_demand_price(box.candidate)
            return box
        assert request.up_options is not None
        return self._launch(request.up_options)

    def _recover(self, lost: BoxLost, step: recovery.Recovery) -> Box:
        """The lost node alone when it can be (run/recovery.py), else a new box or cluster;
        the lost attempt records which (`recovery`, and why not the node alone)."""
        assert self.box is not None
        box, attempt, nodes = self.box, self.report.attempts[-1], node_count(self.box)
        alone = recovery.replaces_node(
            step, box.candidate.market, lost.node, self.created and can_replace_node(box)
        )
        self.say(
            recovery.describe(step, box.name, lost.message, nodes, lost.node if alone else None)
        )
        if alone and lost.node is not None:
            try:
                replaced = self._replace_node(lost.node)
                attempt.recovery = recovery.NODE_REPLACED
                return replaced
            except NodeNotReplaced as exc:
                attempt.recovery_note = exc.one_line()
                self.say(f"{exc.one_line()}; re-provisioning the whole cluster ({nodes} nodes)")
        replaced = self._replace_box(lost, on_demand=step.on_demand)
        attempt.recovery = recovery.BOX_REPLACED if nodes == 1 else recovery.CLUSTER_REPROVISIONED
        return replaced

    def _replace_node(self, index: int) -> Box:
        """Node `index` of the cluster anew, in its Terraform root (provision/node_replace.py)."""
        assert self.box is not None
        zone = str((self.box.outputs or {}).get("availability_zone") or "")
        self.cluster = None
        started = time.time()
        box = node_replace.replace_node(self.box.name, index, self.say, self.progress)
        self._open_attempt(box.candidate, started, zone)
        self.job_started = False
        return box

    def _replace_box(self, lost: BoxLost, *, on_demand: bool) -> Box:
        request = self.request
        assert request.up_options is not None and self.box
        zone = str((self.box.outputs or {}).get("availability_zone") or "")
        if not lost.state.lost and lost.node is None:
            # Reclaimed but still running (the notice period): stop the job there, so it and
            # the agent save a checkpoint, before the box goes; it gets the time the notice
            # leaves. (A cluster's job was stopped on every node as soon as the node was lost.)
            self._stop_and_fetch(self.box, fetch=False, reclaim=lost.state.spot_reclaimed)
        self.cluster = None
        teardown.down(self.box.name, self.box.state_url, self.say, self.progress, _forget)
        plan = recovery.recovery_plan(request.up_options.plan, self.box.candidate, on_demand)
        again = replace(request.up_options, plan=plan, avoid_zones=(zone,) if zone else ())
        box = self._launch(again.for_box())
        self.job_started = False
        return box

    def _launch(self, up: UpRequest) -> Box:
        """Create a box and open its attempt with what `up` launched (when `up` fails: with
        the candidate its record says it tried last)."""
        started = time.time()
        try:
            launched = launch.up(up, self.say, self.progress)
        except BaseException:
            tried = load_box(up.name).candidate if box_exists(up.name) else up.plan.choice
            self._open_attempt(tried, started, "")
            self._set_on_demand_price(tried)
            raise
        self._open_attempt(launched.candidate, started, launched.zone, launched.price_per_hour)
        self._set_on_demand_price(launched.candidate)
        return launched.box

    def _set_on_demand_price(self, candidate: Candidate) -> None:
        if len(self.report.attempts) > 1:
            return  # the run's first box sets it: the job on one on-demand box
        self.report.on_demand_price_per_hour = price_of(
            candidate.cloud, candidate.instance_type, candidate.region
        )

    # ------------------------------------------------------------------------ attempts

    def _open_attempt(
        self,
        candidate: Candidate,
        started: float,
        zone: str,
        price_per_hour: float | None = None,
    ) -> None:
        if price_per_hour is None:
            price_per_hour = candidate.price_per_hour
        self.report.attempts.append(
            Attempt(
                number=len(self.report.attempts) + 1,
                cloud=candidate.cloud,
                region=candidate.region,
                instance_type=candidate.instance_type,
                market=candidate.market,
                zone=zone,
                price_per_hour=price_per_hour,
                started=started,
            )
        )

    def _close_attempt(self, outcome: str, reason: str = "", exit_code: int | None = None) -> None:
        if not self.report.attempts:
            return
        attempt = self.report.attempts[-1]
        if attempt.ended is not None:
            return
        attempt.ended = time.time()
        attempt.outcome, attempt.reason, attempt.exit_code = outcome, reason, exit_code

    # --------------------------------------------------------------------- one attempt

    def _attempt(self) -> None:
        box = self.box
        assert box is not None
        attempt = self.report.attempts[-1]
        nodes = cluster_nodes(box)
        if len(nodes) != node_count(box):  # a cluster plan, but one box came up (or the reverse)
            raise OrchError(
                f"box {box.name} was planned as {node_count(box)} nodes but its record lists"
                f" {len(nodes)}: it cannot run the job with its planned world size"
            )
        if len(nodes) > 1:
            self._attempt_on_cluster(box, attempt)
            return
        transport, started = self._start_on_box(box, nodes, attempt)
        self.job_started = True
        attempt.job_started = time.time()
        mode = started.split()[-1] if started.split() else "?"
        self._save_record("running")
        self.say(
            f"run {self.spec.run_id} started on box {box.name} ({mode}); attempt {attempt.number}"
        )
        if self.request.detach:
            self.detached = True
            self._close_attempt("detached")
            self.report.exit_code = 0
            return
        try:
            self._follow(box, transport)
            status = self._final_status(transport)
            if status.reclaim_stopped:
                raise self._stopped_for_reclaim(transport, attempt)
        except BoxLost:
            raise
        except OrchError as exc:
            self._raise_if_lost(box, exc)
            raise
        code = status.exit_code if status.exit_code is not None else EXIT_FAILURE
        final = code
        if self.spec.store:  # a lost last checkpoint is a failed run, whatever CMD said
            saved, final, self.report.error = checkpoints.settle(transport, self.spec.run_id, code)
            attempt.checkpoint = saved.to_dict()
        self.report.exit_code = final
        step = status.step
        outcome = "completed" if code == 0 else "failed"
        full = f"; the box's disk is full ({status.free_kib} KiB free)" if status.disk_full else ""
        self._close_attempt(outcome, "" if code == 0 else f"{step} exited {code}{full}", code)
        if code != 0:
            self.say(
                f"{'setup' if step == 'setup' else 'the command'} exited {code}"
                + (f" ({step})" if step not in ("cmd", "setup") else "")
                + full
            )
        self._fetch(transport)
        self._save_record("done", exit_code=final)

    def _start_on_box(self, box: Box, nodes: list[Any], attempt: Attempt) -> tuple[Any, str]:
        """Check, prepare, sync and start the job on one box: (its transport, the start line)."""
        topology = on_cluster.topology_of(box, nodes, self.spec.run_id, self.request.join_timeout_s)
        launcher = resolve_launcher(self.request.launcher, 1, topology.gpus_per_node)
        on_cluster.refuse_env_clash(self.spec, topology, launcher)  # before any SSH
        try:
            if self.request.check:
                self._check(box)
            transport = shell.ssh_transport(box, self.request.ssh_config)
            ports = on_cluster.rendezvous_ports(transport, launcher, 1)
            (spec,) = on_cluster.node_specs(self.spec, replace(topology, ports=ports), launcher)
            agent = _agent_source() if self.spec.store else None
            prepared = shell.call_ok(
                transport, remote.prepare_script(spec, agent), what="preparing the run"
            )
            self.remote_dir = _prepared_dir(prepared)
            self.say(f"syncing {self.spec.workdir} to box {box.name}")
            sync.push(transport, self.spec.workdir, self.remote_dir, self.spec.excludes,
                      self.spec.includes, self.say)  # fmt: skip
            launch = remote.LaunchEnv(
                attempt=attempt.number,
                cloud=box.cloud,
                store_url=self.spec.store.for_run(self.spec.run_id) if self.spec.store else None,
                checkpoint_interval_s=self.spec.checkpoint_interval_s,
            )
            started = shell.call_ok(
                transport,
                remote.launch_script(spec, launch),
                what="starting the job",
                retry_s=30,
            )
        except OrchError as exc:
            self._raise_if_lost(box, exc)
            raise
        return transport, started

    def _attempt_on_cluster(self, box: Box, attempt: Attempt) -> None:
        try:
            on_cluster.attempt_on_cluster(
                self, box, attempt, _agent_source() if self.spec.store else None
            )
        except NodeLost as lost:
            state = lost.state or InstanceState(UNREACHABLE, lost.why)
            raise BoxLost(state, node=lost.index, message=lost.message) from None

    def _check(self, box: Box) -> None:
        from orchestrator.check.untrusted import printable
        from orchestrator.check.verify import check_box

        self.say(f"checking the GPUs of box {box.name}")
        report = check_box(
            box, ssh_config=self.request.ssh_config, timeout=self.request.check_timeout
        )
        if not report.ok:
            problems = "; ".join(printable(c.message) for c in report.failures())
            raise OrchError(f"box {box.name} does not match its plan: {problems}")

    def _follow(self, box: Box, transport: Any) -> None:
        follower = LogFollower(
            transport,
            self.spec.run_id,
            self.sink,
            self.say,
            lost_after_s=self.request.ssh_lost_after_s,
        )

        def on_lost(state: InstanceState) -> None:
            follower.stop()

        with BoxWatch(box, self.request.watch_interval_s, on_lost, self.say) as watch:
            try:
                follower.follow()
            except StreamStopped:
                if watch.lost is not None:
                    raise BoxLost(watch.lost) from None
                raise OrchError("the output stream was stopped") from None
            except SshLost as exc:
                self._raise_if_lost(box, exc)
                raise

    def _final_status(self, transport: Any) -> remote.JobStatus:
        for _ in range(50):
            text = shell.call_ok(
                transport, remote.status_script(self.spec.run_id), what="reading the job's status"
            )
            status = remote.parse_status(text)
            if status.done:
                return status
            if not status.found or not status.alive:
                raise OrchError("the job ended without an exit status (was the box rebooted?)")
            time.sleep(0.2)  # tail saw the wrapper go; its last rename is a moment away
        raise OrchError("the job's wrapper is still running after its output ended")

    def _stopped_for_reclaim(self, transport: Any, attempt: Attempt) -> BoxLost:
        """The box's agent saw a spot notice and stopped the job itself (remote.py's
        reclaim_stop): the attempt ends as the spot service's reclaim, whatever the job's exit
        status, as when orch stops it on the reclaim (on EC2 orch sees none before the instance
        shuts down). Its final upload is over (the exit status is written after it)."""
        if self.spec.store:
            attempt.checkpoint = checkpoints.read_outcome(transport, self.spec.run_id).to_dict()
        return BoxLost(recovery.NOTICE_STOPPED, message=recovery.NOTICE_STOPPED_WHY)

    def _raise_if_lost(self, box: Box, exc: OrchError) -> None:
        """After a failure talking to the box: if the cloud says it is gone, that is why."""
        instance_id = (box.outputs or {}).get("instance_id")
        if not instance_id:
            return
        try:
            state = clouds.instance_state_of(clouds.get(box.cloud), box.region, str(instance_id))
        except CloudError:
            return
        if recovery.gone(state):
            raise BoxLost(state) from exc

    # ------------------------------------------------------------------------ the end

    def _fetch(self, transport: Any) -> None:
        if not self.spec.fetch:
            return
        self.say(f"fetching {', '.join(self.spec.fetch)}")
        self.report.fetched = sync.pull(
            transport, self.remote_dir, self.spec.fetch, self.spec.workdir, self.say
        )

    def _teardown(self, *, stop_job: bool) -> None:
        with deferred(self.say):
            box = self.box
            if box is not None and stop_job and self.job_started and not self.detached:
                self._stop_and_fetch(box)
            if not self.created:
                return
            name = self.request.box_name
            if self.request.keep or self.detached:
                expires = box.expires_at if box is not None else None
                self.say(
                    f"box {name} is kept: `orch down {name}` destroys it"
                    + ("" if expires is None else f" (it expires {expires})")
                )
                return
            # By name, not by the Box in hand: an `up` that failed or was interrupted half-way
            # (the first box or a replacement) left a record and maybe resources, but no Box.
            if not box_exists(name):
                return
            state_url = self.request.up_options.state_url if self.request.up_options else None
            try:
                teardown.down(name, state_url, self.say, self.progress, _forget)
                self.report.destroyed = True
            except OrchError as exc:
                # It may quote Terraform's diagnostic (the cloud's words): escaped.
                self.say(f"destroying box {name} failed: {printable(exc.one_line(), None)}")
                if self.report.exit_code == 0:
                    self.report.exit_code = exc.exit_code or EXIT_FAILURE
                self.report.error = self.report.error or exc.one_line()

    def _stop_and_fetch(self, box: Box, *, fetch: bool = True, reclaim: bool = False) -> None:
        """Stop the job on the box (TERM, then KILL), then fetch what it wrote; best effort.
        `reclaim`: the spot service takes the box, KILL waits for the notice's deadline."""
        try:
            transport = shell.ssh_transport(box, self.request.ssh_config)
            self.say(f"stopping run {self.spec.run_id} on box {box.name}")
            if self.cluster is not None:  # every node; rank 0's outputs are fetched
                self.cluster.stop_all()
                transport = self.cluster.jobs[0].transport
            out = shell.call_ok(
                transport,
                remote.stop_script(self.spec.run_id, reclaim=reclaim),
                what="stopping the job",
                timeout=remote.stop_timeout(reclaim),
                retry_s=20,
            )
            parsed = remote.parse_exit_line(out)
            if parsed and self.report.attempts:
                self.report.attempts[-1].exit_code = parsed[0]
            if fetch:
                self._fetch(transport)
            self._save_record("stopped")
        except OrchError as exc:
            self.say(f"could not stop or fetch from box {box.name}: {exc.one_line()}")
        except OSError as exc:  # here (the record, a fetched file): the box must still go
            self.say(f"after stopping run {self.spec.run_id}: {exc}")

    def _save_record(self, state: str, exit_code: int | None = None) -> None:
        if self.box is None:
            return
        records.save_run(
            self.box,
            {
                **self.spec.to_record(),
                "box": self.box.name,
                "created_box": self.created,
                "keep": self.request.keep,
                "state": state,
                "exit_code": exit_code,
                "attempt": len(self.report.attempts),
                "remote_dir": self.remote_dir,
                "saved_at": iso(time.time()),
            },
        )


def _prepared_dir(output: str) -> str:
    try:
        return remote.prepared_dir(output)
    except ValueError as exc:
        raise OrchError(f"preparing the run: {exc}") from None


def _forget(record: dict[str, Any], say: Say) -> object:
    """A box's CI runner registration, removed once the box is gone (provision.teardown)."""
    from orchestrator.ci_runner import forget

    return forget(record, say)
