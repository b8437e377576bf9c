"""A stand-in for the instance metadata services of AWS EC2 and Alibaba Cloud ECS.

One threaded HTTP server on 127.0.0.1 serves both clouds' paths, as orch's boxes configure them
(metadata only with a session token: `http_tokens = "required"` on both clouds):

    with MetadataService() as md:
        md.url                                   # http://127.0.0.1:PORT (ORCH_AGENT_METADATA_URL)
        md.notice_aws(action="terminate", at=when)
        md.notice_aliyun(at=when)
        md.notice_body(cloud, text)              # a notice whose body is `text`, as it is
        md.rebalance_body(text)                  # the same for the rebalance recommendation
        md.recommend_rebalance(at=when)          # AWS's rebalance recommendation
        md.clear()                               # withdraw the notices and the recommendation
        md.aws_identity = provider               # () -> (role, credentials) | None
        md.aliyun_identity = provider            # the same for the ECS RAM role
        md.revoke_tokens()                       # every token issued so far stops working
        md.advance_clock(seconds)                # tokens expire by this clock
        md.requests                              # [(method, path), ...] in arrival order

AWS IMDSv2, https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html
and https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html:

* PUT /latest/api/token needs `X-aws-ec2-metadata-token-ttl-seconds` between 1 and 21600,
  else 400; it answers a token (and echoes the TTL header). A PUT carrying `X-Forwarded-For` is
  refused with 403: IMDS does not hand tokens to requests that went through a proxy.
* A GET needs `X-aws-ec2-metadata-token` holding an issued, unexpired token, else 401.
* GET /latest/meta-data/spot/instance-action: 404 until a notice, then 200
  `{"action": "terminate"|"stop"|"hibernate", "time": "2026-12-03T12:00:00Z"}`. `notice_body`
  serves any other text there instead (garbled or hostile metadata, for the agent's tests).
* GET /latest/meta-data/events/recommendations/rebalance: 404 until a rebalance
  recommendation, then 200 `{"noticeTime": "2026-12-03T12:00:00Z"}`
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html).
* GET /latest/meta-data/instance-id: the instance's id; .../placement/region: its region.
* GET /latest/meta-data/iam/security-credentials/: the instance profile's role name, 404 when
  the instance has no profile; GET .../ROLE: 200 `{"Code": "Success", "LastUpdated", "Type":
  "AWS-HMAC", "AccessKeyId", "SecretAccessKey", "Token", "Expiration"}`, 404 for another name
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-metadata-security-credentials.html).
  What is served comes from `aws_identity`, a callable the test sets (tests/sim/identity.py
  asks moto's EC2, IAM and STS): no identity, no credentials.

Alibaba Cloud ECS, https://www.alibabacloud.com/help/en/ecs/user-guide/view-instance-metadata
and https://www.alibabacloud.com/help/en/ecs/user-guide/best-practices-for-preemptible-instances:

* Security hardening mode: PUT /latest/api/token with `X-aliyun-ecs-metadata-token-ttl-seconds`
  (1 to 21600) answers a token that GETs carry in `X-aliyun-ecs-metadata-token`. With
  `aliyun_tokens_required` (the default, as orch's boxes set it) a GET without a valid token is
  refused with 403; the docs do not name the status, so the agent treats 401 and 403 alike.
  Without it (normal mode) plain GETs work too.
* GET /latest/meta-data/instance/spot/termination-time: 404 until the instance is to be
  reclaimed, then 200 with the UTC time as text, `2026-12-03T12:00:00Z`.
* GET /latest/meta-data/instance-id with the Aliyun token header: the ECS instance's id;
  .../region-id: its region.
* GET /latest/meta-data/ram/security-credentials/: the instance RAM role's name (404 without
  one); .../ROLE: `{"AccessKeyId", "AccessKeySecret", "SecurityToken", "Expiration",
  "LastUpdated", "Code": "Success"}`, from `aliyun_identity`
  (https://www.alibabacloud.com/help/en/ecs/user-guide/attach-an-instance-ram-role-to-an-ecs-instance).

Both clouds share the token path; the TTL header a PUT carries says which cloud it asks.
Unknown paths answer 404, other methods 405.
"""

from __future__ import annotations

import http.server
import json
import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

AWS_TTL = "X-aws-ec2-metadata-token-ttl-seconds"
AWS_TOKEN = "X-aws-ec2-metadata-token"
ALIYUN_TTL = "X-aliyun-ecs-metadata-token-ttl-seconds"
ALIYUN_TOKEN = "X-aliyun-ecs-metadata-token"
MAX_TTL_S = 21600

TOKEN_PATH = "/latest/api/token"
AWS_NOTICE_PATH = "/latest/meta-data/spot/instance-action"
ALIYUN_NOTICE_PATH = "/latest/meta-data/instance/spot/termination-time"
INSTANCE_ID_PATH = "/latest/meta-data/instance-id"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
AWS_REGION_PATH = "/latest/meta-data/placement/region"
ALIYUN_REGION_PATH = "/latest/meta-data/region-id"
AWS_CREDENTIALS_PATH = "/latest/meta-data/iam/security-credentials/"
ALIYUN_CREDENTIALS_PATH = "/latest/meta-data/ram/security-credentials/"

# A box's identity as the metadata service sees it: (role name, credentials document) or None.
Identity = Callable[[], "tuple[str, dict[str, str]] | None"]


def _utc_text(at: datetime | None) -> str:
    when = at or datetime.now(UTC) + timedelta(minutes=2)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _credentials(identity: Identity | None, rest: str) -> tuple[int, str]:
    """.../security-credentials/ lists the role; .../ROLE is its credentials document."""
    found = identity() if identity is not None else None
    if found is None:
        return 404, ""
    role, document = found
    if rest == "":
        return 200, role
    if rest == role:
        return 200, json.dumps(document)
    return 404, ""


class MetadataService:
    """Both clouds' instance metadata services on one loopback port (see the module doc)."""

    def __init__(
        self,
        instance_id: str = "i-0abc1234def567890",
        aliyun_instance_id: str = "i-bp1abcdefghijklmnop",
        aliyun_tokens_required: bool = True,
        region: str = "us-east-1",
        aliyun_region: str = "cn-hangzhou",
    ) -> None:
        self.instance_id = instance_id
        self.aliyun_instance_id = aliyun_instance_id
        self.aliyun_tokens_required = aliyun_tokens_required
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._tokens: dict[str, tuple[str, float]] = {}  # token -> (cloud, expires at)
        self._offset = 0.0
        self._aws_notice: str | None = None  # the body of spot/instance-action
        self._aliyun_notice: str | None = None
        self._rebalance: str | None = None
        self._rebalance_body: str | None = None
        self.region = region
        self.aliyun_region = aliyun_region
        self.aws_identity: Identity | None = None
        self.aliyun_identity: Identity | None = None
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -------------------------------------------------------------- test controls

    @property
    def url(self) -> str:
        assert self._server is not None, "the service is not running"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def notice_aws(self, action: str = "terminate", at: datetime | None = None) -> None:
        if action not in ("terminate", "stop", "hibernate"):
            raise ValueError("EC2 spot interruption actions are terminate, stop, hibernate")
        with self._lock:
            self._aws_notice = json.dumps({"action": action, "time": _utc_text(at)})

    def notice_body(self, cloud: str, text: str) -> None:
        """A notice on `cloud` ("aws", "aliyun") whose body is `text` exactly: not what either
        service documents, but what the agent must survive."""
        with self._lock:
            if cloud == "aws":
                self._aws_notice = text
            else:
                self._aliyun_notice = text

    def rebalance_body(self, text: str) -> None:
        """A rebalance recommendation whose body is `text` exactly (see notice_body)."""
        with self._lock:
            self._rebalance_body = text

    def notice_aliyun(self, at: datetime | None = None) -> None:
        with self._lock:
            self._aliyun_notice = _utc_text(at)

    def recommend_rebalance(self, at: datetime | None = None) -> None:
        with self._lock:
            self._rebalance = _utc_text(at or datetime.now(UTC))

    def clear(self) -> None:
        with self._lock:
            self._aws_notice = None
            self._aliyun_notice = None
            self._rebalance = None
            self._rebalance_body = None

    def revoke_tokens(self) -> None:
        with self._lock:
            self._tokens.clear()

    def advance_clock(self, seconds: float) -> None:
        with self._lock:
            self._offset += seconds

    def paths(self, method: str | None = None) -> list[str]:
        """The paths requested so far (with `method` only, when given)."""
        with self._lock:
            return [p for m, p in self.requests if method is None or m == method]

    # -------------------------------------------------------------- server

    def start(self) -> MetadataService:
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> MetadataService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -------------------------------------------------------------- rules

    def _now(self) -> float:
        return time.monotonic() + self._offset

    def _issue(self, cloud: str, ttl_text: str | None) -> tuple[int, str]:
        try:
            ttl = int(ttl_text or "")
        except ValueError:
            return 400, ""
        if not 1 <= ttl <= MAX_TTL_S:
            return 400, ""
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._tokens[token] = (cloud, self._now() + ttl)
        return 200, token

    def _valid(self, cloud: str, token: str | None) -> bool:
        with self._lock:
            cloud_and_expiry = self._tokens.get(token or "")
            return (
                cloud_and_expiry is not None
                and cloud_and_expiry[0] == cloud
                and (self._now() < cloud_and_expiry[1])
            )

    def put(self, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], str]:
        if path != TOKEN_PATH:
            return 404, {}, ""
        if ALIYUN_TTL.lower() in headers:
            status, token = self._issue("aliyun", headers[ALIYUN_TTL.lower()])
            return status, {}, token
        if "x-forwarded-for" in headers:
            return 403, {}, ""
        status, token = self._issue("aws", headers.get(AWS_TTL.lower()))
        extra = {AWS_TTL: headers[AWS_TTL.lower()]} if status == 200 else {}
        return status, extra, token

    def get(self, path: str, headers: dict[str, str]) -> tuple[int, str]:
        aliyun = path == ALIYUN_NOTICE_PATH or ALIYUN_TOKEN.lower() in headers
        if aliyun:
            allowed = self._valid("aliyun", headers.get(ALIYUN_TOKEN.lower()))
            if not allowed and self.aliyun_tokens_required:
                return 403, ""
            return self._aliyun_item(path)
        if not self._valid("aws", headers.get(AWS_TOKEN.lower())):
            return 401, ""
        return self._aws_item(path)

    def _aws_item(self, path: str) -> tuple[int, str]:
        with self._lock:
            notice, rebalance = self._aws_notice, self._rebalance_body
            if rebalance is None and self._rebalance:
                rebalance = json.dumps({"noticeTime": self._rebalance})
        if path == AWS_NOTICE_PATH:
            return (200, notice) if notice is not None else (404, "")
        if path == REBALANCE_PATH:
            return (200, rebalance) if rebalance is not None else (404, "")
        if path == INSTANCE_ID_PATH:
            return 200, self.instance_id
        if path == AWS_REGION_PATH:
            return 200, self.region
        if path.startswith(AWS_CREDENTIALS_PATH):
            return _credentials(self.aws_identity, path[len(AWS_CREDENTIALS_PATH) :])
        return 404, ""

    def _aliyun_item(self, path: str) -> tuple[int, str]:
        with self._lock:
            notice = self._aliyun_notice
        if path == ALIYUN_NOTICE_PATH:
            return (200, notice) if notice is not None else (404, "")
        if path == INSTANCE_ID_PATH:
            return 200, self.aliyun_instance_id
        if path == ALIYUN_REGION_PATH:
            return 200, self.aliyun_region
        if path.startswith(ALIYUN_CREDENTIALS_PATH):
            return _credentials(self.aliyun_identity, path[len(ALIYUN_CREDENTIALS_PATH) :])
        return 404, ""

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        service = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _begin(self) -> tuple[str, dict[str, str]]:
                path = self.path.split("?", 1)[0]
                with service._lock:
                    service.requests.append((self.command, path))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                return path, {k.lower(): v for k, v in self.headers.items()}

            def _send(self, status: int, body: str, extra: dict[str, str] | None = None) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (extra or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - the http.server protocol
                path, headers = self._begin()
                status, body = service.get(path, headers)
                self._send(status, body)

            def do_PUT(self) -> None:  # noqa: N802
                path, headers = self._begin()
                status, extra, body = service.put(path, headers)
                self._send(status, body, extra)

            def _refuse(self) -> None:
                self._begin()
                self._send(405, "")

            do_POST = do_DELETE = do_PATCH = _refuse  # noqa: N815

        return Handler
