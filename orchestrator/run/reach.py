"""Reaching a box that may be gone: ask its cloud before retrying SSH, and bound each wait.

SSH alone cannot tell a box that is gone from one that is slow to answer; the cloud can. The
commands that talk to a run's box (`orch wait`, `orch stop`, `orch logs -f`) ask the cloud
whenever SSH does not answer, and stop at once when the instance is gone, instead of
retrying until their time is up.
"""

from __future__ import annotations

import time

from orchestrator import clouds
from orchestrator.clouds.base import CloudError
from orchestrator.provision.boxes import Box

# How long one SSH call retries a box that does not answer, at most (--timeout may say less).
RETRY_S = 120.0


def box_gone(box: Box) -> str | None:
    """ "terminated (reason)" when the cloud says the box's instance will not answer again;
    None when it runs, or when the cloud cannot tell (no instance id, an API error)."""
    instance_id = (box.outputs or {}).get("instance_id")
    if not instance_id:
        return None
    try:
        state = clouds.instance_state_of(clouds.get(box.cloud), box.region, str(instance_id))
    except CloudError:
        return None
    if state is None or not state.lost:
        return None
    return f"{state.state} ({state.reason})" if state.reason else state.state


def retry_window(deadline: float | None, cap: float = RETRY_S) -> float:
    """How long one call may retry: `cap`, or what is left before `deadline` (at least 1 s)."""
    if deadline is None:
        return cap
    return max(1.0, min(cap, deadline - time.monotonic()))
