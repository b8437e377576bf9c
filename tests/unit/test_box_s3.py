"""The checkpoint agent's S3 client (orchestrator/boxside/box_s3.py): SigV4 against AWS's published
example and botocore's own signer, credentials from instance metadata (the stand-in,
tests/sim/metadata.py), and multipart uploads against a real moto server over HTTP.
"""

from __future__ import annotations

import os
from calendar import timegm
from collections.abc import Iterator
from http.client import IncompleteRead
from pathlib import Path

import pytest

from orchestrator.boxside import box_s3, metadata_specs
from tests.sim.metadata import MetadataService

KEY, SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

# Each cloud's metadata entry, as orch writes it next to the agent (the clouds supply them).
CLOUDS = metadata_specs()


@pytest.fixture
def md() -> Iterator[MetadataService]:
    with MetadataService() as service:
        yield service


def role_credentials(secret_key: str = "AccessKeySecret") -> dict[str, str]:
    return {
        "Code": "Success",
        "AccessKeyId": "ASIAROLEKEY",
        secret_key: "role-secret",
        "Expiration": "2099-01-01T00:00:00Z",
    }


# ------------------------------------------------------------------------------ signing


def test_signature_matches_the_s3_reference_example() -> None:
    # "Example: GET Object" in Signature Calculations for the Authorization Header,
    # https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html
    creds = box_s3.Credentials(KEY, SECRET, None, None)
    when = timegm((2013, 5, 24, 0, 0, 0, 0, 0, 0))
    headers = box_s3.sign_v4(
        "GET", "examplebucket.s3.amazonaws.com", "/test.txt", {}, {"Range": "bytes=0-9"},
        box_s3.EMPTY_SHA256, creds, "us-east-1", now=when,
    )  # fmt: skip
    assert headers["authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    )


def test_signature_matches_botocore_with_a_session_token_and_a_query() -> None:
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    when = 1_764_000_000
    creds = box_s3.Credentials("ASIAKEY", "secret/with+chars", "token==", None)
    key = "runs/r 1/checkpoints/0000 1/a+b=c.bin"
    params = {"list-type": "2", "prefix": "runs/r 1/", "continuation-token": "x/y=="}
    path = "/bucket-1/" + box_s3.uri_encode(key)
    ours = box_s3.sign_v4(
        "PUT", "127.0.0.1:5000", path, params, {"content-length": "3"},
        box_s3.EMPTY_SHA256, creds, "eu-west-1", now=when,
    )  # fmt: skip

    import datetime
    from unittest import mock

    url = f"http://127.0.0.1:5000{path}?{box_s3.canonical_query(params)}"
    request = AWSRequest("PUT", url, headers={"content-length": "3"})
    request.context["payload_signing_enabled"] = True
    fixed = datetime.datetime.fromtimestamp(when, datetime.UTC).replace(tzinfo=None)
    with mock.patch("botocore.auth.get_current_datetime", return_value=fixed):
        signer = S3SigV4Auth(
            Credentials("ASIAKEY", "secret/with+chars", "token=="), "s3", "eu-west-1"
        )
        signer.add_auth(request)  # an empty body: its SHA-256 is EMPTY_SHA256, as we sign
    theirs = request.headers["Authorization"]
    assert ours["authorization"].rsplit("Signature=", 1)[1] == theirs.rsplit("Signature=", 1)[1]
    assert ours["x-amz-security-token"] == "token=="


# ------------------------------------------------------------------------------ credentials


def store_env(moto_server_url: str, md: MetadataService, **more: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": moto_server_url, "ORCH_AGENT_METADATA_URL": md.url, **more}


def test_credentials_come_from_the_instance_role_through_imdsv2(moto_server_url, md, s3, bucket):
    md.aws_identity = lambda: ("orch-box-role", role_credentials("SecretAccessKey"))
    store = box_s3.S3Store(bucket, CLOUDS["aws"], store_env(moto_server_url, md))
    store.put_bytes("a/b.txt", b"hello")
    assert s3.get_object(Bucket=bucket, Key="a/b.txt")["Body"].read() == b"hello"
    assert store.credentials.current.key == "ASIAROLEKEY"
    assert store.region == "us-east-1"  # the instance's own, from placement/region
    gets = md.paths("GET")
    assert "/latest/meta-data/iam/security-credentials/" in gets
    assert "/latest/meta-data/iam/security-credentials/orch-box-role" in gets
    assert md.paths("PUT") == ["/latest/api/token"]  # every GET carried the token


def test_aliyun_credentials_come_from_the_ram_role(moto_server_url, md, s3, bucket):
    md.aliyun_identity = lambda: ("OrchBoxRole", {**role_credentials(), "SecurityToken": "sts"})
    store = box_s3.S3Store(bucket, CLOUDS["aliyun"], store_env(moto_server_url, md))
    store.put_bytes("x", b"1")
    assert store.credentials.current.token == "sts"
    assert store.region == "cn-hangzhou"
    assert "/latest/meta-data/ram/security-credentials/OrchBoxRole" in md.paths("GET")


def test_a_box_without_a_role_gets_one_clear_error(moto_server_url, md, bucket):
    store = box_s3.S3Store(bucket, CLOUDS["aws"], store_env(moto_server_url, md))
    with pytest.raises(box_s3.StoreError, match=r"no credentials: .* names no role .*\(HTTP 404"):
        store.get_bytes("anything")


def test_environment_keys_come_before_the_role(moto_server_url, md, bucket):
    md.aws_identity = lambda: ("role", role_credentials("SecretAccessKey"))
    env = store_env(moto_server_url, md, AWS_ACCESS_KEY_ID="envkey", AWS_SECRET_ACCESS_KEY="s")
    store = box_s3.S3Store(bucket, CLOUDS["aws"], env)
    assert store.get_bytes("missing") is None
    assert store.credentials.current.key == "envkey"
    assert not [p for p in md.paths("GET") if "security-credentials" in p]


def test_expiring_credentials_are_fetched_again(moto_server_url, md, bucket):
    served = []

    def identity() -> tuple[str, dict[str, str]]:
        served.append(1)
        soon = "2000-01-01T00:00:00Z" if len(served) < 3 else "2099-01-01T00:00:00Z"
        return "role", {**role_credentials("SecretAccessKey"), "Expiration": soon}

    md.aws_identity = identity
    store = box_s3.S3Store(bucket, CLOUDS["aws"], store_env(moto_server_url, md))
    store.put_bytes("k", b"1")
    first = len(served)
    store.put_bytes("k", b"2")
    assert len(served) > first  # the first ones had expired: asked again


# ------------------------------------------------------------------------------ objects


def test_large_files_go_up_in_parts_and_come_back_whole(moto_server_url, md, s3, bucket, tmp_path):
    md.aws_identity = lambda: ("role", role_credentials("SecretAccessKey"))
    store = box_s3.S3Store(bucket, CLOUDS["aws"], store_env(moto_server_url, md))
    store_part = box_s3.PART_SIZE
    box_s3.PART_SIZE = 5 * 1024 * 1024  # S3's smallest part
    try:
        big = tmp_path / "big.bin"
        big.write_bytes(os.urandom(11 * 1024 * 1024 + 17))
        store.upload(str(big), "ck/big.bin")
    finally:
        box_s3.PART_SIZE = store_part
    head = s3.head_object(Bucket=bucket, Key="ck/big.bin")
    assert head["ContentLength"] == big.stat().st_size
    assert head["ETag"].strip('"').endswith("-3")  # three parts
    back = tmp_path / "back.bin"
    store.download("ck/big.bin", str(back))
    assert back.read_bytes() == big.read_bytes()
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


class CutOff:
    """A GetObject answer whose connection drops after its first chunk (http.client raises
    IncompleteRead then); the rest of the answer behaves as urllib's does."""

    def __init__(self, answer) -> None:  # noqa: ANN001 - an http.client.HTTPResponse
        self.answer, self.status, self.headers, self.sent = answer, answer.status, answer.headers, 0

    def __enter__(self) -> CutOff:
        return self

    def __exit__(self, *exc: object) -> None:
        self.answer.close()

    def read(self, amount: int = -1) -> bytes:
        if self.sent:
            raise IncompleteRead(b"", 1)
        self.sent = 1
        return self.answer.read(amount)


def test_a_download_cut_off_midway_comes_back_whole(
    moto_server_url, md, s3, bucket, tmp_path, monkeypatch
):
    """A retried GetObject starts the file again: bytes of the dropped answer are not kept in
    front of the new one (the restore would refuse the checkpoint as damaged)."""
    md.aws_identity = lambda: ("role", role_credentials("SecretAccessKey"))
    store = box_s3.S3Store(bucket, CLOUDS["aws"], store_env(moto_server_url, md))
    body = os.urandom(3 * box_s3.CHUNK + 5)
    s3.put_object(Bucket=bucket, Key="ck/w.bin", Body=body)
    opened = store.opener.open
    drops = [True]

    def flaky_open(request, timeout=None):  # noqa: ANN001, ANN202 - urllib's interface
        answer = opened(request, timeout=timeout)
        return CutOff(answer) if drops and drops.pop() else answer

    monkeypatch.setattr(store.opener, "open", flaky_open)
    monkeypatch.setattr(box_s3.time, "sleep", lambda seconds: None)  # the retry's back-off
    back = tmp_path / "back.bin"
    store.download("ck/w.bin", str(back))
    assert not drops  # the first answer was cut off
    assert back.read_bytes() == body


class PartCounter:
    """Stands in for S3Store.request in a multipart upload, with S3's part-number rule:
    "Part numbers 1 to 10,000 (inclusive)", at most 10,000 parts per upload
    (https://docs.aws.amazon.com/AmazonS3/latest/userguide/qfacts.html)."""

    def __init__(self) -> None:
        self.parts: dict[int, int] = {}

    def __call__(self, method: str, key: str, params=None, body: bytes = b"", sink=None):  # noqa: ANN001, ANN204
        params = params or {}
        if "partNumber" in params:
            number = int(params["partNumber"])
            if not 1 <= number <= 10_000:
                return box_s3.Response(400, {}, b"<Error><Code>InvalidArgument</Code></Error>")
            self.parts[number] = len(body)
            return box_s3.Response(200, {"ETag": f'"{number}"'}, b"")
        if "uploads" in params:
            return box_s3.Response(200, {}, b"<R><UploadId>u1</UploadId></R>")
        return box_s3.Response(200 if method == "POST" else 204, {}, b"<R/>")


def test_a_file_of_more_than_ten_thousand_parts_goes_up_in_bigger_parts(md, tmp_path, monkeypatch):
    env = {"AWS_REGION": "us-east-1", "ORCH_AGENT_METADATA_URL": md.url}
    store = box_s3.S3Store("ckpt", CLOUDS["aws"], env)
    counter = PartCounter()
    monkeypatch.setattr(store, "request", counter)
    monkeypatch.setattr(box_s3, "PART_SIZE", 16)  # 10,000 parts of 16 bytes, and 1 byte more
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(16 * 10_000 + 1))
    store.upload(str(big), "ck/big.bin")
    assert len(counter.parts) <= 10_000
    assert sum(counter.parts.values()) == big.stat().st_size


def test_listing_pages_and_deleting(moto_server_url, md, s3, bucket):
    md.aws_identity = lambda: ("role", role_credentials("SecretAccessKey"))
    store = box_s3.S3Store(bucket, CLOUDS["aws"], store_env(moto_server_url, md))
    names = [f"p/{i:04d} file+{i}.bin" for i in range(1005)]  # more than one page of 1000
    for name in names:
        s3.put_object(Bucket=bucket, Key=name, Body=b"")
    assert sorted(store.list("p/")) == sorted(names)
    store.delete(names[0])
    store.delete("p/never-there")  # S3 answers 204 for a missing key too
    assert names[0] not in store.list("p/")
    with pytest.raises(box_s3.StoreError, match="NoSuchBucket"):
        missing = box_s3.S3Store(bucket + "-none", CLOUDS["aws"], store_env(moto_server_url, md))
        missing.get_bytes("x")


def test_keys_xml_cannot_carry_are_listed(moto_server_url, md, s3, bucket):
    """One key with a control character made the listing unreadable, and it read as no keys
    at all: the next checkpoint took number 1 again and the old ones were never pruned."""
    md.aws_identity = lambda: ("role", role_credentials("SecretAccessKey"))
    store = box_s3.S3Store(bucket, CLOUDS["aws"], store_env(moto_server_url, md))
    names = ["p/a\x01b.bin", "p/plain.bin", "p/é ü+%20.bin"]
    for name in names:
        store.put_bytes(name, b"x")
    assert sorted(store.list("p/")) == sorted(names)


def test_a_listing_that_is_not_xml_fails(md, monkeypatch):
    env = {"AWS_REGION": "us-east-1", "ORCH_AGENT_METADATA_URL": md.url}
    store = box_s3.S3Store("ckpt", CLOUDS["aws"], env)
    page = box_s3.Response(200, {}, b"<html><body>Sign in to the network<br></body>")
    monkeypatch.setattr(store, "request", lambda *args, **kwargs: page)
    with pytest.raises(box_s3.StoreError, match="not S3's XML"):
        store.list("p/")


def test_urls_follow_the_addressing_rules(md):
    env = {"AWS_REGION": "eu-west-1", "ORCH_AGENT_METADATA_URL": md.url}
    assert box_s3.S3Store("ckpt", CLOUDS["aws"], env).url_parts("a b/c") == (
        "https://ckpt.s3.eu-west-1.amazonaws.com", "ckpt.s3.eu-west-1.amazonaws.com", "/a%20b/c"
    )  # fmt: skip
    assert box_s3.S3Store("my.ckpt", CLOUDS["aws"], env).url_parts("k")[2] == "/my.ckpt/k"
    own = dict(env, AWS_ENDPOINT_URL="http://127.0.0.1:9000/")
    assert box_s3.S3Store("ckpt", CLOUDS["aws"], own).url_parts("k") == (
        "http://127.0.0.1:9000", "127.0.0.1:9000", "/ckpt/k"
    )  # fmt: skip


def test_the_module_file_is_what_the_box_gets() -> None:
    shipped = Path(box_s3.__file__)
    assert shipped.name == "box_s3.py" and shipped.with_name("agent.py").exists()


def test_boto3_on_aliyun_takes_the_ram_role_from_the_metadata(
    moto_server_url, md, s3, bucket, monkeypatch
):
    """The OSS path (boto3) reads the instance RAM role too: no keys in the environment."""
    from orchestrator.boxside.store_clients import Boto3Store

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("ORCH_STORE_ENDPOINT", moto_server_url)
    monkeypatch.setenv("ORCH_AGENT_METADATA_URL", md.url)
    with pytest.raises(box_s3.StoreError, match="credentials"):  # no role: boto3 finds nothing
        Boto3Store(bucket, CLOUDS["aliyun"]).put_bytes("x", b"1")
    md.aliyun_identity = lambda: ("OrchBoxRole", {**role_credentials(), "SecurityToken": "sts"})
    store = Boto3Store(bucket, CLOUDS["aliyun"])
    store.put_bytes("from-role", b"1")
    assert s3.get_object(Bucket=bucket, Key="from-role")["Body"].read() == b"1"
    assert "/latest/meta-data/ram/security-credentials/OrchBoxRole" in md.paths("GET")
    frozen = store.client._request_signer._credentials.get_frozen_credentials()
    assert (frozen.access_key, frozen.token) == ("ASIAROLEKEY", "sts")
