"""`watch`, orch's checkpoint agent's long-running command: it uploads DIR when it changes, at
once on a spot interruption notice or a rebalance recommendation, and once more when the
training process exits or the agent is stopped.

It writes its outcome to STATEDIR/agent.json when it ends: {"final_upload": "ok" or
"failed", "checkpoint": the last one it committed, "failed_rounds", "error"}; orch reads it.

STATEDIR also gets last_upload.json, interruption.json and rebalance.json as they happen,
and with a spot notice whose reclaim time is usable, reclaim_deadline: the Unix second by which
the job must have stopped (cloud_metadata.stop_deadline), which orch's stop on a reclaim reads
(orchestrator/run/remote.py's stop_script).

Shipped with agent.py (orchestrator/boxside/): standard library only, Python 3.8.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
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
        return True

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
