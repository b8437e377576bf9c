"""How the checkpoint agent ended on the box, and what that means for the run's exit status.

The wrapper (boxside.wrapper.JOB_SH) stops the agent when the command ends and writes the
agent's exit status to `agent.exit` in the run folder; the agent writes `agent.json`
(final_upload ok or failed, the last checkpoint it committed, the last storage error). A run
with checkpoints whose final upload failed has lost the job's last state: it never exits 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.check.untrusted import printable
from orchestrator.errors import EXIT_FAILURE, OrchError
from orchestrator.run import shell
from orchestrator.run.remote import run_dir

Say = Callable[[str], None]
MAX_OUTCOME_BYTES = 4096
_SEQ = re.compile(r"\d{8}")


@dataclass(frozen=True, slots=True)
class AgentOutcome:
    state: str  # saved | failed | unknown
    checkpoint: str | None = None  # the last checkpoint the agent committed (8 digits)
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.state == "failed"

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "checkpoint": self.checkpoint, "error": self.error}

    def summary(self) -> str:
        if self.state == "saved":
            return f"checkpoint {self.checkpoint}" if self.checkpoint else "checkpoint unchanged"
        if self.state == "failed":
            return "checkpoint upload FAILED"
        return "checkpoint unknown"


def outcome_script(run_id: str) -> str:
    rd = run_dir(run_id)
    return "\n".join(
        [
            f"printf 'exit=%s\\n' \"$(cat {rd}/agent.exit 2>/dev/null || echo -)\"",
            f"head -c {MAX_OUTCOME_BYTES} {rd}/agent.json 2>/dev/null || true",
        ]
    )


def parse_outcome(text: str) -> AgentOutcome:
    """Read what outcome_script printed; anything malformed is "unknown", never trusted."""
    first, _, rest = text.partition("\n")
    match = re.fullmatch(r"exit=(-|\d{1,3})", first.strip())
    agent_exit = None if not match or match.group(1) == "-" else int(match.group(1))
    try:
        data = json.loads(rest) if rest.strip() else None
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("final_upload") in ("ok", "failed"):
        seq = data.get("checkpoint")
        seq = seq if isinstance(seq, str) and _SEQ.fullmatch(seq) else None
        error = data.get("error")
        error = printable(error, 300) if isinstance(error, str) else None
        state = "saved" if data["final_upload"] == "ok" else "failed"
        return AgentOutcome(state, seq, error)
    if agent_exit is not None and agent_exit != 0:
        # It ended before it could say how (no S3 client, a bad store): nothing was saved.
        return AgentOutcome("failed", None, f"the checkpoint agent exited {agent_exit}")
    return AgentOutcome("unknown")


def read_outcome(transport: Any, run_id: str, retry_s: float = 30) -> AgentOutcome:
    try:
        text = shell.call_ok(
            transport, outcome_script(run_id), what="reading the agent's outcome", retry_s=retry_s
        )
    except OrchError:
        return AgentOutcome("unknown")
    return parse_outcome(text)


def failure_line(outcome: AgentOutcome) -> str:
    kept = (
        f"the store keeps checkpoint {outcome.checkpoint}"
        if outcome.checkpoint
        else ("no checkpoint of this attempt is in the store")
    )
    why = f" ({outcome.error})" if outcome.error else ""
    return f"the final checkpoint upload failed{why}; {kept}"


def settle(transport: Any, run_id: str, exit_code: int) -> tuple[AgentOutcome, int, str | None]:
    """(the agent's outcome, the run's exit status, the error line): a failed final upload
    makes a run that exited 0 exit 1."""
    outcome = read_outcome(transport, run_id)
    if not outcome.failed:
        return outcome, exit_code, None
    return outcome, exit_code or EXIT_FAILURE, failure_line(outcome)
