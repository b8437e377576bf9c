"""Hand a GitHub JIT runner its config over SSH, once `orch up` has the box.

The config never goes into the user data: any process on the box, the CI job included, can
read user data back from the instance metadata service for the box's whole life. Instead
`orch up` writes it into the login user's home (~/.orch-ci-runner.jit, mode 0600, written to
a temporary name and renamed, so the waiting job script never reads half of it) with the
config on ssh's stdin, never in an argument. The job script on the box reads it, deletes it
and starts the runner (orchestrator/ci_runner/userdata.py).
"""

from __future__ import annotations

import subprocess
import time

from orchestrator.check.transport import backoff_delays, sleep_until
from orchestrator.ci_runner.userdata import JIT_FILE
from orchestrator.errors import OrchError

# How long `up` keeps trying to reach a box that has just been created: boot, cloud-init and
# sshd take a few minutes on a GPU image.
DELIVERY_S = 900.0
ATTEMPT_S = 60.0
_SCRIPT = (
    f"umask 077 && cat >~/{JIT_FILE}.tmp && test -s ~/{JIT_FILE}.tmp"
    f" && mv -f ~/{JIT_FILE}.tmp ~/{JIT_FILE}"
)


def deliver_jit_config(box_name: str, config: str) -> None:
    """Write `config` into the box's ~/.orch-ci-runner.jit over SSH (its key, pinned host key
    and $ORCH_SSH_CONFIG, as `orch ssh`), retrying while the box does not answer."""
    from orchestrator.check.transport import resolve_ssh_config, transport_for_box
    from orchestrator.provision.boxes import load_box

    transport = transport_for_box(
        load_box(box_name), via="ssh", ssh_config=resolve_ssh_config(None)
    )
    argv = transport.argv(_SCRIPT)  # type: ignore[attr-defined] - an SshTransport
    deadline = time.monotonic() + DELIVERY_S
    delays = backoff_delays(2.0, 15.0)
    last = "no answer"
    while True:
        try:
            done = subprocess.run(
                argv,
                input=config,
                capture_output=True,
                text=True,
                timeout=ATTEMPT_S,
                check=False,
            )
            if done.returncode == 0:
                return
            last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:200]
        except subprocess.TimeoutExpired:
            last = f"no answer within {ATTEMPT_S:g} s"
        if not sleep_until(deadline, next(delays)):
            raise OrchError(
                f"box {box_name} is up, but its GitHub runner config could not be handed to it "
                f"over SSH ({last}); the runner was removed",
                hint=f"`orch down {box_name}`, then check that SSH reaches the box",
            )
