"""HTTP front of the emulator: ECS and VPC RPC on one port, plus a small admin API.

RPC requests (any path, GET or POST) carry their parameters in the query string and/or a
form-encoded body. The action comes from the `x-acs-action` header (ACS3 signature style, what
alibabacloud-ecs20140526 sends) or the `Action` parameter (the older RPC signature style).
Signatures are not verified, but the caller must identify itself: an `AccessKeyId` parameter, an
`x-acs-accesskey-id` header or an `Authorization: ACS3-HMAC-SHA256 Credential=<id>,...` header.

Admin API (JSON in, JSON out), for tests:
  GET  /_sim/state                      what exists (instances, groups, key pairs, VPCs, ...)
  POST /_sim/reset                      forget everything
  POST /_sim/settings {"launch_delay_s": 2, "command_delay_s": 0.1}
  POST /_sim/stock {"region", "instance_type", "status", "zone"?, "market"?: "spot"|"on-demand"}
  POST /_sim/price {"region", "instance_type", "on_demand", "spot", "zone"?}  (zone: its spot)
  POST /_sim/fault {"action", "code", "zone"?, "times"?}  (next calls fail with the real status)
  POST /_sim/clock {"advance_seconds": 3600}   (auto-release happens as time passes)
  POST /_sim/clock {"freeze": true}            (time stands still until advanced; false: runs)
  POST /_sim/command-output {"pattern", "output", "exit_code"?, "delivery_error"?}
  POST /_sim/reclaim-spot {"instance_id", "stop_now"?}   (ECS takes a spot instance back:
                                             Recycling lock, Stopped unless stop_now is false,
                                             released after spot_release_delay_s)
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.sim.aliyun.models import AliyunBackend, SimError, fmt_time, new_request_id
from tests.sim.aliyun.ram_responses import (
    ECS_ACTIONS,
    RAM_ACTIONS,
    RAM_VERSION,
    STS_ACTIONS,
    STS_VERSION,
)
from tests.sim.aliyun.responses import ACTIONS, Handler, dispatch

# The API version picks the product, as the endpoint host does on the real cloud (ECS and VPC
# share action names and one table; RAM and STS have their own, e.g. RAM's ListTagResources).
TABLES: dict[str, dict[str, Handler]] = {RAM_VERSION: RAM_ACTIONS, STS_VERSION: STS_ACTIONS}
ECS_TABLE = {**ACTIONS, **ECS_ACTIONS}

_CREDENTIAL = re.compile(r"Credential=([^,/\s]+)")


def access_key_id(headers: Any, params: dict[str, str]) -> str:
    if params.get("AccessKeyId"):
        return params["AccessKeyId"]
    if headers.get("x-acs-accesskey-id"):
        return headers["x-acs-accesskey-id"]
    match = _CREDENTIAL.search(headers.get("Authorization") or "")
    return match.group(1) if match else ""


class _Handler(BaseHTTPRequestHandler):
    server: EmulatorServer
    protocol_version = "HTTP/1.1"
    # Keep-alive with small writes otherwise waits on delayed ACKs: ~40 ms a request.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        if self.server.verbose:
            super().log_message(format, *args)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json;charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, error: SimError) -> None:
        self._send(
            error.status,
            {
                "RequestId": new_request_id(),
                "HostId": self.headers.get("host", "ecs.aliyuncs.com"),
                "Code": error.code,
                "Message": error.message,
                "Recommend": "https://api.aliyun.com/troubleshoot?q=" + error.code,
            },
        )

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._handle()

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        self._handle()

    def _handle(self) -> None:
        url = urlsplit(self.path)
        body = self._body()
        if url.path.startswith("/_sim/"):
            self._admin(url.path[len("/_sim/") :], body)
            return
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        content_type = self.headers.get("Content-Type") or ""
        if body and "json" not in content_type:
            params.update(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        action = self.headers.get("x-acs-action") or params.get("Action") or ""
        try:
            if not access_key_id(self.headers, params):
                raise SimError(
                    "MissingAccessKeyId", "AccessKeyId is mandatory for this action.", 400
                )
            version = self.headers.get("x-acs-version") or params.get("Version") or ""
            table = TABLES.get(version, ECS_TABLE)
            payload = dispatch(self.server.backend, action, params, table)
        except SimError as error:
            self._error(error)
            return
        except Exception as exc:  # a bug in the emulator: say so, like the cloud's 500
            self._error(SimError("InternalError", f"emulator bug: {exc!r}", 500))
            raise
        self._send(200, payload)

    def _admin(self, command: str, body: bytes) -> None:
        backend = self.server.backend
        try:
            args = json.loads(body or b"{}")
            if command == "state":
                self._send(200, backend.summary())
                return
            if command == "reset":
                backend.reset()
            elif command == "settings":
                for key, value in args.items():
                    if not hasattr(backend.settings, key):
                        raise SimError("InvalidParameter", f"unknown setting {key}")
                    setattr(backend.settings, key, float(value))
            elif command == "stock":
                backend.set_stock(
                    args["region"],
                    args["instance_type"],
                    args["status"],
                    zone=args.get("zone", "*"),
                    market=args.get("market", "*"),
                )
            elif command == "price":
                backend.set_price(
                    args["region"],
                    args["instance_type"],
                    float(args["on_demand"]),
                    float(args["spot"]),
                    zone=args.get("zone"),
                )
            elif command == "fault":
                backend.inject_fault(
                    args["action"],
                    args["code"],
                    zone=args.get("zone", ""),
                    times=int(args.get("times", 1)),
                )
            elif command == "clock":
                if not set(args) <= {"advance_seconds", "freeze"} or not args:
                    raise SimError("InvalidParameter", "clock takes advance_seconds and/or freeze")
                if args.get("freeze") is True:
                    backend.freeze_clock()
                elif args.get("freeze") is False:
                    backend.thaw_clock()
                elif "freeze" in args:
                    raise SimError("InvalidParameter", "freeze must be true or false")
                if "advance_seconds" in args:
                    backend.advance_clock(float(args["advance_seconds"]))
                self._send(200, {"ok": True, "now": fmt_time(backend.now())})
                return
            elif command == "reclaim-spot":
                stop_now = args.get("stop_now", True)
                if not isinstance(stop_now, bool):
                    raise SimError("InvalidParameter", "stop_now must be true or false")
                at = backend.reclaim_spot(args["instance_id"], stop_now=stop_now)
                self._send(200, {"ok": True, "termination_time": fmt_time(at)})
                return
            elif command == "command-output":
                backend.add_command_output(
                    args["pattern"],
                    args["output"],
                    int(args.get("exit_code", 0)),
                    str(args.get("delivery_error", "")),
                )
            else:
                raise SimError("InvalidAction.NotFound", f"unknown admin command {command}", 404)
        except SimError as error:
            self._error(error)
            return
        except (KeyError, ValueError, TypeError) as exc:
            self._error(SimError("InvalidParameter", f"bad admin request: {exc!r}", 400))
            return
        self._send(200, {"ok": True})


class EmulatorServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int = 0, host: str = "127.0.0.1", verbose: bool = False):
        self.backend = AliyunBackend()
        self.verbose = verbose
        super().__init__((host, port), _Handler)

    @property
    def endpoint(self) -> str:
        """`http://127.0.0.1:PORT`: the value for ALIBABA_CLOUD_ENDPOINT_ECS / _VPC."""
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


class RunningEmulator:
    """An emulator serving from a background thread: `with RunningEmulator() as emu: ...`."""

    def __init__(self, port: int = 0, verbose: bool = False):
        self.server = EmulatorServer(port, verbose=verbose)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    @property
    def backend(self) -> AliyunBackend:
        return self.server.backend

    def start(self) -> RunningEmulator:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> RunningEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
