"""Stream a run's output from the box, and pick up where it stopped after SSH drops.

The box keeps everything in output.log; we count the bytes we have written out and, after a
dropped connection, ask for the log from that byte on (`tail -c +N`), so nothing is lost and
nothing is shown twice. `tail --pid` ends the stream when the job's wrapper exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

from orchestrator.check.transport import SshTransport, backoff_delays
from orchestrator.errors import OrchError
from orchestrator.run.remote import follow_script
from orchestrator.run.shell import stream_argv

Say = Callable[[str], None]


class SshLost(OrchError):
    """The box has not answered over SSH for the whole reconnect window."""


class StreamStopped(Exception):
    """`stop()` was called (the watch saw the box go, or orch is being cancelled)."""


@dataclass(slots=True)
class LogFollower:
    transport: SshTransport
    run_id: str
    sink: BinaryIO
    say: Say
    offset: int = 0  # bytes of output.log already written to `sink`
    lost_after_s: float = 300.0  # no answer for this long: SSH is lost for good
    reconnects: int = 0
    # Asked before each reconnect: the cloud's word that the box is gone (run/reach.py).
    gone: Callable[[], str | None] | None = None
    _proc: subprocess.Popen | None = field(default=None, init=False, repr=False)
    _stopped: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def stop(self) -> None:
        """End the stream from another thread (or a signal handler)."""
        self._stopped.set()
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    def follow(self) -> None:
        """Write the output until the job's wrapper exits. Raises SshLost or StreamStopped."""
        delays = backoff_delays(1.0, 10.0)
        last_contact = time.monotonic()
        while True:
            if self._stopped.is_set():
                raise StreamStopped()
            started = time.monotonic()
            code, got = self._once()
            if got:
                last_contact = time.monotonic()
            if code == 0:
                return
            if self._stopped.is_set():
                raise StreamStopped()
            if code == 3:
                raise OrchError(f"run {self.run_id} is not on the box (no pid file)")
            ended = time.monotonic()
            if ended - started > 5:
                # It was connected, and ssh's keepalives (45 s: check/transport.py) answered,
                # until it dropped: a quiet job is no silent box.
                last_contact = max(last_contact, ended)
                delays = backoff_delays(1.0, 10.0)
            reason = self.gone() if self.gone is not None and not got else None
            if reason:
                raise OrchError(f"the box is gone ({reason}); run {self.run_id} ended with it")
            silent = time.monotonic() - last_contact
            if silent > self.lost_after_s:
                raise SshLost(
                    f"lost SSH to the box for {silent:.0f} s (no answer since then)",
                    hint="the job may still run there: `orch logs`, `orch stop`",
                )
            self.reconnects += 1
            if self.reconnects == 1 or self.reconnects % 10 == 0:
                self.say(
                    f"output stream dropped (ssh exit {code}); reconnecting from byte {self.offset}"
                )
            self._stopped.wait(next(delays))

    def _once(self) -> tuple[int, bool]:
        """One ssh connection: (its exit status, whether any byte came)."""
        argv = stream_argv(self.transport, follow_script(self.run_id, self.offset))
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        with self._lock:
            self._proc = proc
        if self._stopped.is_set():  # stop() came while this connection started: it saw no proc
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        got = False
        assert proc.stdout is not None
        try:
            while chunk := proc.stdout.read1(65536):
                self.sink.write(chunk)
                self.sink.flush()
                self.offset += len(chunk)
                got = True
        except BaseException:
            # Cancelled (a signal) or the sink broke: this connection ends here, not later.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            raise
        finally:
            code = proc.wait()
            with self._lock:
                self._proc = None
        return code, got
