"""Turn SIGINT, SIGTERM and SIGHUP into an exception, once, so every way out of `orch run`
passes through its teardown (stop the job, fetch, destroy the box).

CI systems cancel a job with SIGTERM and follow with SIGKILL some seconds later; the box's
--ttl expiry covers that last case. While Terraform runs, its runner installs handlers of its
own (forwarding the signal so the state is saved) and raises `Interrupted`; ours come back
after it.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator

from orchestrator.errors import EXIT_INTERRUPTED, OrchError


class Cancelled(OrchError):
    def __init__(self, signum: int):
        name = signal.Signals(signum).name
        super().__init__(f"cancelled by {name}", exit_code=EXIT_INTERRUPTED)
        self.signum = signum


def _handled() -> list[signal.Signals]:
    handled = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # nohup: keep ignoring hangups
        handled.append(signal.SIGHUP)
    return handled


@contextlib.contextmanager
def cancellable() -> Iterator[None]:
    """Within the block, the first of these signals raises Cancelled in the main thread."""

    def handler(signum: int, frame: object) -> None:
        raise Cancelled(signum)

    previous = {s: signal.signal(s, handler) for s in _handled()}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextlib.contextmanager
def deferred(say: Callable[[str], None]) -> Iterator[list[int]]:
    """Within the block (the teardown), signals are noted and said, not raised: the teardown
    must finish. The list yielded collects their numbers."""
    seen: list[int] = []

    def handler(signum: int, frame: object) -> None:
        seen.append(signum)
        with contextlib.suppress(Exception):
            say(f"{signal.Signals(signum).name} received: finishing the teardown first")

    previous = {s: signal.signal(s, handler) for s in _handled()}
    try:
        yield seen
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
