"""Which ready boxes of a pool should go, for `orch pool reconcile`.

A ready box goes when its TTL ends within a lease, when it has no record, when the cloud says
it is gone (the run's own test, run/recovery.py), or when it does not answer over SSH. The
first three are looked up one box after another in this thread (`first_look`); the SSH probes
then run at once, one thread each (`probe_all`), so boxes that do not answer cost one probe's
time per reconcile instead of one each. Cloud calls and the transports' making stay out of the
threads: boto3's default session is not thread-safe ("it is recommended to create a new Session
object for each thread", https://boto3.amazonaws.com/v1/documentation/api/latest/guide/session.html#multithreading-or-multiprocessing-with-sessions),
and a probe is only `ssh BOX true`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from orchestrator.clouds.base import CloudError
from orchestrator.errors import OrchError
from orchestrator.pool import members
from orchestrator.pool import record as pool_record
from orchestrator.pool.handle import Pool
from orchestrator.provision.boxes import Box
from orchestrator.run.recovery import gone

if TYPE_CHECKING:
    from orchestrator.check.transport import SshTransport

PROBES_AT_ONCE = 8  # ssh processes a reconcile runs together
PROBE_TIMEOUT_S = 20  # one try; a box that does not answer is tried again for as long


def first_look(pool: Pool, name: str, data: dict[str, Any]) -> str | Box:
    """Why the box should go, as found without reaching it; else its Box, to probe. `data`
    is the pool's record as read once for the whole reconcile step."""
    from orchestrator import clouds

    entry = data["boxes"][name]
    until = pool_record.usable_until(entry)
    if until is not None and until <= pool_record.now() + timedelta(seconds=data["lease_ttl_s"]):
        return f"expires at {pool_record.iso(until)}, within a lease"
    box = members.materialize(pool, name, data)
    if box is None:
        return "has no record here or in the pool's state"
    instance_id = (box.outputs or {}).get("instance_id")
    try:
        state = clouds.instance_state_of(clouds.get(box.cloud), box.region, str(instance_id))
    except CloudError:
        state = None
    if gone(state):
        assert state is not None
        return f"is {state.state} in {box.cloud} ({state.reason or 'no reason given'})"
    return box


def probe_all(transports: dict[str, SshTransport]) -> dict[str, str]:
    """Box name -> why it should go, for each box that does not answer over its transport."""
    if not transports:
        return {}
    with ThreadPoolExecutor(max_workers=min(PROBES_AT_ONCE, len(transports))) as workers:
        answers = workers.map(probe, transports.values())
        return {name: why for name, why in zip(transports, answers, strict=True) if why}


def probe(transport: SshTransport) -> str | None:
    """Why the box should go when `true` does not run on it; None when it does."""
    from orchestrator.run.shell import call

    try:
        result = call(
            transport, "true", what="probe", timeout=PROBE_TIMEOUT_S, retry_s=PROBE_TIMEOUT_S
        )
    except OrchError as exc:
        return f"does not answer over SSH ({exc.one_line()})"
    return None if result.exit_code == 0 else "does not answer over SSH"
