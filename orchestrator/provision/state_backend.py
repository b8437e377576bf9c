"""Remote state: `--state s3://bucket/prefix` keeps a box's Terraform state in S3.

Layout under the prefix, one folder per box:

    s3://bucket/prefix/<name>/terraform.tfstate        Terraform's state (S3 backend)
    s3://bucket/prefix/<name>/terraform.tfstate.tflock Terraform's lock while it runs
    s3://bucket/prefix/<name>/orch-box.json            box record + rendered root module
    s3://bucket/prefix/<name>/orch-claim.json          who owns the name (conditional write)

The bundle lets `orch down NAME --state s3://...` on another machine (another ORCH_HOME, a
later CI job) rebuild the box directory and destroy what an earlier job created. It holds no
secret: the private SSH key never leaves the machine that created the box.

Endpoints and credentials come from the standard AWS variables (AWS_PROFILE,
AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3, ...), for boto3 and Terraform alike.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from orchestrator import jsontext
from orchestrator.errors import OrchError, UsageError

BUNDLE_SCHEMA = "orch.box/v1"
STATE_LEAF = "terraform.tfstate"
BUNDLE_LEAF = "orch-box.json"
CLAIM_LEAF = "orch-claim.json"
LOCK_SUFFIX = ".tflock"  # the S3 backend's lock file next to the state (use_lockfile = true)
# Region names of the registered clouds: "us-east-1", "eu-central-1", "cn-hangzhou", ...
_REGION_RE = re.compile(r"^[a-z]{2}(-[a-z0-9]+){1,3}$")
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_PREFIX_RE = re.compile(r"^[A-Za-z0-9!_.*'()/-]*$")


@dataclass(frozen=True, slots=True)
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

    def claim_key(self, name: str) -> str:
        return self.key(name, CLAIM_LEAF)

    def lock_key(self, name: str) -> str:
        return self.state_key(name) + LOCK_SUFFIX


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


def s3_client(region: str | None = None) -> Any:
    import boto3  # heavy: only commands that use remote state pay for it
    from botocore.config import Config

    style = {"addressing_style": "path"} if custom_endpoint() else {}
    try:
        return boto3.client("s3", region_name=region, config=Config(s3=style))
    except client_errors() as exc:  # e.g. AWS_PROFILE naming no profile
        raise OrchError(f"cannot use S3 for remote state: {exc}") from None


def client_errors() -> tuple[type[BaseException], ...]:
    """boto3's errors for an S3 call. S3's parser reads an HTML page (a proxy's, a captive
    portal's) as a 500 ClientError; the unreadable-answer error is caught all the same."""
    from orchestrator.clouds.aws.client import sdk_errors

    return sdk_errors()


def bucket_region(location: StateLocation) -> str:
    """The bucket's own region: the S3 backend must be told it exactly."""
    client = s3_client(
        os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    )
    try:
        response = client.head_bucket(Bucket=location.bucket)
    except client_errors() as exc:
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
        s3_client(region).put_object(
            Bucket=location.bucket,
            Key=location.bundle_key(name),
            Body=body,
            ContentType="application/json",
            ServerSideEncryption="AES256",
        )
    except client_errors() as exc:
        raise OrchError(f"cannot store box {name} in {location.url}: {exc}") from None


def download_bundle(location: StateLocation, name: str, region: str) -> dict[str, Any] | None:
    """The stored bundle, or None when the prefix holds no box `name`."""
    client = s3_client(region)
    try:
        response = client.get_object(Bucket=location.bucket, Key=location.bundle_key(name))
    except client_errors() as exc:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        if code in ("NoSuchKey", "404"):
            return None
        raise OrchError(f"cannot read box {name} from {location.url}: {exc}") from None
    try:
        data = jsontext.loads(response["Body"].read())
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
        location.lock_key(name),
        location.claim_key(name),
    ]
    try:
        s3_client(region).delete_objects(
            Bucket=location.bucket,
            Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True},
        )
    except client_errors() as exc:
        raise OrchError(
            f"box {name} is destroyed but {location.url} still holds it: {exc}"
        ) from None


def error_code(exc: BaseException) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


# ------------------------------------------------------------------------------ bundle checks


def verify_bundle(bundle: dict[str, Any], name: str, where: str) -> None:
    """Refuse (exit 2) a bundle that does not describe box `name`, the name typed on the
    command line: its record, its Terraform values and its tags must all say `name`, and its
    cloud and region must agree everywhere and be valid, and every other field of its record
    must have the shape `boxes.check_record` asks of box.json. Whoever can write the bucket
    controls the bundle; trusting its name made `down decoy` destroy another box and
    `../../..` point Terraform at a fresh, empty state, and its instance type reached the
    terminal raw."""
    from orchestrator import clouds

    def refuse(why: str) -> UsageError:
        return UsageError(
            f"the bundle of box {name} in {where} {why}; nothing was destroyed or deleted",
            hint="restore the bundle (or remove the box's resources by hand)",
        )

    record = bundle.get("box")
    files = bundle.get("files")
    if not isinstance(record, dict) or not isinstance(files, dict):
        raise refuse("is damaged")
    try:
        values = jsontext.loads(files["terraform.tfvars.json"])
    except (KeyError, TypeError, ValueError):
        raise refuse("has no usable terraform.tfvars.json") from None
    candidate = record.get("candidate")
    if not isinstance(values, dict) or not isinstance(candidate, dict):
        raise refuse("is damaged")
    tags = values.get("default_tags") if isinstance(values.get("default_tags"), dict) else {}
    named = [record.get("name"), values.get("name"), tags.get("orch:box", name)]
    regions_named = [record.get("region"), candidate.get("region"), values.get("region")]
    if not all(isinstance(text, str) for text in [*named, *regions_named]):
        raise refuse("is damaged (a name or region that is no text)")
    names = set(named)
    if names != {name}:
        shown = ", ".join(sorted(repr(n) for n in names - {name}))
        raise refuse(f"names another box ({shown})")
    cloud = record.get("cloud")
    if cloud not in clouds.names() or candidate.get("cloud") != cloud:
        raise refuse(f"names an unknown or inconsistent cloud ({cloud!r})")
    regions = set(regions_named)
    region = record.get("region")
    if len(regions) != 1 or not isinstance(region, str) or not _REGION_RE.match(region):
        shown = ", ".join(sorted(repr(r) for r in regions))
        raise refuse(f"has inconsistent or invalid regions ({shown})")
    from orchestrator.provision.boxes import check_record

    try:  # every field `down` reads, before the bucket's state, Terraform or the cloud
        check_record(record)
    except UsageError as exc:
        raise refuse(f"is damaged ({exc.message})") from None


def state_facts(location: StateLocation, name: str, region: str) -> tuple[set[str], set[str]]:
    """Zones (availability_zone, zone_id) and providers ("hashicorp/aws") that Terraform
    recorded in box `name`'s state, so the bundle's region and cloud can be checked against
    what was really created."""
    try:
        response = s3_client(region).get_object(
            Bucket=location.bucket, Key=location.state_key(name)
        )
        state = jsontext.loads(response["Body"].read())
    except client_errors() as exc:
        if error_code(exc) in ("NoSuchKey", "404"):
            return set(), set()
        raise OrchError(f"cannot read the state of box {name} in {location.url}: {exc}") from None
    except ValueError:
        raise OrchError(f"the state of box {name} in {location.url} is not JSON") from None
    try:
        return _zones_and_providers(state)
    except (AttributeError, TypeError):  # a shape Terraform never writes
        raise OrchError(f"the state of box {name} in {location.url} is damaged") from None


def _zones_and_providers(state: Any) -> tuple[set[str], set[str]]:
    zones: set[str] = set()
    providers: set[str] = set()
    resources = state.get("resources") or []
    if not isinstance(resources, list):
        raise TypeError("resources is not a list")
    for resource in resources:
        # 'provider["registry.terraform.io/hashicorp/aws"]' -> "hashicorp/aws"
        source = str(resource.get("provider", "")).split('"')
        if len(source) >= 2:
            providers.add("/".join(source[1].split("/")[-2:]))
        for instance in resource.get("instances") or []:
            attributes = instance.get("attributes") or {}
            for key in ("availability_zone", "zone_id"):
                if isinstance(attributes.get(key), str) and attributes[key]:
                    zones.add(attributes[key])
    return zones, providers


# ------------------------------------------------------------------------------ name claim


def claim_name(location: StateLocation, name: str, region: str, claim: dict[str, Any]) -> None:
    """Claim box `name` under the prefix with a conditional write (PutObject with
    If-None-Match: *), so two `up`s of one name from two homes cannot both proceed: S3 answers
    the second with 412 Precondition Failed (or 409 ConditionalRequestConflict while the first
    write is in flight). https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html
    """
    body = json.dumps(claim, indent=1, sort_keys=True).encode()
    try:
        s3_client(region).put_object(
            Bucket=location.bucket,
            Key=location.claim_key(name),
            Body=body,
            IfNoneMatch="*",
            ContentType="application/json",
            ServerSideEncryption="AES256",
        )
    except client_errors() as exc:
        if error_code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
            holder = read_claim(location, name, region) or {}
            who = ", ".join(
                f"{k} {holder[k]}" for k in ("owner", "host", "claimed_at") if holder.get(k)
            )
            raise UsageError(
                f"box {name} is already claimed in {location.url}" + (f" ({who})" if who else ""),
                hint=f"choose another --name, or `orch down {name} --state {location.url}`",
            ) from None
        if error_code(exc) in ("AccessDenied", "403"):
            raise UsageError(
                f"cannot write to {location.url}: s3:PutObject is denied",
                hint="see 'Remote state' in docs/provisioning.md for the permissions --state needs",
            ) from None
        raise OrchError(f"cannot claim box {name} in {location.url}: {exc}") from None


def read_claim(location: StateLocation, name: str, region: str) -> dict[str, Any] | None:
    try:
        response = s3_client(region).get_object(
            Bucket=location.bucket, Key=location.claim_key(name)
        )
        data = jsontext.loads(response["Body"].read())
    except client_errors() as exc:
        if error_code(exc) in ("NoSuchKey", "404"):
            return None
        raise OrchError(f"cannot read the claim of box {name} in {location.url}: {exc}") from None
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def release_claim(location: StateLocation, name: str, region: str) -> None:
    try:
        s3_client(region).delete_object(Bucket=location.bucket, Key=location.claim_key(name))
    except client_errors() as exc:
        raise OrchError(
            f"cannot release the claim of box {name} in {location.url}: {exc}"
        ) from None


# ------------------------------------------------------------------------------ permissions


def check_permissions(location: StateLocation, name: str, region: str) -> None:
    """Try what Terraform's S3 backend will do under the prefix before anything is applied:
    list (s3:ListBucket), write (s3:PutObject), read (s3:GetObject) and delete (s3:DeleteObject)
    a probe object. Without DeleteObject Terraform cannot release its lock file, and `up`
    would fail after the instance is running. https://developer.hashicorp.com/terraform/language/backend/s3#permissions-required
    """
    import uuid

    client = s3_client(region)
    probe = location.key(name, f"orch-probe-{uuid.uuid4().hex}")
    steps = (
        ("s3:ListBucket", lambda: client.list_objects_v2(
            Bucket=location.bucket, Prefix=location.key(name, "") + "/", MaxKeys=1)),
        # Deleting a key that does not exist answers 204 when allowed, 403 when not: checked
        # first, a missing DeleteObject leaves no probe behind.
        ("s3:DeleteObject", lambda: client.delete_object(Bucket=location.bucket, Key=probe)),
        ("s3:PutObject", lambda: client.put_object(
            Bucket=location.bucket, Key=probe, Body=b"orch permission probe",
            ServerSideEncryption="AES256")),
        ("s3:GetObject", lambda: client.get_object(Bucket=location.bucket, Key=probe)),
        ("s3:DeleteObject", lambda: client.delete_object(Bucket=location.bucket, Key=probe)),
    )  # fmt: skip
    written = False
    try:
        for permission, step in steps:
            try:
                step()
            except client_errors() as exc:
                if error_code(exc) in ("AccessDenied", "403", "AllAccessDisabled"):
                    raise UsageError(
                        f"--state {location.url}: {permission} is denied under "
                        f"{location.key(name, '')}/; nothing was created",
                        hint="see 'Remote state' in docs/provisioning.md for the IAM policy",
                    ) from None
                raise OrchError(f"cannot use {location.url}: {exc}") from None
            written = written or permission == "s3:PutObject"
    except BaseException:
        # Refused (or interrupted) after the probe was written: no probe is left behind.
        if written:
            with contextlib.suppress(*client_errors()):
                client.delete_object(Bucket=location.bucket, Key=probe)
        raise


def lock_info(location: StateLocation, name: str, region: str) -> dict[str, Any] | None:
    """Terraform's lock on box `name`'s state (its JSON: ID, Operation, Who, Created), if held."""
    try:
        response = s3_client(region).get_object(Bucket=location.bucket, Key=location.lock_key(name))
        data = jsontext.loads(response["Body"].read())
    except client_errors():
        return None
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


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
