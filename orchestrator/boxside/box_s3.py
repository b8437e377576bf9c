"""The checkpoint agent's S3 client: standard library only, runs ON the box next to agent.py.

orch copies this file next to agent.py (orchestrator/boxside/__init__.py); the agent imports it as
`box_s3`. Python 3.8 syntax and APIs; it imports nothing from `orchestrator`. A stock image
needs no boto3 and no keys: credentials come from the box's own identity.

Credentials, first found wins (the order of the AWS SDKs' default chain):
  1. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN) in the environment;
  2. the instance metadata service, with a session token (both clouds' boxes require one), as
     the metadata spec agent.py passes in (its cloud's entry of metadata.json, supplied by
     orchestrator/clouds/*/box_metadata.py: base URL, token headers, paths, key names)
     describes it:
     - AWS (IMDSv2): GET /latest/meta-data/iam/security-credentials/ names the instance
       profile's role, GET .../ROLE answers {"AccessKeyId", "SecretAccessKey", "Token",
       "Expiration"}, rotated by EC2 well before they expire.
       https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-metadata-security-credentials.html
     - Alibaba Cloud: GET /latest/meta-data/ram/security-credentials/ names the instance RAM
       role, GET .../ROLE answers {"AccessKeyId", "AccessKeySecret", "SecurityToken",
       "Expiration", "Code": "Success"}.
       https://www.alibabacloud.com/help/en/ecs/user-guide/attach-an-instance-ram-role-to-an-ecs-instance
  Credentials are fetched again 5 minutes before they expire, and at once when S3 says the
  token expired.

Requests are signed with AWS Signature Version 4 (header form, the payload's SHA-256 in
x-amz-content-sha256, the session token in x-amz-security-token):
https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html
Addressing: virtual-hosted (BUCKET.s3.REGION.amazonaws.com) on AWS; path-style
(ENDPOINT/BUCKET/KEY) for an endpoint of your own (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, or
ORCH_STORE_ENDPOINT), as S3-compatible stores and emulators serve it. The region: AWS_REGION,
AWS_DEFAULT_REGION, else the instance's own (metadata placement/region); a bucket in another
region is followed once through the x-amz-bucket-region header S3 answers with.
Files above PART_SIZE go up in parts (CreateMultipartUpload, UploadPart,
CompleteMultipartUpload; an unfinished upload is aborted), as S3 takes at most 5 GiB per PUT:
https://docs.aws.amazon.com/AmazonS3/latest/userguide/mpuoverview.html
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ElementTree
from calendar import timegm
from http.client import HTTPException
from urllib.parse import quote, unquote_plus, urlsplit

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
PART_SIZE = 64 * 1024 * 1024
# S3's multipart limit: part numbers 1 to 10,000 (inclusive)
# (https://docs.aws.amazon.com/AmazonS3/latest/userguide/qfacts.html).
MAX_PARTS = 10000
TIMEOUT_S = 60.0
METADATA_TIMEOUT_S = 2.0
TOKEN_TTL_S = 21600
TOKEN_MARGIN_S = 60
CREDENTIAL_MARGIN_S = 300
# Tries of one request on a connection error, a 5xx or throttling (boto3's standard mode: 3).
TRIES = 4
CHUNK = 1024 * 1024
# S3's answers when the session token ran out: fetch credentials again and retry once.
EXPIRED = ("ExpiredToken", "TokenRefreshRequired")


class StoreError(Exception):
    """An object storage request failed (or no credentials were found)."""


def one_line(value: object) -> str:
    return " ".join(str(value).split())


# ------------------------------------------------------------------------------ metadata

# Never through a proxy: the metadata services are link-local, and IMDS refuses proxied
# token requests anyway.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def metadata_http(method: str, url: str, headers: dict) -> tuple:
    data = b"" if method == "PUT" else None
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with _DIRECT.open(request, timeout=METADATA_TIMEOUT_S) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class MetadataSession:
    """GETs from one cloud's instance metadata service with a session token (refreshed).

    `spec`: {"base", "ttl_header", "token_header"} (and, for credentials, "credentials_path",
    "region_path", "credential_keys"): one cloud's entry of metadata.json
    (orchestrator/clouds/*/box_metadata.py)."""

    def __init__(self, spec: dict, base: str | None = None) -> None:
        self.spec = spec
        self.base = (base or self.spec["base"]).rstrip("/")
        self.token = None
        self.token_until = 0.0

    def _fetch_token(self) -> str | None:
        headers = {self.spec["ttl_header"]: str(TOKEN_TTL_S)}
        status, body = metadata_http("PUT", self.base + "/latest/api/token", headers)
        if status != 200 or not body.strip():
            self.token = None
            return None
        self.token = body.decode("ascii", "replace").strip()
        self.token_until = time.monotonic() + TOKEN_TTL_S - TOKEN_MARGIN_S
        return self.token

    def _get(self, path: str, token: str | None) -> tuple:
        headers = {self.spec["token_header"]: token} if token else {}
        return metadata_http("GET", self.base + path, headers)

    def get(self, path: str) -> tuple:
        """(status, body); raises OSError/HTTPException when the service does not answer."""
        token = self.token if time.monotonic() < self.token_until else None
        token = token or self._fetch_token()
        status, body = self._get(path, token)
        if status in (401, 403):  # expired or revoked token (AWS: 401); fetch one and retry
            status, body = self._get(path, self._fetch_token())
        return status, body

    def forget_token(self) -> None:
        self.token = None


# ------------------------------------------------------------------------------ credentials


def parse_expiration(text: object) -> float | None:
    """An RFC 3339 UTC time ("2026-12-04T18:00:00Z") -> epoch seconds; None if unreadable."""
    if not isinstance(text, str):
        return None
    try:
        return float(timegm(time.strptime(text.strip()[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


class Credentials:
    def __init__(self, key: str, secret: str, token: str | None, expires: float | None):
        self.key = key
        self.secret = secret
        self.token = token or None
        self.expires = expires

    def fresh(self) -> bool:
        return self.expires is None or time.time() < self.expires - CREDENTIAL_MARGIN_S


class CredentialChain:
    """The environment's keys, else the box's role through instance metadata."""

    def __init__(self, metadata: MetadataSession, environ=None) -> None:
        self.metadata = metadata
        self.environ = os.environ if environ is None else environ
        self.current = None

    def get(self, force: bool = False) -> Credentials:
        if self.current is not None and self.current.fresh() and not force:
            return self.current
        key = self.environ.get("AWS_ACCESS_KEY_ID", "").strip()
        secret = self.environ.get("AWS_SECRET_ACCESS_KEY", "").strip()
        if key and secret:
            token = self.environ.get("AWS_SESSION_TOKEN", "").strip()
            self.current = Credentials(key, secret, token, None)
        else:
            self.current = self.from_metadata()
        return self.current

    def from_metadata(self) -> Credentials:
        spec = self.metadata.spec
        where = "the instance metadata service"
        try:
            status, body = self.metadata.get(spec["credentials_path"])
            role = body.decode("utf-8", "replace").strip().splitlines()[0] if body else ""
            if status != 200 or not role or "/" in role:
                raise StoreError(
                    f"no credentials: no AWS_ACCESS_KEY_ID in the environment and {where}"
                    f" names no role for this box (HTTP {status} for {spec['credentials_path']});"
                    " the box needs an instance role"
                )
            status, body = self.metadata.get(spec["credentials_path"] + quote(role, safe=""))
            document = json.loads(body.decode("utf-8")) if status == 200 else None
        except (OSError, HTTPException, ValueError) as exc:
            raise StoreError(f"no credentials: {where} did not answer ({one_line(exc)})") from exc
        key_name, secret_name, token_name = spec["credential_keys"]
        if not isinstance(document, dict) or not document.get(key_name):
            raise StoreError(f"no credentials: {where} gave none for role {role!r}")
        return Credentials(
            str(document[key_name]),
            str(document.get(secret_name, "")),
            str(document.get(token_name) or ""),
            parse_expiration(document.get("Expiration")),
        )


# ------------------------------------------------------------------------------ signing


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


def uri_encode(text: str, slash: bool = True) -> str:
    """SigV4's UriEncode: every byte but A-Z a-z 0-9 - _ . ~ (and / in S3 object paths)."""
    return quote(text, safe="-_.~/" if slash else "-_.~")


def canonical_query(params: dict) -> str:
    pairs = sorted((uri_encode(k, False), uri_encode(str(v), False)) for k, v in params.items())
    return "&".join(f"{k}={v}" for k, v in pairs)


def sign_v4(
    method: str,
    host: str,
    path: str,
    params: dict,
    headers: dict,
    payload_hash: str,
    credentials: Credentials,
    region: str,
    now: float | None = None,
) -> dict:
    """The request's headers with x-amz-date, x-amz-content-sha256, the session token and
    Authorization added (AWS Signature Version 4, service s3). `path` is already encoded."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    day = stamp[:8]
    signed = {k.lower(): " ".join(str(v).split()) for k, v in headers.items()}
    signed.update({"host": host, "x-amz-date": stamp, "x-amz-content-sha256": payload_hash})
    if credentials.token:
        signed["x-amz-security-token"] = credentials.token
    names = ";".join(sorted(signed))
    canonical = "\n".join(
        [
            method,
            path,
            canonical_query(params),
            "".join(f"{name}:{signed[name]}\n" for name in sorted(signed)),
            names,
            payload_hash,
        ]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = _hmac(("AWS4" + credentials.secret).encode("utf-8"), day)
    for part in (region, "s3", "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    signed["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={credentials.key}/{scope}, "
        f"SignedHeaders={names}, Signature={signature}"
    )
    signed.pop("host")  # urllib sends it from the URL
    return signed


# ------------------------------------------------------------------------------ responses


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def xml_items(body: bytes, name: str) -> list:
    """The text of every element called `name` (any namespace) in an XML body."""
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        return []
    return [element.text or "" for element in root.iter() if _local(element.tag) == name]


def xml_first(body: bytes, name: str) -> str:
    found = xml_items(body, name)
    return found[0] if found else ""


class Response:
    def __init__(self, status: int, headers, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def code(self) -> str:
        return xml_first(self.body, "Code") if self.body else ""

    def describe(self) -> str:
        message = xml_first(self.body, "Message") if self.body else ""
        text = " ".join(part for part in (self.code, message) if part)
        return f"HTTP {self.status}" + (f" {one_line(text)[:300]}" if text else "")


# ------------------------------------------------------------------------------ the store


def env_region(environ) -> str:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if environ.get(name, "").strip():
            return environ[name].strip()
    return ""


def store_endpoint(environ) -> str:
    for name in ("ORCH_STORE_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        if environ.get(name, "").strip():
            return environ[name].strip().rstrip("/")
    return ""


class S3Store:
    """One bucket: get_bytes, put_bytes, upload, download, list, delete (agent.py's store)."""

    def __init__(self, bucket: str, metadata_spec: dict, environ=None) -> None:
        environ = os.environ if environ is None else environ
        self.bucket = bucket
        base = environ.get("ORCH_AGENT_METADATA_URL", "").strip() or None
        self.metadata = MetadataSession(metadata_spec, base)
        self.credentials = CredentialChain(self.metadata, environ)
        self.endpoint = store_endpoint(environ)
        self._region = env_region(environ)
        self.opener = urllib.request.build_opener()  # honours HTTPS_PROXY / NO_PROXY

    @property
    def region(self) -> str:
        if not self._region:
            self._region = self._metadata_region() or "us-east-1"
        return self._region

    def _metadata_region(self) -> str:
        try:
            status, body = self.metadata.get(self.metadata.spec["region_path"])
        except (OSError, HTTPException):
            return ""
        text = body.decode("utf-8", "replace").strip() if status == 200 else ""
        return text if text and len(text) < 40 and " " not in text else ""

    def url_parts(self, key: str) -> tuple:
        """(scheme://host, host, encoded path) of an object (key "" for the bucket)."""
        if self.endpoint:
            split = urlsplit(self.endpoint)
            root = split.path.rstrip("/")
            path = f"{root}/{uri_encode(self.bucket)}/{uri_encode(key)}"
            return f"{split.scheme}://{split.netloc}", split.netloc, path
        if "." in self.bucket:  # dotted names break the wildcard certificate: path-style
            host = f"s3.{self.region}.amazonaws.com"
            return f"https://{host}", host, f"/{uri_encode(self.bucket)}/{uri_encode(key)}"
        host = f"{self.bucket}.s3.{self.region}.amazonaws.com"
        return f"https://{host}", host, "/" + uri_encode(key)

    # -------------------------------------------------------------- one request

    def request(self, method: str, key: str, params=None, body: bytes = b"", sink=None):
        """Send one signed request (retried on errors worth retrying): its Response. With
        `sink`, a 200's body is streamed into it instead of kept."""
        params = params or {}
        moved = False
        refreshed = False
        for attempt in range(TRIES):
            try:
                response = self._send(method, key, params, body, sink)
            except (OSError, HTTPException) as exc:
                if attempt + 1 == TRIES:
                    raise StoreError(f"{method} {self._where(key)}: {one_line(exc)}") from exc
                time.sleep(min(2**attempt, 8))
                continue
            new_region = response.headers.get("x-amz-bucket-region", "")
            if not moved and response.status in (301, 400) and new_region not in ("", self.region):
                self._region, moved = new_region, True  # the bucket lives elsewhere: its region
                continue
            if not refreshed and response.status in (400, 403) and response.code in EXPIRED:
                self.credentials.get(force=True)
                refreshed = True
                continue
            retry = response.status >= 500 or response.code in ("SlowDown", "Throttling")
            if retry and attempt + 1 < TRIES:
                time.sleep(min(2**attempt, 8))
                continue
            return response
        return response

    def _where(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def _send(self, method: str, key: str, params: dict, body: bytes, sink) -> Response:
        base, host, path = self.url_parts(key)
        headers = {}
        if method in ("PUT", "POST"):
            headers["content-length"] = str(len(body))
        signed = sign_v4(
            method,
            host,
            path,
            params,
            headers,
            hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256,
            self.credentials.get(),
            self.region,
        )
        query = canonical_query(params)
        url = base + path + ("?" + query if query else "")
        data = body if method in ("PUT", "POST") else None
        request = urllib.request.Request(url, data=data, headers=signed, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/octet-stream")  # not signed
        try:
            with self.opener.open(request, timeout=TIMEOUT_S) as answer:
                if sink is not None:
                    # A retry after a dropped answer starts the file again, as the SDKs'
                    # retried downloads do: no bytes of the broken answer stay in front.
                    sink.seek(0)
                    sink.truncate()
                    while True:
                        chunk = answer.read(CHUNK)
                        if not chunk:
                            break
                        sink.write(chunk)
                    return Response(answer.status, answer.headers, b"")
                return Response(answer.status, answer.headers, answer.read())
        except urllib.error.HTTPError as exc:
            return Response(exc.code, exc.headers, exc.read())

    def _ok(self, response: Response, what: str) -> Response:
        if not 200 <= response.status < 300:
            raise StoreError(f"{what}: {response.describe()}")
        return response

    # -------------------------------------------------------------- the store interface

    def get_bytes(self, key: str) -> bytes | None:
        response = self.request("GET", key)
        if response.status == 404 and response.code != "NoSuchBucket":
            return None
        return self._ok(response, "get " + self._where(key)).body

    def put_bytes(self, key: str, data: bytes) -> None:
        self._ok(self.request("PUT", key, body=data), "put " + self._where(key))

    def upload(self, path: str, key: str) -> None:
        size = os.path.getsize(path)  # FileNotFoundError when it vanished
        if size <= PART_SIZE:
            with open(path, "rb") as source:
                data = source.read()
            self.put_bytes(key, data)
            return
        self._upload_parts(path, key)

    def _upload_parts(self, path: str, key: str) -> None:
        where = f"upload {path} to {self._where(key)}"
        size = os.path.getsize(path)
        # Parts big enough that the file fits in MAX_PARTS of them (a file above 625 GiB
        # would otherwise need part 10,001, which S3 refuses).
        part_size = max(PART_SIZE, -(-size // MAX_PARTS))
        started = self._ok(self.request("POST", key, {"uploads": ""}), where)
        upload_id = xml_first(started.body, "UploadId")
        if not upload_id:
            raise StoreError(f"{where}: CreateMultipartUpload answered no UploadId")
        try:
            parts = []
            with open(path, "rb") as source:
                number = 1
                while True:
                    data = source.read(part_size)
                    if not data:
                        break
                    params = {"partNumber": str(number), "uploadId": upload_id}
                    answer = self._ok(self.request("PUT", key, params, data), where)
                    parts.append((number, answer.headers.get("ETag", "")))
                    number += 1
            listing = "".join(
                f"<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>" for n, etag in parts
            )
            document = f"<CompleteMultipartUpload>{listing}</CompleteMultipartUpload>".encode()
            done = self._ok(self.request("POST", key, {"uploadId": upload_id}, document), where)
            if xml_first(done.body, "Code"):  # a 200 that carries an error (S3 does this)
                raise StoreError(f"{where}: {Response(500, {}, done.body).describe()}")
        except BaseException:
            with contextlib.suppress(StoreError):  # AbortMultipartUpload: no parts left to bill
                self.request("DELETE", key, {"uploadId": upload_id})
            raise

    def download(self, key: str, path: str) -> None:
        with open(path, "wb") as sink:
            response = self.request("GET", key, sink=sink)
        self._ok(response, "download " + self._where(key))

    def list(self, prefix: str) -> list:
        """Every key under prefix (ListObjectsV2, page by page). The keys come URL-encoded
        (encoding-type=url), as XML 1.0 cannot carry some characters a key may hold (ASCII 0
        to 10...): https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html
        An answer that is not XML fails the listing rather than reading as no keys."""
        keys = []
        where = "list " + self._where(prefix)
        params = {"list-type": "2", "prefix": prefix, "encoding-type": "url"}
        while True:
            body = self._ok(self.request("GET", "", params), where).body
            try:
                ElementTree.fromstring(body)
            except ElementTree.ParseError as exc:
                raise StoreError(f"{where}: the answer is not S3's XML ({exc})") from exc
            found = xml_items(body, "Key")
            if xml_first(body, "EncodingType") == "url":  # as botocore decodes them
                found = [unquote_plus(key) for key in found]
            keys.extend(found)
            token = xml_first(body, "NextContinuationToken")
            if xml_first(body, "IsTruncated") != "true" or not token:
                return keys
            params = dict(params, **{"continuation-token": token})

    def delete(self, key: str) -> None:
        response = self.request("DELETE", key)
        if response.status != 404 or response.code == "NoSuchBucket":
            self._ok(response, "delete " + self._where(key))
