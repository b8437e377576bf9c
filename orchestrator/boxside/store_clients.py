"""The S3 clients orch's checkpoint agent reaches its store through, and which one it picks.

    builtin  box_s3.S3Store, the standard-library client next to this file (the default)
    boto3    Boto3Store, if the box has boto3 (the default for Alibaba OSS endpoints)
    cli      CliStore, the `aws` CLI (when boto3 is wanted but missing)

Each offers get_bytes, put_bytes, upload, download, list and delete, and raises StoreError.
Environment: AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3 / ORCH_STORE_ENDPOINT name an S3-compatible
endpoint (e.g. Alibaba OSS); ORCH_AGENT_S3_CLIENT=builtin|boto3|cli picks the client.

Shipped with agent.py (orchestrator/boxside/): standard library only, Python 3.8; boto3 only
when the box has it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from urllib.parse import urlsplit

try:  # on the box: its siblings lie next to this file (the script's folder is on sys.path)
    import box_s3
    from agent_log import one_line
    from cloud_metadata import cloud_spec
except ImportError:  # imported as orchestrator.boxside.store_clients (orch's own tests)
    from orchestrator.boxside import box_s3
    from orchestrator.boxside.agent_log import one_line
    from orchestrator.boxside.cloud_metadata import cloud_spec

# The cloud whose metadata service holds the box's credentials when `--cloud` names none.
DEFAULT_CLOUD = "aws"
# One run of the aws CLI for a small object (a pointer, a manifest, a listing, a delete).
CLI_SMALL_TIMEOUT_S = 300

StoreError = box_s3.StoreError  # an object storage request failed


class NoClient(Exception):
    """Neither boto3 nor the aws CLI is available."""


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


def open_store(bucket: str, cloud: str):  # noqa: ANN201 - an S3Store, Boto3Store or CliStore
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
            spec = cloud_spec(cloud)
            return Boto3Store(bucket, None if spec.get("sdk_finds_role") else spec)
    aws = shutil.which("aws")
    if aws is None:
        raise NoClient(
            "no S3 client on this box: neither the boto3 module nor the aws CLI was found"
            " (pip install boto3, or install the AWS CLI)"
        )
    return CliStore(bucket, aws)
