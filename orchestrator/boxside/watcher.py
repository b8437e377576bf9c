"""`watch`, orch's checkpoint agent's long-running command: it uploads DIR when it changes, at
once on a spot interruption notice or a rebalance recommendation, and once more when the
training process exits or the agent is stopped.

It writes its outcome to STATEDIR/agent.json when it ends: {"final_upload": "ok" or
"failed", "checkpoint": the last one it committed, "failed_rounds", "error"}; orch reads it.

STATEDIR also gets last_upload.json, interruption.json and rebalance.json as they happen,
and with a spot notice whose reclaim time is usable, reclaim_deadline: the Unix second by which
the job must have stopped (cloud_metadata.stop_deadline), which orch's stop on a reclaim reads
(orchestrator/run/remote.py's stop_script).

With --pid (the wrapper's job) and such a deadline, the agent also stops the job itself, as
orch's stop on a reclaim would (`JobStop`): orch may never see the notice in time (EC2 shows
the reclaim only once the instance is shutting down), and the box's shutdown would kill the
job, and this agent, without the final upload. STATEDIR/reclaim_stop then says so.

Shipped with agent.py (orchestrator/boxside/): standard library only, Python 3.8.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import tempfile
import threading
import time

try:  # on the box: its siblings lie next to this file (the script's folder is on sys.path)
    from agent_log import one_line, say, utc_now, warn
    from checkpoint_store import TMP_PREFIX, Layout, scan_dir, seq_name, store_signature, upload
    from cloud_metadata import Metadata, stop_deadline
except ImportError:  # imported as orchestrator.boxside.watcher (orch's own tests)
    from orchestrator.boxside.agent_log import one_line, say, utc_now, warn
    from orchestrator.boxside.checkpoint_store import (
        TMP_PREFIX,
        Layout,
        scan_dir,
        seq_name,
        store_signature,
        upload,
    )
    from orchestrator.boxside.cloud_metadata import Metadata, stop_deadline

# Tries of the last upload when the training process has exited or the agent is stopped.
FINAL_TRIES = 3
# How often `watch` looks at the training process and at signals between rounds.
TICK_S = 0.1
# STATEDIR's file with the reclaim's stop deadline (digits only: remote.py's stop_script).
DEADLINE_FILE = "reclaim_deadline"
# STATEDIR's file written when the agent stops the job on a spot notice, before its TERM: the
# Unix second of its KILL (digits only). orch's stop_script sends no second TERM when it is
# there (the job's TERM handler may be running) and, on a reclaim, waits for the job's end and
# the final upload; status_script reports it, and orch ends the attempt as reclaimed.
STOPPED_FILE = "reclaim_stop"
# The systemd unit's name the launch wrote to STATEDIR/unit (remote.py: orch-RUN_ID).
UNIT_NAME = re.compile(r"orch-[A-Za-z0-9._-]{1,200}")

# Set by SIGTERM/SIGINT, or with --pid by SIGUSR1 (the wrapper: the job has exited). `watch`
# takes these signals before it opens the store (boto3's import alone takes a second): a stop
# that comes while it starts still ends in the final upload.
STOP_REQUESTED = [False]
# Set by SIGTERM with --pid: the job is being stopped. A stop TERMs the job's whole process
# group (its systemd unit: every process), this agent too; the job may still write its last
# checkpoint on that TERM, so the final upload waits for the job's end (SIGUSR1 or PID gone).
JOB_STOPPING = [False]


def request_stop(signum: int, frame: object) -> None:
    STOP_REQUESTED[0] = True


def job_stopping(signum: int, frame: object) -> None:
    JOB_STOPPING[0] = True


def write_text(path: str, text: str) -> None:
    """Write a file atomically (readers see the old or the new one, never half)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=directory)
    with os.fdopen(handle, "w") as sink:
        sink.write(text)
    os.replace(tmp, path)


def write_json(path: str, value: dict) -> None:
    """Write a JSON file atomically."""
    write_text(path, json.dumps(value, sort_keys=True) + "\n")


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    # An exited process that its parent has not reaped yet still answers signal 0.
    try:
        with open(f"/proc/{pid}/stat") as source:
            state = source.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def process_table() -> dict[int, tuple[int, int]]:
    """Every process's (parent pid, process group), from /proc/PID/stat (proc(5))."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as source:
                fields = source.read().rsplit(")", 1)[1].split()
            table[int(name)] = (int(fields[1]), int(fields[2]))
        except (OSError, IndexError, ValueError):
            continue
    return table


def group_members(pgid: int) -> set[int]:
    """The processes of process group `pgid`."""
    return {pid for pid, (_, group) in process_table().items() if group == pgid}


def this_agent() -> set[int]:
    """This agent and its descendants (an `aws` CLI upload: ORCH_AGENT_S3_CLIENT=cli)."""
    table, found = process_table(), {os.getpid()}
    grown = True
    while grown:
        more = {pid for pid, (parent, _) in table.items() if parent in found} - found
        found |= more
        grown = bool(more)
    return found


def unit_members(unit: str | None) -> set[int]:
    """The processes of systemd unit UNIT.service when this agent runs in it: its own cgroup's
    cgroup.procs (cgroup v2, /proc/self/cgroup's "0::PATH" line; a unit's processes are its
    cgroup's, systemd.resource-control(5)). None elsewhere (a login session's scope holds more
    than the job)."""
    if unit is None:
        return set()
    try:
        with open("/proc/self/cgroup") as source:
            lines = source.read().splitlines()
        for line in lines:
            hierarchy, _, path = line.partition("::")
            if hierarchy == "0" and path.rsplit("/", 1)[-1] == f"{unit}.service":
                with open(f"/sys/fs/cgroup{path}/cgroup.procs") as procs:
                    return {int(pid) for pid in procs.read().split() if pid.isdigit()}
    except OSError:
        pass
    return set()


class JobStop:
    """The agent's own stop of the job on a spot notice, the one orch's stop_script makes on a
    reclaim: TERM to the job (the wrapper's process group, and its systemd unit's processes),
    then KILL at the deadline to what of it still runs, except the wrapper (it writes the
    job's exit status) and this agent (its final upload follows the job's end)."""

    def __init__(self, state_dir: str, wrapper: int) -> None:
        self.state_dir, self.wrapper = state_dir, wrapper
        self.unit = self.read_unit()

    def read_unit(self) -> str | None:
        try:
            with open(os.path.join(self.state_dir, "unit")) as source:
                name = source.read(256).strip()
        except OSError:
            return None
        return name if UNIT_NAME.fullmatch(name) else None

    def start(self, kill_at: int) -> bool:
        """TERM the job now, KILL it at `kill_at` (Unix seconds); False if it cannot."""
        marker = os.path.join(self.state_dir, STOPPED_FILE)
        try:
            pgid = os.getpgid(self.wrapper)
            if pgid != self.wrapper:
                # The wrapper leads its group in both launches (setsid; systemd.exec(5)
                # SameProcessGroup= defaults to false). Another --pid's group is not the job's.
                raise OSError(f"process {self.wrapper} leads no process group of its own")
            # Before the TERM: a stop of orch's that comes meanwhile sends none of its own.
            write_text(marker, f"{kill_at}\n")
        except OSError as exc:
            warn(f"cannot stop the job for the reclaim: {exc}")
            return False
        try:
            os.killpg(pgid, signal.SIGTERM)  # this agent too: JOB_STOPPING, it waits
        except OSError as exc:
            warn(f"cannot stop the job for the reclaim: {exc}")
            with contextlib.suppress(OSError):
                os.remove(marker)
            return False
        for pid in unit_members(self.unit) - group_members(pgid) - {os.getpid()}:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        later = threading.Thread(target=self.kill_later, args=(kill_at, pgid), daemon=True)
        later.start()
        return True

    def kill_later(self, kill_at: int, pgid: int) -> None:
        """At `kill_at`, unless the job has exited (the wrapper's SIGUSR1): KILL what is left."""
        while not STOP_REQUESTED[0] and time.time() < kill_at:
            time.sleep(max(0.0, min(TICK_S, kill_at - time.time())))
        if STOP_REQUESTED[0]:
            return
        spared = this_agent() | {self.wrapper}
        left = (group_members(pgid) | unit_members(self.unit)) - spared
        for pid in sorted(left):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        say(f"the job still ran at the reclaim deadline: killed {len(left)} process(es)")


class Watcher:
    """Uploads DIR when it changes, at once on a spot notice, and once more at the end."""

    def __init__(self, store, layout: Layout, args: argparse.Namespace) -> None:
        self.store = store
        self.layout = layout
        self.dir = args.dir
        self.state_dir = args.state_dir
        self.interval = args.interval
        self.notice_poll = args.notice_poll
        self.pid = args.pid
        self.cloud = args.cloud
        base = os.environ.get("ORCH_AGENT_METADATA_URL", "").strip() or None
        self.metadata = Metadata(args.cloud, base)
        self.notice = None
        self.failed_rounds, self.last_error, self.last_seq = 0, None, None
        self.rebalance = None
        # What the store already holds (a restored DIR is not uploaded again).
        self.signature = store_signature(store, layout)

    def finished(self) -> bool:
        return STOP_REQUESTED[0] or (self.pid is not None and not process_alive(self.pid))

    def run(self) -> int:
        os.makedirs(self.state_dir, exist_ok=True)
        now = time.monotonic()
        next_upload, next_poll = now + self.interval, now
        stopping_said = False
        while not self.finished():
            if JOB_STOPPING[0] and not stopping_said:
                say("the job is being stopped: the final upload follows its exit")
                stopping_said = True
            now = time.monotonic()
            urgent = False
            if self.notice is None and now >= next_poll:
                next_poll = now + self.notice_poll
                urgent = self.poll_notice() or self.poll_rebalance()
            if urgent or now >= next_upload:
                ok = self.round()
                # A failed round after a notice is tried again at the next notice poll.
                wait = self.interval if ok or not urgent else min(self.interval, self.notice_poll)
                next_upload = time.monotonic() + wait
            time.sleep(TICK_S)
        return self.finish()

    def finish(self) -> int:
        for attempt in range(FINAL_TRIES):
            if self.round():
                self.record_outcome(True)
                return 0
            if attempt + 1 < FINAL_TRIES:
                time.sleep(1.0)
        warn("the final upload failed; the store keeps the previous checkpoint")
        self.record_outcome(False)
        return 1

    def record_outcome(self, final_ok: bool) -> None:
        """STATEDIR/agent.json: how the agent ended, for orch's report."""
        record = {
            "final_upload": "ok" if final_ok else "failed",
            "checkpoint": None if self.last_seq is None else seq_name(self.last_seq),
            "failed_rounds": self.failed_rounds,
            "error": self.last_error,
            "at": utc_now(),
        }
        self.write_state("agent.json", record)

    def poll_notice(self) -> bool:
        """Ask for a spot interruption notice; True when one has just appeared."""
        notice = self.metadata.notice()
        if notice is None:
            return False
        self.notice = notice
        deadline = stop_deadline(notice["time"], time.time())
        record = dict(notice, cloud=self.cloud, seen_at=utc_now(), stop_by=deadline)
        self.write_state("interruption.json", record)
        if deadline is not None:
            self.write_deadline(deadline)
        when = notice["time"] or "an unknown time"
        say(f"spot interruption notice ({self.cloud}: {notice['action']} at {when}); uploading now")
        if deadline is not None and self.pid is not None and not STOP_REQUESTED[0]:
            if JOB_STOPPING[0]:  # orch's stop came first (its TERM reached this agent too)
                say("the job is already being stopped: no TERM of the agent's own")
            else:
                self.stop_for_reclaim(self.pid, deadline)
        return True

    def stop_for_reclaim(self, wrapper: int, deadline: int) -> None:
        """Stop the job now, KILL at `deadline` (JobStop). orch's own stop may come too late or
        never: EC2 shows the reclaim only once the instance is shutting down, two minutes after
        its notice (spot/instance-action's "time"),
        https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html
        ; ECS about five (instance/spot/termination-time),
        https://www.alibabacloud.com/help/en/ecs/user-guide/best-practices-for-preemptible-instances
        . The shutdown would kill the job and this agent without the final upload."""
        if JobStop(self.state_dir, wrapper).start(deadline):
            at = time.strftime("%H:%M:%SZ", time.gmtime(deadline))
            say(f"stopping the job for the reclaim: TERM now, KILL at {at} if it still runs")

    def write_deadline(self, deadline: int) -> None:
        """STATEDIR/reclaim_deadline, atomically: one line of digits."""
        try:
            write_text(os.path.join(self.state_dir, DEADLINE_FILE), f"{deadline}\n")
        except OSError as exc:
            warn(f"cannot write {DEADLINE_FILE}: {exc}")

    def write_state(self, name: str, value: dict) -> None:
        """Write STATEDIR/NAME; a failure is a warning only (the uploads matter more)."""
        try:
            write_json(os.path.join(self.state_dir, name), value)
        except OSError as exc:
            warn(f"cannot write {name}: {exc}")

    def poll_rebalance(self) -> bool:
        """Ask for a rebalance recommendation; True when one has just appeared."""
        if self.rebalance is not None:
            return False
        when = self.metadata.rebalance()
        if when is None:
            return False
        self.rebalance = when
        record = {"cloud": self.cloud, "notice_time": when, "seen_at": utc_now()}
        self.write_state("rebalance.json", record)
        say(f"rebalance recommendation ({self.cloud}, {when or 'no time given'}); uploading now")
        return True

    def round(self) -> bool:
        """Upload DIR if it changed since the last upload; False when the upload failed."""
        snapshot = scan_dir(self.dir)
        if not snapshot or snapshot == self.signature:
            return True
        try:
            result = upload(self.store, self.layout, self.dir, snapshot)
        except Exception as exc:  # never fatal: the training goes on, and so do we
            warn(f"upload failed (retrying next round): {exc}")
            self.failed_rounds += 1
            self.last_error = one_line(exc)[:300]
            return False
        if result is None:
            return True
        seq, uploaded = result
        self.signature, self.last_seq = uploaded, seq
        record = {"seq": seq, "files": len(uploaded), "at": utc_now()}
        self.write_state("last_upload.json", record)
        say(f"uploaded {len(uploaded)} files (checkpoint {seq_name(seq)})")
        return True
