"""The instance metadata stand-in (tests/sim/metadata.py) keeps the real services' rules."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from tests.sim.metadata import MetadataService

AWS_TTL = "X-aws-ec2-metadata-token-ttl-seconds"
AWS_TOKEN = "X-aws-ec2-metadata-token"
ALIYUN_TTL = "X-aliyun-ecs-metadata-token-ttl-seconds"
ALIYUN_TOKEN = "X-aliyun-ecs-metadata-token"
AWS_NOTICE = "/latest/meta-data/spot/instance-action"
ALIYUN_NOTICE = "/latest/meta-data/instance/spot/termination-time"
INSTANCE_ID = "/latest/meta-data/instance-id"
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture
def md() -> Iterator[MetadataService]:
    with MetadataService(instance_id="i-0feedface0000001") as service:
        yield service


def call(
    md: MetadataService, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, str, dict[str, str]]:
    data = b"" if method == "PUT" else None
    request = urllib.request.Request(md.url + path, data=data, headers=headers or {}, method=method)
    try:
        with DIRECT.open(request, timeout=5) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


def aws_token(md: MetadataService, ttl: str = "21600") -> str:
    status, token, headers = call(md, "PUT", "/latest/api/token", {AWS_TTL: ttl})
    assert status == 200 and token
    assert headers[AWS_TTL] == ttl
    return token


def aliyun_token(md: MetadataService, ttl: str = "21600") -> str:
    status, token, _ = call(md, "PUT", "/latest/api/token", {ALIYUN_TTL: ttl})
    assert status == 200 and token
    return token


# ------------------------------------------------------------------------------ AWS


@pytest.mark.parametrize("ttl", [None, "0", "21601", "-5", "six hours"])
def test_aws_token_needs_a_ttl_between_1_and_21600(md: MetadataService, ttl: str | None) -> None:
    headers = {} if ttl is None else {AWS_TTL: ttl}
    status, body, _ = call(md, "PUT", "/latest/api/token", headers)
    assert status == 400 and body == ""
    assert aws_token(md, "1") != aws_token(md, "21600")


def test_aws_token_request_through_a_proxy_is_refused(md: MetadataService) -> None:
    headers = {AWS_TTL: "60", "X-Forwarded-For": "10.0.0.9"}
    status, body, _ = call(md, "PUT", "/latest/api/token", headers)
    assert status == 403 and body == ""


@pytest.mark.parametrize("path", [AWS_NOTICE, INSTANCE_ID])
def test_aws_get_without_a_valid_token_is_401(md: MetadataService, path: str) -> None:
    assert call(md, "GET", path)[0] == 401
    assert call(md, "GET", path, {AWS_TOKEN: "made-up"})[0] == 401
    assert call(md, "GET", path, {AWS_TOKEN: aws_token(md)})[0] in (200, 404)


def test_aws_tokens_expire_and_can_be_revoked(md: MetadataService) -> None:
    token = aws_token(md, "5")
    assert call(md, "GET", INSTANCE_ID, {AWS_TOKEN: token})[:2] == (200, "i-0feedface0000001")
    md.advance_clock(6)
    assert call(md, "GET", INSTANCE_ID, {AWS_TOKEN: token})[0] == 401
    fresh = aws_token(md)
    md.revoke_tokens()
    assert call(md, "GET", INSTANCE_ID, {AWS_TOKEN: fresh})[0] == 401


def test_aws_spot_notice_appears_and_is_withdrawn(md: MetadataService) -> None:
    headers = {AWS_TOKEN: aws_token(md)}
    assert call(md, "GET", AWS_NOTICE, headers)[0] == 404
    md.notice_aws(action="hibernate", at=datetime(2026, 12, 3, 12, 0, tzinfo=UTC))
    status, body, _ = call(md, "GET", AWS_NOTICE, headers)
    assert status == 200
    assert json.loads(body) == {"action": "hibernate", "time": "2026-12-03T12:00:00Z"}
    md.clear()
    assert call(md, "GET", AWS_NOTICE, headers)[0] == 404
    with pytest.raises(ValueError):
        md.notice_aws(action="reboot")


# ------------------------------------------------------------------------------ Aliyun


def test_aliyun_hardened_mode_needs_its_own_token(md: MetadataService) -> None:
    assert call(md, "GET", ALIYUN_NOTICE)[0] == 403
    assert call(md, "GET", ALIYUN_NOTICE, {AWS_TOKEN: aws_token(md)})[0] == 403
    assert call(md, "GET", ALIYUN_NOTICE, {ALIYUN_TOKEN: aws_token(md)})[0] == 403
    token = aliyun_token(md)
    assert call(md, "GET", ALIYUN_NOTICE, {ALIYUN_TOKEN: token})[0] == 404
    assert call(md, "GET", INSTANCE_ID, {ALIYUN_TOKEN: token})[:2] == (
        200,
        "i-bp1abcdefghijklmnop",
    )
    assert call(md, "GET", AWS_NOTICE, {AWS_TOKEN: token})[0] == 401  # not an AWS token
    assert call(md, "PUT", "/latest/api/token", {ALIYUN_TTL: "0"})[0] == 400


def test_aliyun_termination_time_appears_and_is_withdrawn(md: MetadataService) -> None:
    headers = {ALIYUN_TOKEN: aliyun_token(md)}
    md.notice_aliyun(at=datetime(2026, 12, 3, 12, 0, tzinfo=UTC))
    assert call(md, "GET", ALIYUN_NOTICE, headers)[:2] == (200, "2026-12-03T12:00:00Z")
    md.clear()
    assert call(md, "GET", ALIYUN_NOTICE, headers)[0] == 404


def test_aliyun_normal_mode_answers_plain_gets() -> None:
    with MetadataService(aliyun_tokens_required=False) as md:
        md.notice_aliyun(at=datetime(2026, 12, 3, 20, 0, tzinfo=UTC))
        assert call(md, "GET", ALIYUN_NOTICE)[:2] == (200, "2026-12-03T20:00:00Z")


# ------------------------------------------------------------------------------ both


def test_requests_are_recorded_and_unknown_paths_are_404(md: MetadataService) -> None:
    token = aws_token(md)
    assert call(md, "GET", "/latest/meta-data/nothing-here", {AWS_TOKEN: token})[0] == 404
    assert call(md, "POST", "/latest/api/token")[0] == 405
    assert md.requests == [
        ("PUT", "/latest/api/token"),
        ("GET", "/latest/meta-data/nothing-here"),
        ("POST", "/latest/api/token"),
    ]
    assert md.paths("GET") == ["/latest/meta-data/nothing-here"]
