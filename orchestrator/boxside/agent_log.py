"""What orch's checkpoint agent says: its log lines, each prefixed "orch-agent:" (progress on
stdout, warnings on stderr folded onto one line), and its UTC time stamps.

Shipped with agent.py (orchestrator/boxside/): standard library only, Python 3.8.
"""

from __future__ import annotations

import sys
import time

LOG = "orch-agent:"


def one_line(value: object) -> str:
    return " ".join(str(value).split())


def say(message: str) -> None:
    print(LOG + " " + message, flush=True)


def warn(message: str) -> None:
    print(LOG + " " + one_line(message), file=sys.stderr, flush=True)


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
