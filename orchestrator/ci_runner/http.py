"""One JSON request to a registration API (urllib; no new dependency).

Redirects are not followed: urllib would carry the Authorization / PRIVATE-TOKEN header to
wherever a redirect points. Loopback URLs (the tests' stand-ins) bypass any proxy.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from orchestrator.ci_runner.common import is_loopback
from orchestrator.errors import OrchError

TIMEOUT_S = 30.0
MAX_BODY = 1 << 20


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: Any  # parsed JSON, or None

    def message(self) -> str:
        """What the API said, printable and short (it is shown to the user)."""
        body = self.body
        text = ""
        if isinstance(body, dict):
            for key in ("message", "error_description", "error"):
                if body.get(key):
                    text = json.dumps(body[key]) if not isinstance(body[key], str) else body[key]
                    break
        text = "".join(c if c.isprintable() else " " for c in text)
        return " ".join(text.split())[:200]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_args: Any, **_kwargs: Any) -> None:
        return None  # the 3xx comes back as an HTTPError answer


def call(
    method: str, url: str, headers: dict[str, str], body: dict[str, Any] | None = None
) -> Answer:
    """Send one request; any HTTP status comes back as an Answer, no answer at all is an
    OrchError (exit 1) that names the host, never the headers."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    for key, value in {**headers, "User-Agent": "orch"}.items():
        request.add_header(key, value)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
    host = urlsplit(url).hostname
    if is_loopback(host):
        handlers.append(urllib.request.ProxyHandler({}))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(request, timeout=TIMEOUT_S) as response:
            status, raw = response.status, response.read(MAX_BODY)
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read(MAX_BODY)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise OrchError(f"{method} {host}: no answer ({reason})") from None
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = None
    return Answer(status, parsed)
