"""Shared records of the warm pool: a local folder by default, S3 for CI.

A record is a JSON object under a key such as `pools/gpu/pool.json`, read with an opaque
version (its ETag) and changed only if that version is still current, so two runners can
never both take one box and no lock server is needed:

    store = open_store(url)                    # None: $ORCH_HOME/pools, or s3://bucket/prefix
    store.create(key, data)                    # Conflict if the key exists
    store.replace(key, data, etag)             # Conflict if it changed (or went) since read
    update(store, key, change)                 # read, change a copy, replace; retry conflicts

Keys are relative paths of segments made of letters, digits and `._-` joined by `/`, with
no `..` anywhere; a segment may not start with `.` (the local store keeps its lock and
temporary files there). Secrets (`put_secret`) share the key space and show in `list`.

S3: records are written with conditional PutObject (If-None-Match: * to create, If-Match:
<ETag> to replace). S3 evaluates the condition and the write atomically; a failed condition
answers 412 PreconditionFailed, a write racing another conditional write of the key answers
409 ConditionalRequestConflict, and If-Match on a deleted key answers 404 NoSuchKey: all three
are a Conflict here.
    https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html
    https://docs.aws.amazon.com/AmazonS3/latest/API/API_PutObject.html (If-Match, If-None-Match)

Local: a folder (mode 0700), one JSON file per record, the ETag the SHA-256 of its bytes;
create, replace and delete hold an flock on a per-key lock file and write a temporary file
then os.replace it, so they are atomic across processes on one machine and a reader never
sees half a record.
"""

from __future__ import annotations

import contextlib
import copy
import enum
import fcntl
import hashlib
import json
import os
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Protocol, TypeVar
from urllib.parse import urlsplit

from orchestrator import jsontext
from orchestrator.errors import OrchError, UsageError
from orchestrator.provision import state_backend

T = TypeVar("T")

_SEGMENT = r"[A-Za-z0-9_-][A-Za-z0-9._-]*"
_KEY_RE = re.compile(rf"^{_SEGMENT}(/{_SEGMENT})*$")
_PREFIX_RE = re.compile(r"^[A-Za-z0-9._/-]*$")
MAX_KEY = 512
MIN_BACKOFF_S = 0.01
MAX_BACKOFF_S = 0.5


class Conflict(OrchError):
    """The object changed (or, for create, exists) since it was read."""


class NoRecord(OrchError):
    """`update` found no record under the key (deleted meanwhile, or never made)."""


@dataclass(frozen=True, slots=True)
class Versioned:
    data: dict[str, Any]
    etag: str


class StoreKind(enum.Enum):
    """Where a pool's record lives, and so where its boxes' Terraform state and keys live."""

    LOCAL = "local"  # this machine's ORCH_HOME: boxes are reached from this machine only
    S3 = "s3"  # a bucket: the boxes' state and keys live next to the record, for any runner

    @property
    def shared(self) -> bool:
        return self is StoreKind.S3


class RecordStore(Protocol):
    kind: StoreKind
    url: str  # "s3://bucket/prefix" or the local folder

    def read(self, key: str) -> Versioned | None: ...  # the JSON object, None when absent

    def create(self, key: str, data: dict[str, Any]) -> str: ...  # etag; Conflict if it exists

    def replace(self, key: str, data: dict[str, Any], etag: str) -> str: ...  # Conflict if stale

    def delete(self, key: str) -> None: ...  # absent is fine

    def list(self, prefix: str) -> list[str]: ...  # keys under prefix (relative), sorted

    def put_secret(self, key: str, text: str) -> None: ...

    def get_secret(self, key: str) -> str | None: ...


def open_store(url: str | None) -> RecordStore:
    """None -> the local store under $ORCH_HOME/pools; "s3://bucket/prefix" -> S3 (validated
    with the rules of `--state`)."""
    if url is None:
        from orchestrator.provision.boxes import orch_home

        return LocalStore(orch_home() / "pools")
    location = check_store_url(url)
    check_conditional_writes(location.url)
    return S3Store(location.bucket, location.prefix)


def check_store_url(url: str) -> state_backend.StateLocation:
    """A pool store's "s3://bucket/prefix", checked with the rules of `--state` (also a job
    file's pool.store, at loading)."""
    try:
        return state_backend.parse_state_url(url)
    except UsageError as exc:
        raise UsageError(
            f"bad pool store {url!r}: expected s3://bucket/prefix",
            hint="letters, digits and -_.!*'()/ in the prefix; omit it for the local store",
        ) from exc


def store_tag(store: RecordStore) -> str:
    """The value of a pool box's orch:pool-store tag: "local", or the S3 store's URL."""
    return store.url if store.kind.shared else "local"


def check_conditional_writes(url: str) -> None:
    """UsageError (before any request) when AWS_ENDPOINT_URL(_S3), which boto3 reads in that
    order, points at an object store that a cloud says has no conditional writes: a pool
    record there would be overwritten by concurrent runners (Alibaba OSS: no If-Match)."""
    from orchestrator import clouds

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    try:
        host = urlsplit(endpoint or "").hostname or ""
    except ValueError:
        host = ""
    found = clouds.object_store_at(host) if host else None
    if found is not None and not found.conditional_writes:
        raise UsageError(
            f"pool store {url} is on {found.title} ({host}), which cannot hold a pool record: "
            "pools need AWS S3, or another store with conditional writes (If-Match)",
            hint="keep checkpoints there (orch run --store), and the pool's record in S3",
        )


def update(
    store: RecordStore,
    key: str,
    change: Callable[[dict[str, Any]], T],
    *,
    attempts: int = 50,
) -> tuple[dict[str, Any], T]:
    """Change record `key` with optimistic concurrency: read it, call `change` on a copy (it
    mutates the dict in place and returns a value), replace it if nobody wrote it meanwhile,
    else read again and retry after a jittered back-off (10 ms, growing to 500 ms).

    `change` may run several times, so it must depend only on the dict it is given. When it
    leaves the dict as it was, nothing is written. Returns (the record as stored, what the
    last `change` returned). A missing record is NoRecord, an OrchError (creating is
    `create`'s job); `attempts` conflicts in a row are an OrchError too.
    """
    for attempt in range(attempts):
        current = store.read(key)
        if current is None:
            raise NoRecord(f"no such record {key} in {store.url}")
        data = copy.deepcopy(current.data)
        result = change(data)
        if data == current.data:
            return data, result
        try:
            store.replace(key, data, current.etag)
        except Conflict:
            ceiling = min(MAX_BACKOFF_S, MIN_BACKOFF_S * 2**attempt)
            time.sleep(random.uniform(MIN_BACKOFF_S, ceiling))
            continue
        return data, result
    raise OrchError(
        f"gave up updating {key} in {store.url}: it changed under {attempts} attempts in a row",
        hint="many runners are changing it at once; try again",
    )


def check_key(key: str) -> str:
    if not isinstance(key, str) or len(key) > MAX_KEY or not _KEY_RE.match(key) or ".." in key:
        raise UsageError(
            f"bad pool store key {key!r}",
            hint="segments of letters, digits and ._- joined by '/', none starting with '.'",
        )
    return key


def check_prefix(prefix: str) -> str:
    if (
        not isinstance(prefix, str)
        or len(prefix) > MAX_KEY
        or not _PREFIX_RE.match(prefix)
        or prefix.startswith("/")
        or ".." in prefix
        or "//" in prefix
    ):
        raise UsageError(f"bad pool store prefix {prefix!r}")
    return prefix


def encode(data: dict[str, Any]) -> bytes:
    if not isinstance(data, dict):
        raise TypeError(f"a pool record is a JSON object, not {type(data).__name__}")
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def decode(body: bytes, key: str, url: str) -> dict[str, Any]:
    try:
        data = jsontext.loads(body)  # also for JSON nested too deeply
    except ValueError as exc:
        raise OrchError(f"record {key} in {url} is damaged: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise OrchError(f"record {key} in {url} is not a JSON object")
    return data


# ------------------------------------------------------------------------------ local


class LocalStore:
    """Records as files under `root` (mode 0700), for one machine's processes.

    root/<key>                     a record (JSON) or a secret (mode 0600)
    root/.locks/<sha256>.lock      flock target of a key, never removed
    root/<dir>/.<name>.<id>.tmp    a write in progress (os.replace'd over <name>)
    """

    kind = StoreKind.LOCAL

    def __init__(self, root: Path):
        self.root = Path(root)
        self.url = str(self.root)
        try:
            self._mkdirs(self.root / ".locks")
            os.chmod(self.root, 0o700)
        except OSError as exc:
            raise OrchError(f"cannot use pool store {self.url}: {exc}") from None

    def read(self, key: str) -> Versioned | None:
        body = self._bytes(check_key(key))
        if body is None:
            return None
        return Versioned(decode(body, key, self.url), _sha256(body))

    def create(self, key: str, data: dict[str, Any]) -> str:
        body = encode(data)
        with self._locked(check_key(key), "create"):
            if self._bytes(key) is not None:
                raise Conflict(f"record {key} already exists in {self.url}")
            self._write(key, body, 0o600)
        return _sha256(body)

    def replace(self, key: str, data: dict[str, Any], etag: str) -> str:
        body = encode(data)
        with self._locked(check_key(key), "replace"):
            current = self._bytes(key)
            if current is None:
                raise Conflict(f"record {key} in {self.url} was deleted since it was read")
            if _sha256(current) != etag:
                raise Conflict(f"record {key} in {self.url} changed since it was read")
            self._write(key, body, 0o600)
        return _sha256(body)

    def delete(self, key: str) -> None:
        with self._locked(check_key(key), "delete"):
            try:
                (self.root / key).unlink(missing_ok=True)
            except (IsADirectoryError, NotADirectoryError):
                pass
            except OSError as exc:
                raise OrchError(f"cannot delete {key} in {self.url}: {exc}") from None

    def list(self, prefix: str) -> list[str]:
        check_prefix(prefix)
        keys = []
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            base = Path(folder).relative_to(self.root).as_posix()
            for name in files:
                if name.startswith("."):
                    continue
                key = name if base == "." else f"{base}/{name}"
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def put_secret(self, key: str, text: str) -> None:
        with self._locked(check_key(key), "store"):
            self._write(key, text.encode(), 0o600)

    def get_secret(self, key: str) -> str | None:
        body = self._bytes(check_key(key))
        return None if body is None else body.decode()

    # -- helpers

    def _bytes(self, key: str) -> bytes | None:
        try:
            return (self.root / key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        except OSError as exc:
            raise OrchError(f"cannot read {key} in {self.url}: {exc}") from None

    @contextlib.contextmanager
    def _locked(self, key: str, what: str) -> Iterator[None]:
        lock = self.root / ".locks" / f"{_sha256(key.encode())[:40]}.lock"
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise OrchError(f"cannot {what} {key} in {self.url}: {exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the flock

    def _write(self, key: str, body: bytes, mode: int) -> None:
        path = self.root / key
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            self._mkdirs(path.parent)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
            with os.fdopen(fd, "wb") as sink:
                sink.write(body)
                sink.flush()
                os.fsync(sink.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise OrchError(f"cannot write {key} in {self.url}: {exc}") from None

    def _mkdirs(self, folder: Path) -> None:
        missing = []
        while not folder.is_dir():
            missing.append(folder)
            folder = folder.parent
        for path in reversed(missing):
            with contextlib.suppress(FileExistsError):
                path.mkdir(mode=0o700)


def _sha256(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


# ------------------------------------------------------------------------------ S3

_CONFLICT = ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")
_MISSING = ("NoSuchKey", "404", "NotFound")
_DENIED = ("AccessDenied", "403", "AllAccessDisabled")
_WRITE_ID = "orch-write"  # x-amz-meta-orch-write: a fresh id per write


class S3Store:
    """Records under s3://bucket/prefix, replaced with conditional writes (module docstring).

    Credentials and endpoint come from the standard AWS variables, as for `--state`.

    Secrets (a box's SSH private key) are stored with SSE-S3 (AES256) like the records: that
    protects them at rest only. Whoever can read the pool prefix can read them, so the bucket
    policy (who may s3:GetObject under the prefix) is the boundary; grant it to the CI runners
    that lease boxes and nobody else.
    """

    kind = StoreKind.S3

    def __init__(self, bucket: str, prefix: str):
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._client: Any = None
        self._client_lock = threading.Lock()

    def read(self, key: str) -> Versioned | None:
        got = self._get(check_key(key))
        if got is None:
            return None
        body, etag = got
        return Versioned(decode(body, key, self.url), etag)

    def create(self, key: str, data: dict[str, Any]) -> str:
        return self._put(check_key(key), encode(data), "application/json", IfNoneMatch="*")

    def replace(self, key: str, data: dict[str, Any], etag: str) -> str:
        return self._put(check_key(key), encode(data), "application/json", IfMatch=etag)

    def delete(self, key: str) -> None:

        try:
            self._s3().delete_object(Bucket=self.bucket, Key=self._key(check_key(key)))
        except state_backend.client_errors() as exc:
            self._fail(exc, "s3:DeleteObject", f"delete {key} in")

    def list(self, prefix: str) -> list[str]:

        base = f"{self.prefix}/" if self.prefix else ""
        keys = []
        try:
            pages = self._s3().get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.bucket, Prefix=base + check_prefix(prefix)):
                keys.extend(item["Key"][len(base) :] for item in page.get("Contents") or [])
        except state_backend.client_errors() as exc:
            self._fail(exc, "s3:ListBucket", "list")
        return sorted(keys)

    def put_secret(self, key: str, text: str) -> None:
        self._put(check_key(key), text.encode(), "text/plain")

    def get_secret(self, key: str) -> str | None:
        got = self._get(check_key(key))
        return None if got is None else got[0].decode()

    # -- helpers

    def _s3(self) -> Any:
        with self._client_lock:
            if self._client is None:
                location = state_backend.StateLocation(self.url, self.bucket, self.prefix)
                self._client = state_backend.s3_client(state_backend.bucket_region(location))
            return self._client

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _get(self, key: str) -> tuple[bytes, str] | None:

        try:
            response = self._s3().get_object(Bucket=self.bucket, Key=self._key(key))
            return response["Body"].read(), response["ETag"]
        except state_backend.client_errors() as exc:
            if state_backend.error_code(exc) in _MISSING:
                return None
            self._fail(exc, "s3:GetObject", f"read {key} from")

    def _put(self, key: str, body: bytes, content_type: str, **condition: str) -> str:
        """PutObject with SSE-S3 and the condition; returns the new ETag."""

        write_id = uuid.uuid4().hex
        try:
            response = self._s3().put_object(
                Bucket=self.bucket,
                Key=self._key(key),
                Body=body,
                ContentType=content_type,
                ServerSideEncryption="AES256",
                Metadata={_WRITE_ID: write_id},
                **condition,
            )
            return response["ETag"]
        except state_backend.client_errors() as exc:
            code = state_backend.error_code(exc)
            if condition and (code in _CONFLICT or ("IfMatch" in condition and code in _MISSING)):
                # botocore retries a write whose answer was lost (timeout, 5xx); the retry
                # then fails its condition against our own first attempt. Our write id on
                # the object says whether it landed. (Not if another write replaced it since:
                # then the caller retries a change that was applied once already.)
                retried = getattr(exc, "response", {}).get("ResponseMetadata", {})
                if retried.get("RetryAttempts"):
                    landed = self._landed(key, write_id)
                    if landed is not None:
                        return landed
                if "IfNoneMatch" in condition:
                    raise Conflict(
                        f"record {key} already exists (or is being created) in {self.url}"
                    ) from None
                raise Conflict(f"record {key} in {self.url} changed since it was read") from None
            self._fail(exc, "s3:PutObject", f"write {key} in")

    def _landed(self, key: str, write_id: str) -> str | None:
        """The ETag of `key` if its current version is the write `write_id`."""

        try:
            head = self._s3().head_object(Bucket=self.bucket, Key=self._key(key))
        except state_backend.client_errors():
            return None
        return head["ETag"] if head.get("Metadata", {}).get(_WRITE_ID) == write_id else None

    def _fail(self, exc: BaseException, permission: str, what: str) -> NoReturn:

        code = state_backend.error_code(exc)
        if code in _DENIED:
            raise UsageError(
                f"cannot use pool store {self.url}: {permission} is denied",
                hint="the pool store needs s3:ListBucket, s3:GetObject, s3:PutObject and "
                "s3:DeleteObject under its prefix",
            ) from None
        if code == "NoSuchBucket":
            raise UsageError(f"pool store bucket {self.bucket} does not exist") from None
        raise OrchError(f"cannot {what} {self.url}: {exc}") from None
