"""Watch a box's instance in its cloud while a job runs: the cloud says when it is gone.

SSH alone cannot tell a reclaimed spot box from a network hiccup; the cloud can. A thread asks
`instance_state` every `interval_s` and, once the instance is lost (stopped, terminated,
released), records why and calls `on_lost` (which ends the output stream).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator import clouds
from orchestrator.clouds.base import CloudError
from orchestrator.clouds.values import InstanceState
from orchestrator.provision.boxes import Box

Say = Callable[[str], None]


@dataclass(slots=True)
class BoxWatch:
    box: Box
    interval_s: float
    on_lost: Callable[[InstanceState], None]
    say: Say
    lost: InstanceState | None = None
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)
    _errors: int = field(default=0, init=False, repr=False)

    def __enter__(self) -> BoxWatch:
        instance_id = (self.box.outputs or {}).get("instance_id")
        if instance_id:
            self._thread = threading.Thread(
                target=self._loop, args=(str(instance_id),), name="orch-box-watch", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def poll(self, instance_id: str) -> InstanceState | None:
        cloud = clouds.get(self.box.cloud)
        return clouds.instance_state_of(cloud, self.box.region, instance_id)

    def _loop(self, instance_id: str) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                state = self.poll(instance_id)
            except CloudError as exc:
                # An API hiccup is not a lost box; say it once in a while.
                self._errors += 1
                if self._errors in (1, 10) or self._errors % 100 == 0:
                    self.say(f"asking {self.box.cloud} about the box failed: {exc.message}")
                continue
            if state is None:
                return  # this cloud cannot tell; SSH alone watches the box
            # A reclaim notice counts at once: ECS keeps a reclaimed spot box Running for
            # its 5-minute notice, and the job is better stopped (and checkpointed) now.
            if state.lost or state.spot_reclaimed:
                self.lost = state
                self.on_lost(state)
                return
