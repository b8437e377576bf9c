"""The box's cloud, as orch's checkpoint agent sees it: each cloud's instance metadata service
(metadata.json) and the spot interruption notices and rebalance recommendations it serves.

Each cloud's instance metadata service (base URL, token headers, the paths of spot notices,
role credentials and region, with the references they follow) is supplied by the cloud itself
(orchestrator/clouds/*/box_metadata.py): orch writes every cloud's entry to metadata.json next
to this file (orchestrator/boxside/__init__.py), and the agent's --cloud picks one.

Shipped with agent.py (orchestrator/boxside/): standard library only, Python 3.8.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import time
from http.client import HTTPException

try:  # on the box: its siblings lie next to this file (the script's folder is on sys.path)
    import box_s3
    from agent_log import one_line
except ImportError:  # imported as orchestrator.boxside.cloud_metadata (orch's own tests)
    from orchestrator.boxside import box_s3
    from orchestrator.boxside.agent_log import one_line

METADATA_FILE = "metadata.json"

# On a spot reclaim orch stops the job (TERM, then KILL: orchestrator/run/remote.py's
# stop_script); the KILL waits until the reclaim time the notice gives less this margin, so
# that the stop, which ends after the agent's final upload (the wrapper's `exit` waits for
# it), is over before the box goes.
UPLOAD_MARGIN_S = 30
# A reclaim time further ahead than this is not believed (EC2 gives two minutes, ECS about
# five): such a notice, like one without a readable time, leaves the stop its short grace.
MAX_NOTICE_AHEAD_S = 600
# The reclaim time as both clouds write it: ISO 8601 UTC to the second, "2015-01-05T18:02:00Z".
# EC2: spot/instance-action's "time" ({"action": "terminate", "time": "2017-09-18T08:22:00Z"}),
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html
# ECS: instance/spot/termination-time's body, the UTC time ("2015-01-05T18:02:00Z"),
# https://www.alibabacloud.com/help/en/ecs/user-guide/best-practices-for-preemptible-instances
NOTICE_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


def cloud_specs() -> dict:
    """Every cloud's metadata entry, from metadata.json next to this file."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), METADATA_FILE)
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def cloud_spec(cloud: str) -> dict:
    """One cloud's metadata entry: "base", "ttl_header", "token_header", "notice_path",
    "notice_body" ("json": {"action", "time"}; "time": the reclaim time), "credentials_path",
    "credential_keys", "region_path"; optional "rebalance_path" and "sdk_finds_role" (boto3's
    own chain reads the role)."""
    return cloud_specs()[cloud]


class Metadata:
    """One cloud's instance metadata service, asked for a spot interruption notice."""

    def __init__(self, cloud: str, base: str | None = None) -> None:
        self.spec = cloud_spec(cloud)
        self.session = box_s3.MetadataSession(self.spec, base)
        self.last_error = ""

    def _notice(self) -> dict | None:
        status, body = self.session.get(self.spec["notice_path"])
        if status != 200:
            return None
        return self.parse(body)

    def rebalance(self) -> str | None:
        """The rebalance recommendation's noticeTime ("" when unreadable), or None: also
        when the cloud has none or the service does not answer."""
        path = self.spec.get("rebalance_path")
        if not path:
            return None
        try:
            status, body = self.session.get(path)
            if status != 200:
                return None
            found = json.loads(body.decode("utf-8", "replace"))
        except (OSError, HTTPException) as exc:
            self.session.forget_token()
            self.last_error = one_line(exc)
            return None
        except (ValueError, RecursionError):  # garbled, or nested past the parser's depth
            return ""
        return str(found.get("noticeTime", "")) if isinstance(found, dict) else ""

    def parse(self, body: bytes) -> dict:
        text = body.decode("utf-8", "replace").strip()
        if self.spec.get("notice_body") == "time":  # the reclaim time: the instance goes
            return {"action": "terminate", "time": text}
        try:
            notice = json.loads(text)
        except (ValueError, RecursionError):  # garbled, or nested past the parser's depth
            notice = {}
        if not isinstance(notice, dict):
            notice = {}
        return {"action": str(notice.get("action", "unknown")), "time": str(notice.get("time", ""))}

    def notice(self) -> dict | None:
        """The notice ({"action", "time"}), or None: also when the service does not answer."""
        try:
            return self._notice()
        except (OSError, ValueError, HTTPException) as exc:  # refused, timed out, garbled
            self.session.forget_token()
            self.last_error = one_line(exc)
            return None


def reclaim_epoch(text: object) -> int | None:
    """The reclaim time of a notice (NOTICE_TIME, both clouds' format) as Unix seconds; None
    for anything else: another format, an impossible date, not a string."""
    if not isinstance(text, str) or NOTICE_TIME.fullmatch(text) is None:
        return None
    try:
        when = time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:  # 2026-02-30, 25:00, ...
        return None
    return calendar.timegm(when)


def stop_deadline(text: object, now: float) -> int | None:
    """The Unix second by which the job must have stopped on a reclaim whose notice gives
    the time `text` (seen at `now`): that time less UPLOAD_MARGIN_S. None when the notice
    has no usable time (unreadable, or more than MAX_NOTICE_AHEAD_S ahead); a time already
    past is kept (the stop then gives the job its short grace, as without a time)."""
    at = reclaim_epoch(text)
    if at is None or at > now + MAX_NOTICE_AHEAD_S:
        return None
    return at - UPLOAD_MARGIN_S
