"""Remote state: `--state s3://bucket/prefix` keeps a box's Terraform state in S3.

Layout under the prefix, one folder per box:

    s3://bucket/prefix/<name>/terraform.tfstate        Terraform's state (S3 backend)
    s3://bucket/prefix/<name>/terraform.tfstate.tflock Terraform's lock while it runs
    s3://bucket/prefix/<name>/orch-box.json            box record + rendered root module

The bundle lets `orch down NAME --state s3://...` on another machine (another ORCH_HOME, a
later CI job) rebuild the box directory and destroy what an earlier job created. It holds no
secret: the private SSH key never leaves the machine that created the box.

Endpoints and credentials come from the standard AWS variables (AWS_PROFILE,
AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3, ...), for boto3 and Terraform alike.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from orchestrator.errors import OrchError, UsageError

BUNDLE_SCHEMA = "orch.box/v1"
STATE_LEAF = "terraform.tfstate"
BUNDLE_LEAF = "orch-box.json"
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_PREFIX_RE = re.compile(r"^[A-Za-z0-9!_.*'()/-]*$")


@dataclass(frozen=True)
class StateLocation:
    url: str
    bucket: str
    prefix: str  # without leading or trailing "/"; may be empty

    def key(self, name: str, leaf: str) -> str:
        return "/".join(part for part in (self.prefix, name, leaf) if part)

    def state_key(self, name: str) -> str:
        return self.key(name, STATE_LEAF)

    def bundle_key(self, name: str) -> str:
        return self.key(name, BUNDLE_LEAF)


def parse_state_url(url: str) -> StateLocation:
    parsed = urlparse(url)
    if parsed.scheme != "s3":
        raise UsageError(
            f"unsupported --state {url!r}", hint="use s3://bucket/prefix (or omit for local state)"
        )
    bucket = parsed.netloc
    prefix = parsed.path.strip("/")
    if not _BUCKET_RE.match(bucket) or parsed.query or parsed.fragment:
        raise UsageError(f"bad --state {url!r}: expected s3://bucket/prefix")
    if not _PREFIX_RE.match(prefix) or "//" in prefix:
        raise UsageError(f"bad --state {url!r}: the prefix may hold letters, digits and -_.!*'()/")
    canonical = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
    return StateLocation(url=canonical, bucket=bucket, prefix=prefix)


def custom_endpoint() -> bool:
    """True when AWS_ENDPOINT_URL(_S3) points the SDKs at a non-AWS endpoint (moto, MinIO)."""
    return bool(os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_S3"))


def _s3(region: str | None = None) -> Any:
    import boto3  # heavy: only commands that use remote state pay for it
    from botocore.config import Config

    style = {"addressing_style": "path"} if custom_endpoint() else {}
    try:
        return boto3.client("s3", region_name=region, config=Config(s3=style))
    except _client_errors() as exc:  # e.g. AWS_PROFILE naming no profile
        raise OrchError(f"cannot use S3 for remote state: {exc}") from None


def _client_errors() -> tuple[type[BaseException], ...]:
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError)


def bucket_region(location: StateLocation) -> str:
    """The bucket's own region: the S3 backend must be told it exactly."""
    client = _s3(
        os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    )
    try:
        response = client.head_bucket(Bucket=location.bucket)
    except _client_errors() as exc:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        if code in ("404", "NoSuchBucket"):
            raise UsageError(f"state bucket {location.bucket} does not exist") from None
        raise OrchError(f"cannot reach state bucket {location.bucket}: {exc}") from None
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    return headers.get("x-amz-bucket-region") or response.get("BucketRegion") or "us-east-1"


def backend_config(location: StateLocation, name: str, region: str) -> dict[str, Any]:
    """Values for `terraform init -backend-config=<file.json>` (user values stay out of HCL)."""
    config: dict[str, Any] = {
        "bucket": location.bucket,
        "key": location.state_key(name),
        "region": region,
    }
    if custom_endpoint():
        # S3-compatible endpoints (moto, MinIO, ...) serve path-style URLs and have no STS/IMDS.
        config.update(
            use_path_style=True,
            skip_credentials_validation=True,
            skip_requesting_account_id=True,
            skip_metadata_api_check=True,
            skip_region_validation=True,
        )
    return config


def upload_bundle(location: StateLocation, name: str, region: str, bundle: dict[str, Any]) -> None:
    body = json.dumps({"schema": BUNDLE_SCHEMA, **bundle}, indent=1, sort_keys=True).encode()
    try:
        _s3(region).put_object(
            Bucket=location.bucket,
            Key=location.bundle_key(name),
            Body=body,
            ContentType="application/json",
            ServerSideEncryption="AES256",
        )
    except _client_errors() as exc:
        raise OrchError(f"cannot store box {name} in {location.url}: {exc}") from None


def download_bundle(location: StateLocation, name: str, region: str) -> dict[str, Any] | None:
    """The stored bundle, or None when the prefix holds no box `name`."""
    client = _s3(region)
    try:
        response = client.get_object(Bucket=location.bucket, Key=location.bundle_key(name))
    except _client_errors() as exc:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        if code in ("NoSuchKey", "404"):
            return None
        raise OrchError(f"cannot read box {name} from {location.url}: {exc}") from None
    try:
        data = json.loads(response["Body"].read())
    except (ValueError, KeyError) as exc:
        raise OrchError(f"box {name} in {location.url} is damaged: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != BUNDLE_SCHEMA:
        raise OrchError(f"box {name} in {location.url} is not an orch box bundle")
    return data


def delete_box_objects(location: StateLocation, name: str, region: str) -> None:
    """Remove the (now empty) state, its lock and the bundle once the box is destroyed."""
    keys = [
        location.bundle_key(name),
        location.state_key(name),
        location.state_key(name) + ".tflock",
    ]
    try:
        _s3(region).delete_objects(
            Bucket=location.bucket,
            Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True},
        )
    except _client_errors() as exc:
        raise OrchError(
            f"box {name} is destroyed but {location.url} still holds it: {exc}"
        ) from None


def collect_files(directory: Path, relative_paths: list[str]) -> dict[str, str]:
    """Text of the rendered files (and everything under folders named) for the bundle."""
    files: dict[str, str] = {}
    for rel in relative_paths:
        path = directory / rel
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file():
                    files[child.relative_to(directory).as_posix()] = child.read_text()
        elif path.is_file():
            files[rel] = path.read_text()
    return files
