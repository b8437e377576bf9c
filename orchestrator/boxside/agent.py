#!/usr/bin/env python3
"""orch's checkpoint agent: runs ON the GPU box, next to the user's training command.

orch copies this file, its S3 client (box_s3.py) and metadata.json (each cloud's instance
metadata service, as the clouds supply it) into one folder on the box (orchestrator/boxside/)
and runs it with the box's own `python3`: the standard library only (Python 3.8 syntax and
APIs). It imports nothing from `orchestrator`. Alibaba OSS endpoints still go through boto3,
or else the `aws` CLI.

    agent.py restore --dir DIR --store s3://BUCKET/PREFIX
    agent.py upload  --dir DIR --store s3://BUCKET/PREFIX
    agent.py watch   --dir DIR --store s3://BUCKET/PREFIX --interval SECONDS --cloud aws|aliyun
                     --state-dir STATEDIR [--pid PID] [--notice-poll SECONDS]

Store layout (one writer per store; a reader never sees a half-written checkpoint):

    PREFIX/checkpoints/00000007/<relative path>   the files of checkpoint 7, uploaded first
    PREFIX/checkpoints/00000007.manifest.json     {"seq", "files": {relpath: size},
                                                   "mtime_ns": {relpath: ns},
                                                   "sha256": {relpath: hex}, "created"}
    PREFIX/checkpoints/LATEST                     "00000007", written last: the commit

Restore reads LATEST, then that manifest, and validates all of it (paths, sizes, times,
digests) before it writes anything; then it downloads exactly the files listed, each to a
temporary name, checks each one's size and SHA-256, and only when all match renames them into
place: a damaged or tampered checkpoint is refused whole. After each commit the newest KEEP
committed checkpoints stay and older ones (and abandoned half-uploads) go.

`watch` writes its outcome to STATEDIR/agent.json when it ends: {"final_upload": "ok" or
"failed", "checkpoint": the last one it committed, "failed_rounds", "error"}; orch reads it.

Exit status: 0 done (also "no checkpoint"), 1 a storage error or a refused checkpoint,
2 bad usage or no S3 client at all.

Environment: credentials come from the environment's AWS_ACCESS_KEY_ID, else from the box's
instance role through the instance metadata service (box_s3.py). AWS_ENDPOINT_URL /
AWS_ENDPOINT_URL_S3 / ORCH_STORE_ENDPOINT name an S3-compatible endpoint (e.g. Alibaba OSS);
ORCH_AGENT_S3_CLIENT=builtin|boto3|cli picks the client (default: builtin, boto3-or-CLI for OSS);
ORCH_AGENT_METADATA_URL replaces the instance metadata service's base URL (tests only).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from http.client import HTTPException
from urllib.parse import urlsplit

try:  # on the box: box_s3.py lies next to this file (the script's folder is on sys.path)
    import box_s3
except ImportError:  # imported as orchestrator.boxside.agent (orch's own tests)
    from orchestrator.boxside import box_s3

LOG = "orch-agent:"
SEQ_WIDTH = 8
KEEP = 2
# Tries per file when it keeps changing while it is uploaded (the trainer is writing it).
CHANGE_TRIES = 3
# Tries of the last upload when the training process has exited or the agent is stopped.
FINAL_TRIES = 3
# How often `watch` looks at the training process and at signals between rounds.
TICK_S = 0.1
# One run of the aws CLI for a small object (a pointer, a manifest, a listing, a delete).
CLI_SMALL_TIMEOUT_S = 300
TMP_PREFIX = ".orch-agent-tmp-"
# Largest size or time a manifest may state: os.utime and file sizes are 64-bit.
MAX_INT64 = 2**63 - 1
HASH_CHUNK = 1 << 20

# Each cloud's instance metadata service (base URL, token headers, the paths of spot notices,
# role credentials and region, with the references they follow) is supplied by the cloud
# itself (orchestrator/clouds/*/box_metadata.py): orch writes every cloud's entry to
# metadata.json next to this file (orchestrator/boxside/__init__.py), and --cloud picks one.
METADATA_FILE = "metadata.json"


def cloud_specs() -> dict:
    """Every cloud's metadata entry, from metadata.json next to this file."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), METADATA_FILE)
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def cloud_spec(cloud: str) -> dict:
    """One cloud's metadata entry: "base", "ttl_header", "token_header", "notice_path",
    "credentials_path", "credential_keys", "region_path" (and "rebalance_path" on AWS)."""
    return cloud_specs()[cloud]


StoreError = box_s3.StoreError  # an object storage request failed


class NoClient(Exception):
    """Neither boto3 nor the aws CLI is available."""


class BadCheckpoint(Exception):
    """The store holds a malformed or unsafe pointer or manifest."""


class FileChanging(Exception):
    """A file kept changing while it was being uploaded."""


# ------------------------------------------------------------------------------ output


def one_line(value: object) -> str:
    return " ".join(str(value).split())


def say(message: str) -> None:
    print(LOG + " " + message, flush=True)


def warn(message: str) -> None:
    print(LOG + " " + one_line(message), file=sys.stderr, flush=True)


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_json(path: str, value: dict) -> None:
    """Write a JSON file atomically (readers see the old or the new one, never half)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=directory)
    with os.fdopen(handle, "w") as sink:
        json.dump(value, sink, sort_keys=True)
        sink.write("\n")
    os.replace(tmp, path)


# ------------------------------------------------------------------------------ storage


def parse_store(url: str) -> tuple[str, str]:
    """s3://BUCKET/PREFIX -> (bucket, prefix without surrounding slashes)."""
    if not url.startswith("s3://"):
        raise ValueError("--store must look like s3://BUCKET/PREFIX, not " + repr(url))
    bucket, _, prefix = url[len("s3://") :].partition("/")
    if not bucket:
        raise ValueError("--store names no bucket: " + repr(url))
    return bucket, prefix.strip("/")


def is_oss(endpoint: str) -> bool:
    host = urlsplit(endpoint).hostname or ""
    return host.endswith(".aliyuncs.com")


def client_config(endpoint: str):  # noqa: ANN201 - a botocore Config
    """botocore settings: short connects, standard retries, and what Alibaba OSS needs.

    OSS serves only virtual-hosted addressing ("path-style requests are denied"):
    https://www.alibabacloud.com/help/en/oss/developer-reference/compatibility-with-amazon-s3
    and its AWS SDK guide configures boto3 with signature_version="s3" because boto3's SigV4
    uploads use aws-chunked encoding, which OSS rejects:
    https://help.aliyun.com/en/oss/developer-reference/use-aws-sdks-to-access-oss
    botocore >= 1.36 also adds trailing checksums by default; "when_required" turns them off.
    """
    from botocore.config import Config

    options = {"connect_timeout": 10, "read_timeout": 120, "retries": {"max_attempts": 5}}
    if not is_oss(endpoint):
        return Config(**options)
    options.update(signature_version="s3", s3={"addressing_style": "virtual"})
    try:
        return Config(
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            **options,
        )
    except TypeError:  # botocore older than 1.36: no such options, and no trailing checksums
        return Config(**options)


def role_credential_provider(spec: dict):  # noqa: ANN201 - a botocore CredentialProvider
    """A botocore credential provider for the box's role as `spec`'s metadata serves it (the
    instance RAM role on Aliyun, which boto3's own chain does not know), refreshed before it
    expires (box_s3.CredentialChain reads it)."""
    from botocore.credentials import CredentialProvider, RefreshableCredentials

    base = os.environ.get("ORCH_AGENT_METADATA_URL", "").strip() or None
    chain = box_s3.CredentialChain(box_s3.MetadataSession(spec, base), {})

    def fetch() -> dict:
        found = chain.get(force=True)
        expires = found.expires or time.time() + 3600
        return {
            "access_key": found.key,
            "secret_key": found.secret,
            "token": found.token,
            "expiry_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires)),
        }

    class RoleProvider(CredentialProvider):
        METHOD = "instance-role-metadata"

        def load(self):  # noqa: ANN202 - botocore's interface
            try:
                return RefreshableCredentials.create_from_metadata(fetch(), fetch, self.METHOD)
            except StoreError:
                return None  # no role: the rest of boto3's chain decides

    return RoleProvider()


class Boto3Store:
    """The bucket through boto3. With `role_spec` (Aliyun), boto3's credential chain reads the
    box's role from that cloud's metadata right after the environment's keys."""

    def __init__(self, bucket: str, role_spec: dict | None = None) -> None:
        import boto3
        import botocore.session
        from botocore.exceptions import BotoCoreError, ClientError
        from botocore.parsers import ResponseParserError  # an HTML page, not S3's XML

        self.bucket = bucket
        self.client_error = ClientError
        self.errors = (BotoCoreError, ClientError, ResponseParserError)
        endpoint = os.environ.get("ORCH_STORE_ENDPOINT", "").strip()
        kwargs = {"config": client_config(endpoint)}
        if endpoint:
            kwargs["endpoint_url"] = endpoint
        core = botocore.session.get_session()
        if role_spec is not None:
            resolver = core.get_component("credential_provider")
            resolver.insert_after("env", role_credential_provider(role_spec))
        try:
            self.client = boto3.Session(botocore_session=core).client("s3", **kwargs)
        except self.errors as exc:
            raise StoreError("cannot make an S3 client: " + one_line(exc)) from exc

    def _fail(self, what: str, exc: Exception) -> StoreError:
        return StoreError(what + ": " + one_line(exc))

    def get_bytes(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is no such key."""
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except self.client_error as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404", "NotFound"):
                return None
            raise self._fail(f"get s3://{self.bucket}/{key}", exc) from exc
        except self.errors as exc:
            raise self._fail(f"get s3://{self.bucket}/{key}", exc) from exc

    def put_bytes(self, key: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data)
        except self.errors as exc:
            raise self._fail(f"put s3://{self.bucket}/{key}", exc) from exc

    def upload(self, path: str, key: str) -> None:
        if not os.path.exists(path):
            raise FileNotFoundError(path)
        try:
            self.client.upload_file(path, self.bucket, key)
        except self.errors as exc:
            raise self._fail(f"upload {path} to s3://{self.bucket}/{key}", exc) from exc

    def download(self, key: str, path: str) -> None:
        try:
            self.client.download_file(self.bucket, key, path)
        except self.errors as exc:
            raise self._fail(f"download s3://{self.bucket}/{key}", exc) from exc

    def list(self, prefix: str) -> list[str]:
        keys = []
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            for page in pages:
                keys.extend(item["Key"] for item in page.get("Contents", []))
        except self.errors as exc:
            raise self._fail(f"list s3://{self.bucket}/{prefix}", exc) from exc
        return keys

    def delete(self, key: str) -> None:
        # One DeleteObject per key: DeleteObjects needs a Content-MD5 that OSS insists on and
        # newer botocore no longer sends.
        try:
            self.client.delete_object(Bucket=self.bucket, Key=key)
        except self.errors as exc:
            raise self._fail(f"delete s3://{self.bucket}/{key}", exc) from exc


class CliStore:
    """The bucket through the `aws` CLI (`aws s3 cp/ls/rm`), for boxes without boto3."""

    def __init__(self, bucket: str, aws: str) -> None:
        self.bucket = bucket
        self.command = [aws]
        self.env = None
        endpoint = os.environ.get("ORCH_STORE_ENDPOINT", "").strip()
        if endpoint:
            self.command += ["--endpoint-url", endpoint]
        if is_oss(endpoint):  # see client_config; the CLI reads these from the environment
            self.env = dict(
                os.environ,
                AWS_REQUEST_CHECKSUM_CALCULATION="when_required",
                AWS_RESPONSE_CHECKSUM_VALIDATION="when_required",
            )

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def _run(
        self, args: list[str], data: bytes | None = None, timeout: float | None = None
    ) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(
                self.command + args,
                input=data,
                capture_output=True,
                env=self.env,
                timeout=timeout,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise StoreError("aws " + " ".join(args[:3]) + ": " + one_line(exc)) from exc

    def _check(self, result: subprocess.CompletedProcess, what: str) -> None:
        if result.returncode != 0:
            detail = result.stderr.decode("utf-8", "replace").strip()
            raise StoreError(f"{what}: aws exited {result.returncode}: {one_line(detail)}")

    def get_bytes(self, key: str) -> bytes | None:
        result = self._run(["s3", "cp", self.url(key), "-"], timeout=CLI_SMALL_TIMEOUT_S)
        detail = result.stderr.decode("utf-8", "replace")
        if result.returncode != 0 and ("(404)" in detail or "NoSuchKey" in detail):
            # `s3 cp` answers a missing bucket with the same HeadObject 404 as a missing key;
            # listing tells them apart (NoSuchBucket fails it).
            self.list(key)
            return None
        self._check(result, "get " + self.url(key))
        return result.stdout

    def put_bytes(self, key: str, data: bytes) -> None:
        result = self._run(
            ["s3", "cp", "-", self.url(key), "--only-show-errors"],
            data=data,
            timeout=CLI_SMALL_TIMEOUT_S,
        )
        self._check(result, "put " + self.url(key))

    def upload(self, path: str, key: str) -> None:
        if not os.path.exists(path):
            raise FileNotFoundError(path)
        result = self._run(["s3", "cp", path, self.url(key), "--only-show-errors"])
        if result.returncode != 0 and not os.path.exists(path):
            raise FileNotFoundError(path)
        self._check(result, f"upload {path} to {self.url(key)}")

    def download(self, key: str, path: str) -> None:
        result = self._run(["s3", "cp", self.url(key), path, "--only-show-errors"])
        self._check(result, "download " + self.url(key))

    def list(self, prefix: str) -> list[str]:
        result = self._run(
            ["s3", "ls", self.url(prefix), "--recursive"], timeout=CLI_SMALL_TIMEOUT_S
        )
        # `aws s3 ls` exits 1, saying nothing, when no key matches.
        if result.returncode == 1 and not result.stdout.strip() and not result.stderr.strip():
            return []
        self._check(result, "list " + self.url(prefix))
        keys = []
        for line in result.stdout.decode("utf-8", "replace").splitlines():
            fields = line.split(None, 3)  # date, time, size, key (keys may hold spaces)
            if len(fields) == 4 and fields[3].startswith(prefix):
                keys.append(fields[3])
        return keys

    def delete(self, key: str) -> None:
        result = self._run(
            ["s3", "rm", self.url(key), "--only-show-errors"], timeout=CLI_SMALL_TIMEOUT_S
        )
        self._check(result, "delete " + self.url(key))


S3_CLIENTS = ("builtin", "boto3", "cli")


def open_store(bucket: str, cloud: str = "aws"):  # noqa: ANN201 - an S3Store, Boto3Store or CliStore
    """The built-in client (box_s3) by default; boto3, else the aws CLI, for OSS endpoints
    (whose S3-compatible SigV4 mode is off unless Alibaba enables it for the account) or when
    ORCH_AGENT_S3_CLIENT asks for them."""
    choice = os.environ.get("ORCH_AGENT_S3_CLIENT", "").strip()
    if choice and choice not in S3_CLIENTS:
        raise NoClient(f"ORCH_AGENT_S3_CLIENT must be one of {', '.join(S3_CLIENTS)}")
    if not choice:
        choice = "boto3" if is_oss(box_s3.store_endpoint(os.environ)) else "builtin"
    if choice == "builtin":
        return box_s3.S3Store(bucket, cloud_spec(cloud))
    if choice == "boto3":
        try:
            import boto3  # noqa: F401
        except ImportError:
            choice = "cli"
        else:
            # boto3 finds an EC2 instance profile by itself; an ECS RAM role it needs shown.
            return Boto3Store(bucket, cloud_spec(cloud) if cloud == "aliyun" else None)
    aws = shutil.which("aws")
    if aws is None:
        raise NoClient(
            "no S3 client on this box: neither the boto3 module nor the aws CLI was found"
            " (pip install boto3, or install the AWS CLI)"
        )
    return CliStore(bucket, aws)


# ------------------------------------------------------------------------------ layout


def is_seq(text: str) -> bool:
    return text.isdigit() and text.isascii()


def seq_name(seq: int) -> str:
    return str(seq).zfill(SEQ_WIDTH)


class Layout:
    """Where a checkpoint's pieces live under PREFIX/checkpoints/."""

    def __init__(self, prefix: str) -> None:
        self.root = (prefix + "/" if prefix else "") + "checkpoints/"

    def latest(self) -> str:
        return self.root + "LATEST"

    def manifest(self, seq: int) -> str:
        return self.root + seq_name(seq) + ".manifest.json"

    def files(self, seq: int) -> str:
        return self.root + seq_name(seq) + "/"

    def file(self, seq: int, rel: str) -> str:
        return self.files(seq) + rel


MANIFEST_SUFFIX = ".manifest.json"


def scan_store(store, layout: Layout) -> tuple[set[int], dict[int, list[str]]]:
    """(committed seqs: those with a manifest, {seq: the keys of its files}), in one listing."""
    committed, files = set(), {}
    for key in store.list(layout.root):
        name = key[len(layout.root) :]
        head, slash, _ = name.partition("/")
        if slash and is_seq(head):
            files.setdefault(int(head), []).append(key)
        elif name.endswith(MANIFEST_SUFFIX) and is_seq(name[: -len(MANIFEST_SUFFIX)]):
            committed.add(int(name[: -len(MANIFEST_SUFFIX)]))
    return committed, files


def read_latest(store, layout: Layout) -> int | None:
    raw = store.get_bytes(layout.latest())
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace").strip()
    if not is_seq(text):
        raise BadCheckpoint(f"LATEST holds {text[:40]!r}, not a checkpoint number")
    return int(text)


def check_relpath(rel: object) -> str:
    """A manifest's relative path, refused unless it stays inside the directory."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\x00" in rel:
        raise BadCheckpoint(f"unsafe path in manifest: {rel!r}")
    if rel.startswith("/") or any(part in ("", ".", "..") for part in rel.split("/")):
        raise BadCheckpoint(f"unsafe path in manifest: {rel!r}")
    return rel


def is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INT64


def is_digest(value: object) -> bool:
    return (
        isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
    )


def file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def parse_manifest(raw: bytes, seq: int) -> tuple[dict[str, int], dict[str, int], dict[str, str]]:
    """({relpath: size}, {relpath: mtime_ns}, {relpath: sha256}) of a manifest, every field
    validated: a bad one refuses the whole checkpoint, before anything is written."""
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadCheckpoint(f"manifest of checkpoint {seq_name(seq)} is not JSON") from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise BadCheckpoint(f"manifest of checkpoint {seq_name(seq)} has no files")
    if manifest.get("seq", seq) != seq:
        raise BadCheckpoint(f"manifest of checkpoint {seq_name(seq)} names another seq")
    name = seq_name(seq)
    files = {}
    for rel, size in manifest["files"].items():
        if not is_count(size):
            raise BadCheckpoint(f"bad size for {rel!r} in checkpoint {name}")
        files[check_relpath(rel)] = size
    mtimes = manifest.get("mtime_ns", {})
    digests = manifest.get("sha256")
    if not isinstance(mtimes, dict) or not isinstance(digests, dict):
        raise BadCheckpoint(f"manifest of checkpoint {name} has no SHA-256 digests")
    for rel, ns in mtimes.items():
        if rel not in files or not is_count(ns):
            raise BadCheckpoint(f"bad mtime_ns for {str(rel)[:80]!r} in checkpoint {name}")
    if set(digests) != set(files) or not all(is_digest(d) for d in digests.values()):
        raise BadCheckpoint(f"manifest of checkpoint {name}: a file lacks a valid SHA-256")
    return files, mtimes, digests


# ------------------------------------------------------------------------------ upload


def inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def scan_dir(root: str) -> dict[str, tuple[int, int]]:
    """The regular files under root: {relpath: (size, mtime_ns)}.

    Symlinked directories are not entered, symlinked files count only when their target is
    inside root, and files that vanish while we look are left out.
    """
    found = {}
    if not os.path.isdir(root):
        return found
    real_root = os.path.realpath(root)
    for dirpath, _dirnames, filenames in os.walk(root):  # followlinks=False
        for name in filenames:
            if name.startswith(TMP_PREFIX):
                continue
            path = os.path.join(dirpath, name)
            try:
                if os.path.islink(path) and not inside(os.path.realpath(path), real_root):
                    continue
                info = os.stat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                found[rel] = (info.st_size, info.st_mtime_ns)
    return found


def upload_one(store, path: str, key: str) -> tuple[int, int, str] | None:
    """Upload one file; its (size, mtime_ns, sha256) as uploaded, or None when it vanished."""
    for _ in range(CHANGE_TRIES):
        try:
            before = os.stat(path)
            digest = file_digest(path)
            store.upload(path, key)
            after = os.stat(path)
        except FileNotFoundError:
            return None
        if (before.st_size, before.st_mtime_ns) == (after.st_size, after.st_mtime_ns):
            return after.st_size, after.st_mtime_ns, digest
    raise FileChanging(f"{path} kept changing while it was uploaded")


def upload(store, layout: Layout, root: str, snapshot=None):  # noqa: ANN201 - (seq, files)
    """Upload root as a new checkpoint and commit it.

    Returns (seq, {relpath: (size, mtime_ns)} as uploaded), or None when there was nothing.
    """
    snapshot = scan_dir(root) if snapshot is None else snapshot
    if not snapshot:
        return None
    committed, files = scan_store(store, layout)
    seq = max(committed | set(files) | {0}) + 1
    uploaded = {}
    for rel in sorted(snapshot):
        got = upload_one(store, os.path.join(root, *rel.split("/")), layout.file(seq, rel))
        if got is not None:
            uploaded[rel] = got
    if not uploaded:
        return None
    manifest = {
        "seq": seq,
        "files": {rel: got[0] for rel, got in uploaded.items()},
        "mtime_ns": {rel: got[1] for rel, got in uploaded.items()},
        "sha256": {rel: got[2] for rel, got in uploaded.items()},
        "created": utc_now(),
    }
    store.put_bytes(layout.manifest(seq), json.dumps(manifest, sort_keys=True).encode())
    store.put_bytes(layout.latest(), seq_name(seq).encode())  # the commit
    try:
        prune(store, layout, seq, committed | {seq}, files)
    except StoreError as exc:  # committed all the same; the next prune tries again
        warn(f"could not delete old checkpoints: {exc}")
    return seq, {rel: got[:2] for rel, got in uploaded.items()}


def prune(store, layout: Layout, seq: int, committed: set[int], files: dict[int, list[str]]):
    """Keep the newest KEEP committed checkpoints up to seq; delete older ones and leftovers.

    `files` is the listing taken before seq was uploaded: complete for every older seq.
    """
    keep = set(sorted(s for s in committed if s <= seq)[-KEEP:])
    for old in sorted(committed | set(files)):
        if old in keep or old >= seq:
            continue
        if old in committed:  # the manifest first: no manifest ever lists deleted files
            store.delete(layout.manifest(old))
        for key in files.get(old, []):
            store.delete(key)


# ------------------------------------------------------------------------------ restore


def fetch_file(store, key: str, root: str, real_root: str, rel: str, want: tuple) -> str:
    """Download one file next to root/rel under a temporary name and check its (size,
    sha256); returns the temporary path. Refuses to leave root."""
    target = os.path.join(root, *rel.split("/"))
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    if not inside(os.path.realpath(parent), real_root):  # a symlink already in DIR
        raise BadCheckpoint(f"refusing to write {rel!r}: it leads outside {root}")
    handle, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=parent)
    os.close(handle)
    try:
        store.download(key, tmp)
        size, digest = os.path.getsize(tmp), file_digest(tmp)
    except BaseException:
        os.unlink(tmp)
        raise
    if size != want[0] or digest != want[1]:
        os.unlink(tmp)
        what = f"{size} bytes" if size != want[0] else f"SHA-256 {digest[:12]}..."
        raise BadCheckpoint(f"{rel}: {what} does not match the manifest; checkpoint refused")
    return tmp


def restore(store, layout: Layout, root: str) -> tuple[int, int] | None:
    """Download the latest committed checkpoint into root: (seq, files), or None if none.

    Every file is downloaded and verified before any is renamed into place."""
    os.makedirs(root, exist_ok=True)
    seq = read_latest(store, layout)
    if seq is None:
        return None
    raw = store.get_bytes(layout.manifest(seq))
    if raw is None:
        raise BadCheckpoint(f"LATEST names checkpoint {seq_name(seq)}, which has no manifest")
    files, mtimes, digests = parse_manifest(raw, seq)
    real_root = os.path.realpath(root)
    fetched = {}
    try:
        for rel in sorted(files):
            want = (files[rel], digests[rel])
            fetched[rel] = fetch_file(store, layout.file(seq, rel), root, real_root, rel, want)
    except BaseException:
        for tmp in fetched.values():
            os.unlink(tmp)
        raise
    for rel, tmp in fetched.items():
        if rel in mtimes:  # so `watch` sees the restored files as already uploaded
            os.utime(tmp, ns=(mtimes[rel], mtimes[rel]))
        os.replace(tmp, os.path.join(root, *rel.split("/")))
    return seq, len(files)


def store_signature(store, layout: Layout) -> dict[str, tuple[int, int]] | None:
    """The latest committed checkpoint as scan_dir would see it once restored, if known."""
    try:
        seq = read_latest(store, layout)
        raw = None if seq is None else store.get_bytes(layout.manifest(seq))
        if seq is None or raw is None:
            return None
        files, mtimes, _ = parse_manifest(raw, seq)
    except (StoreError, BadCheckpoint):
        return None
    if set(mtimes) != set(files):
        return None
    return {rel: (files[rel], mtimes[rel]) for rel in files}


# ------------------------------------------------------------------------------ metadata


class Metadata:
    """One cloud's instance metadata service, asked for a spot interruption notice."""

    def __init__(self, cloud: str, base: str | None = None) -> None:
        self.cloud = cloud
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
        if self.cloud == "aliyun":  # the body is the reclaim time; ECS releases the instance
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


# ------------------------------------------------------------------------------ watch


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    # An exited process that its parent has not reaped yet still answers signal 0.
    try:
        with open(f"/proc/{pid}/stat") as source:
            state = source.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


class Watcher:
    """Uploads DIR when it changes, at once on a spot notice, and once more at the end."""

    def __init__(self, store, layout: Layout, args: argparse.Namespace) -> None:
        self.store = store
        self.layout = layout
        self.dir = args.dir
        self.state_dir = args.state_dir
        self.interval = args.interval
        self.notice_poll = args.notice_poll
        self.pid = args.pid
        self.cloud = args.cloud
        base = os.environ.get("ORCH_AGENT_METADATA_URL", "").strip() or None
        self.metadata = Metadata(args.cloud, base)
        self.notice = None
        self.failed_rounds, self.last_error, self.last_seq = 0, None, None
        self.rebalance = None
        # What the store already holds (a restored DIR is not uploaded again).
        self.signature = store_signature(store, layout)

    def finished(self) -> bool:
        return STOP_REQUESTED[0] or (self.pid is not None and not process_alive(self.pid))

    def run(self) -> int:
        os.makedirs(self.state_dir, exist_ok=True)
        now = time.monotonic()
        next_upload, next_poll = now + self.interval, now
        while not self.finished():
            now = time.monotonic()
            urgent = False
            if self.notice is None and now >= next_poll:
                next_poll = now + self.notice_poll
                urgent = self.poll_notice() or self.poll_rebalance()
            if urgent or now >= next_upload:
                ok = self.round()
                # A failed round after a notice is tried again at the next notice poll.
                wait = self.interval if ok or not urgent else min(self.interval, self.notice_poll)
                next_upload = time.monotonic() + wait
            time.sleep(TICK_S)
        return self.finish()

    def finish(self) -> int:
        for attempt in range(FINAL_TRIES):
            if self.round():
                self.record_outcome(True)
                return 0
            if attempt + 1 < FINAL_TRIES:
                time.sleep(1.0)
        warn("the final upload failed; the store keeps the previous checkpoint")
        self.record_outcome(False)
        return 1

    def record_outcome(self, final_ok: bool) -> None:
        """STATEDIR/agent.json: how the agent ended, for orch's report."""
        record = {
            "final_upload": "ok" if final_ok else "failed",
            "checkpoint": None if self.last_seq is None else seq_name(self.last_seq),
            "failed_rounds": self.failed_rounds,
            "error": self.last_error,
            "at": utc_now(),
        }
        try:
            write_json(os.path.join(self.state_dir, "agent.json"), record)
        except OSError as exc:
            warn(f"cannot write agent.json: {exc}")

    def poll_notice(self) -> bool:
        """Ask for a spot interruption notice; True when one has just appeared."""
        notice = self.metadata.notice()
        if notice is None:
            return False
        self.notice = notice
        record = dict(notice, cloud=self.cloud, seen_at=utc_now())
        try:
            write_json(os.path.join(self.state_dir, "interruption.json"), record)
        except OSError as exc:
            warn(f"cannot write interruption.json: {exc}")
        when = notice["time"] or "an unknown time"
        say(f"spot interruption notice ({self.cloud}: {notice['action']} at {when}); uploading now")
        return True

    def poll_rebalance(self) -> bool:
        """Ask for a rebalance recommendation; True when one has just appeared."""
        if self.rebalance is not None:
            return False
        when = self.metadata.rebalance()
        if when is None:
            return False
        self.rebalance = when
        record = {"cloud": self.cloud, "notice_time": when, "seen_at": utc_now()}
        try:
            write_json(os.path.join(self.state_dir, "rebalance.json"), record)
        except OSError as exc:
            warn(f"cannot write rebalance.json: {exc}")
        say(f"rebalance recommendation ({self.cloud}, {when or 'no time given'}); uploading now")
        return True

    def round(self) -> bool:
        """Upload DIR if it changed since the last upload; False when the upload failed."""
        snapshot = scan_dir(self.dir)
        if not snapshot or snapshot == self.signature:
            return True
        try:
            result = upload(self.store, self.layout, self.dir, snapshot)
        except Exception as exc:  # never fatal: the training goes on, and so do we
            warn(f"upload failed (retrying next round): {exc}")
            self.failed_rounds += 1
            self.last_error = one_line(exc)[:300]
            return False
        if result is None:
            return True
        seq, uploaded = result
        self.signature, self.last_seq = uploaded, seq
        record = {"seq": seq, "files": len(uploaded), "at": utc_now()}
        try:
            write_json(os.path.join(self.state_dir, "last_upload.json"), record)
        except OSError as exc:
            warn(f"cannot write last_upload.json: {exc}")
        say(f"uploaded {len(uploaded)} files (checkpoint {seq_name(seq)})")
        return True


# ------------------------------------------------------------------------------ commands


def cmd_restore(store, layout: Layout, args: argparse.Namespace) -> int:
    try:
        result = restore(store, layout, args.dir)
    except (StoreError, BadCheckpoint, OSError) as exc:
        warn(f"restore failed: {exc}")
        return 1
    if result is None:
        say(f"no checkpoint in {args.store}")
    else:
        say(f"restored {result[1]} files (checkpoint {seq_name(result[0])})")
    return 0


def cmd_upload(store, layout: Layout, args: argparse.Namespace) -> int:
    try:
        result = upload(store, layout, args.dir)
    except (StoreError, BadCheckpoint, FileChanging, OSError) as exc:
        warn(f"upload failed: {exc}")
        return 1
    if result is None:
        say(f"nothing to upload in {args.dir}")
    else:
        say(f"uploaded {len(result[1])} files (checkpoint {seq_name(result[0])})")
    return 0


# Set by SIGTERM/SIGINT. `watch` takes these signals before it opens the store (boto3's import
# alone takes a second): a stop that comes while it starts still ends in the final upload.
STOP_REQUESTED = [False]


def request_stop(signum: int, frame: object) -> None:
    STOP_REQUESTED[0] = True


def cmd_watch(store, layout: Layout, args: argparse.Namespace) -> int:
    return Watcher(store, layout, args).run()


def positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agent.py", description="orch's checkpoint agent")
    commands = parser.add_subparsers(dest="command")
    commands.required = True
    for name, purpose in (
        ("restore", "download the latest committed checkpoint into DIR"),
        ("upload", "upload DIR now as a new checkpoint"),
        ("watch", "upload DIR as it changes and on a spot interruption notice"),
    ):
        command = commands.add_parser(name, help=purpose)
        command.add_argument("--dir", required=True)
        command.add_argument("--store", required=True, help="s3://BUCKET/PREFIX")
        # Which metadata service holds the box's credentials (and, for watch, its notices).
        command.add_argument("--cloud", choices=sorted(cloud_specs()), default="aws")
    watch = commands.choices["watch"]
    watch.add_argument("--interval", type=positive, required=True)
    watch.add_argument("--state-dir", required=True)
    watch.add_argument("--pid", type=int)
    watch.add_argument("--notice-poll", type=positive, default=5.0)
    return parser.parse_args(argv)


COMMANDS = {"restore": cmd_restore, "upload": cmd_upload, "watch": cmd_watch}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "watch":
        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
    try:
        bucket, prefix = parse_store(args.store)
    except ValueError as exc:
        warn(str(exc))
        return 2
    try:
        store = open_store(bucket, args.cloud)
    except NoClient as exc:
        warn(str(exc))
        return 2
    except StoreError as exc:
        warn(str(exc))
        return 1
    return COMMANDS[args.command](store, Layout(prefix), args)


if __name__ == "__main__":
    sys.exit(main())
