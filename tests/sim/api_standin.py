"""A loopback HTTP server for API stand-ins (tests/sim/github_api.py, tests/sim/gitlab_api.py).

Each request is recorded (method, path, query, headers, parsed body) and answered by the
stand-in's `answer`; what breaks the documented shape is answered as the real API would and
also listed in `violations`, so a test can assert there were none.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: Any  # JSON or form fields (dict), None without a body
    raw: bytes = b""


@dataclass
class Answer:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


class StandIn:
    """Serve `answer` on 127.0.0.1 (a free port) from a thread: `with Sub() as api: api.url`."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.violations: list[str] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    # -- to override
    def answer(self, request: Request) -> Answer:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- helpers for subclasses
    def violation(self, text: str) -> None:
        self.violations.append(text)

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> StandIn:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                headers = {k.lower(): v for k, v in self.headers.items()}
                body: Any = None
                if raw:
                    kind = headers.get("content-type", "")
                    if kind.startswith("application/json"):
                        try:
                            body = json.loads(raw)
                        except ValueError:
                            body = {"__unparsable__": raw.decode(errors="replace")}
                    else:
                        body = {k: v[-1] for k, v in parse_qs(raw.decode()).items()}
                request = Request(
                    self.command, parts.path, parse_qs(parts.query), headers, body, raw
                )
                with standin._lock:
                    standin.requests.append(request)
                    reply = standin.answer(request)
                data = b"" if reply.body is None else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                if data:
                    self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
