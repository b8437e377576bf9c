"""Runner stand-ins served from a loopback "mirror", for `--runner-url`:

- `github_runner_tarball()`: an actions-runner tarball whose config.sh and run.sh append their
  arguments (and the user they run as, and the JIT config they were given in
  ACTIONS_RUNNER_INPUT_JITCONFIG) to $STUB_LOG and exit 0;
- `gitlab_runner_binary()`: a gitlab-runner script that does the same.

`Mirror(files)` serves them on 127.0.0.1 and records the paths it was asked for.
"""

from __future__ import annotations

import io
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_RECORDER = (
    "#!/bin/bash\n"
    'printf "%s %s as=%s token=%s\\n" "{name}" "$*" "$(id -un 2>/dev/null || echo ?)"'
    ' "${{ORCH_CI_TOKEN:+set}}" >>"$STUB_LOG"\n'
    # What the real gitlab-runner reads as --token (common/config.go: env:"CI_SERVER_TOKEN").
    'if [ -n "${{CI_SERVER_TOKEN:-}}" ]; then\n'
    '  printf "%s ci_server_token=%s\\n" "{name}" "$CI_SERVER_TOKEN" >>"$STUB_LOG"\n'
    "fi\n"
    # What the real runner reads as --jitconfig (CommandSettings: ACTIONS_RUNNER_INPUT_*).
    'if [ -n "${{ACTIONS_RUNNER_INPUT_JITCONFIG:-}}" ]; then\n'
    '  printf "%s jitconfig=%s\\n" "{name}" "$ACTIONS_RUNNER_INPUT_JITCONFIG" >>"$STUB_LOG"\n'
    "fi\n"
)


def recorder(name: str) -> str:
    return _RECORDER.format(name=name)


def github_runner_tarball() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in ("config.sh", "run.sh"):
            data = recorder(name).encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def gitlab_runner_binary() -> bytes:
    return recorder("gitlab-runner").encode()


class Mirror:
    """`with Mirror({"/runner.tar.gz": data}) as mirror: mirror.url + "/runner.tar.gz"`."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.fetched: list[str] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Mirror:
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                mirror.fetched.append(self.path)
                data = mirror.files.get(self.path.split("?")[0])
                self.send_response(200 if data is not None else 404)
                self.send_header("Content-Length", str(len(data or b"")))
                self.end_headers()
                self.wfile.write(data or b"")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
