"""The box's cloud, as orch's checkpoint agent sees it: each cloud's instance metadata service
(metadata.json) and the spot interruption notices and rebalance recommendations it serves.

Each cloud's instance metadata service (base URL, token headers, the paths of spot notices,
role credentials and region, with the references they follow) is supplied by the cloud itself
(orchestrator/clouds/*/box_metadata.py): orch writes every cloud's entry to metadata.json next
to this file (orchestrator/boxside/__init__.py), and the agent's --cloud picks one.

Shipped with agent.py (orchestrator/boxside/): standard library only, Python 3.8.
"""

from __future__ import annotations

import json
import os
from http.client import HTTPException

try:  # on the box: its siblings lie next to this file (the script's folder is on sys.path)
    import box_s3
    from agent_log import one_line
except ImportError:  # imported as orchestrator.boxside.cloud_metadata (orch's own tests)
    from orchestrator.boxside import box_s3
    from orchestrator.boxside.agent_log import one_line

METADATA_FILE = "metadata.json"


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
        except ValueError:
            return ""
        return str(found.get("noticeTime", "")) if isinstance(found, dict) else ""

    def parse(self, body: bytes) -> dict:
        text = body.decode("utf-8", "replace").strip()
        if self.spec.get("notice_body") == "time":  # the reclaim time: the instance goes
            return {"action": "terminate", "time": text}
        try:
            notice = json.loads(text)
        except ValueError:
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
