"""Remote state in moto's S3, tried as a hostile or unlucky second home would (issue 9: 16-18).

Real Terraform core + hashicorp/aws against moto: tampered bundles are refused before anything
is destroyed or deleted, two concurrent `up`s of one name have exactly one winner (S3
conditional writes), a bucket without s3:DeleteObject is refused before applying, and a state
lock held by someone else is named while `down` waits for it.
"""

from __future__ import annotations

import copy
import http.client
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.e2e.test_aws_lifecycle import (
    CIDR,
    assert_nothing_left,
    candidate,
    live_instances,
    one_line_error,
    security_groups_of,
)
from tests.support import ok, plan_file

pytestmark = pytest.mark.e2e

BUCKET = "orch-e2e-remote"
PREFIX = "team/ci"
STATE_URL = f"s3://{BUCKET}/{PREFIX}"


def keys_in(s3: Any) -> set[str]:
    listing = s3.list_objects_v2(Bucket=BUCKET)
    return {o["Key"] for o in listing.get("Contents", [])}


def read_json(s3: Any, key: str) -> dict[str, Any]:
    return json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())


def put_json(s3: Any, key: str, data: dict[str, Any]) -> None:
    s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(data).encode())


def retarget(bundle: dict[str, Any], *, name: str | None = None, region: str | None = None,
             cloud: str | None = None) -> dict[str, Any]:  # fmt: skip
    """A copy of `bundle` edited consistently everywhere the name/region/cloud appear."""
    bundle = copy.deepcopy(bundle)
    box = bundle["box"]
    values = json.loads(bundle["files"]["terraform.tfvars.json"])
    if name is not None:
        box["name"] = values["name"] = values["default_tags"]["orch:box"] = name
    if region is not None:
        box["region"] = box["candidate"]["region"] = values["region"] = region
    if cloud is not None:
        box["cloud"] = box["candidate"]["cloud"] = cloud
    bundle["files"]["terraform.tfvars.json"] = json.dumps(values)
    return bundle


@pytest.fixture
def bucket(s3: Any) -> Iterator[str]:
    s3.create_bucket(Bucket=BUCKET)
    yield BUCKET
    for key in keys_in(s3):
        s3.delete_object(Bucket=BUCKET, Key=key)
    s3.delete_bucket(Bucket=BUCKET)


def test_tampered_bundles_are_refused_and_nothing_is_deleted(
    orch, orch_process, ec2, s3, bucket, aws_env, tmp_path
):
    name = "victim"
    plan = plan_file(tmp_path, candidate("g4dn.xlarge"))
    ok(orch("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--state", STATE_URL,
            "--no-check"))  # fmt: skip
    home_b = {**aws_env, "ORCH_HOME": str(tmp_path / "home-b")}
    real_key = f"{PREFIX}/{name}/orch-box.json"
    real = read_json(s3, real_key)
    stored = keys_in(s3)
    assert f"{PREFIX}/{name}/orch-claim.json" in stored

    def refused(box_name: str, *words: str) -> None:
        before = keys_in(s3)
        one_line_error(orch("down", box_name, "--state", STATE_URL, env=home_b), 2, *words)
        assert keys_in(s3) == before  # nothing deleted
        assert len(live_instances(ec2, name)) == 1  # nothing destroyed
        assert not (tmp_path / "home-b" / "boxes" / box_name).exists()

    # 1. `down decoy` with decoy's bundle edited to describe the victim.
    put_json(s3, f"{PREFIX}/decoy/orch-box.json", real)
    refused("decoy", "names another box", "'victim'")
    # 2. A name that walks out of the prefix.
    put_json(s3, f"{PREFIX}/decoy/orch-box.json", retarget(real, name="../../.."))
    refused("decoy", "names another box", "'../../..'")
    s3.delete_object(Bucket=BUCKET, Key=f"{PREFIX}/decoy/orch-box.json")
    # 3. The victim's own bundle, region changed consistently: its state says otherwise.
    put_json(s3, real_key, retarget(real, region="us-west-2"))
    refused(name, "region us-west-2", "us-east-1")
    # ... or changed in one place only.
    half = copy.deepcopy(real)
    half["box"]["region"] = "eu-west-1"
    put_json(s3, real_key, half)
    refused(name, "inconsistent or invalid regions")
    # 4. Another cloud, or a malformed region.
    put_json(s3, real_key, retarget(real, cloud="aliyun"))
    refused(name, "says cloud aliyun", "hashicorp/aws")
    put_json(s3, real_key, retarget(real, region="../us-east-1"))
    refused(name, "invalid regions")
    # 5. A terminal escape, a string where a number belongs, a list where a text belongs.
    for field, value in (("instance_type", "g4dn.xlarge\x1b[2J\x1b]0;owned\x07"),
                         ("price_per_hour", "0.526"), ("gpu", ["T4"])):  # fmt: skip
        hostile = copy.deepcopy(real)
        hostile["box"]["candidate"][field] = value
        put_json(s3, real_key, hostile)
        refused(name, f"candidate: {field} ", "is damaged")

    # The real bundle back, its type since gone from the catalog (a box must still be
    # destroyable), and a stale Terraform lock in the way: `down` names its holder while it
    # waits; deleting the lock object (docs/provisioning.md) lets it through.
    retired = copy.deepcopy(real)
    retired["box"]["candidate"]["instance_type"] = "g3.4xlarge"
    put_json(s3, real_key, retired)
    lock_key = f"{PREFIX}/{name}/terraform.tfstate.tflock"
    put_json(s3, lock_key, {"ID": "5e1f-stale", "Operation": "OperationTypeApply",
                            "Who": "ci@runner-7", "Created": "2026-12-03T09:00:00Z"})  # fmt: skip
    process = orch_process("down", name, "--state", STATE_URL, env=home_b)
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if "waiting for Terraform's state lock" in line:
            assert "ci@runner-7" in line and "5e1f-stale" in line
            s3.delete_object(Bucket=BUCKET, Key=lock_key)
            break
    rest = process.stderr.read()
    assert process.wait(timeout=300) == 0, "".join(seen) + rest
    assert "destroying box victim (g3.4xlarge in us-east-1)" in "".join(seen) + rest
    assert_nothing_left(ec2, name)
    assert keys_in(s3) == set()


def test_two_concurrent_ups_of_one_name_have_one_winner(orch, orch_process, ec2, s3, bucket,
                                                        aws_env, tmp_path):  # fmt: skip
    name = "cc"
    plan = plan_file(tmp_path, candidate("g4dn.xlarge"))
    homes = [{**aws_env, "ORCH_HOME": str(tmp_path / f"home-{i}")} for i in (1, 2)]
    args = ("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--state", STATE_URL,
            "--no-check")  # fmt: skip
    processes = [orch_process(*args, env=env) for env in homes]
    results = [(p.wait(timeout=600), p.stderr.read() if p.stderr else "") for p in processes]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    winner = next(i for i, (code, _) in enumerate(results) if code == 0)
    loser_err = results[1 - winner][1].strip().splitlines()
    assert loser_err == [loser_err[0]] and "already claimed" in loser_err[0], loser_err
    assert not (tmp_path / f"home-{2 - winner}" / "boxes" / name).exists()
    (instance,) = live_instances(ec2, name)
    winner_box = json.loads((tmp_path / f"home-{winner + 1}" / "boxes" / name / "box.json")
                            .read_text())  # fmt: skip
    assert winner_box["outputs"]["instance_id"] == instance["InstanceId"]
    assert winner_box["runner"] is None  # at rest: nobody works on it
    claim = read_json(s3, f"{PREFIX}/{name}/orch-claim.json")
    assert claim["id"] == winner_box["claim_id"]

    # The loser's home cannot take it over later either, and `down` releases the claim.
    one_line_error(orch(*args, env=homes[1 - winner]), 2, "already claimed")
    ok(orch("down", name, env=homes[winner]))
    assert_nothing_left(ec2, name)
    assert keys_in(s3) == set()


def test_failed_up_that_created_nothing_releases_the_claim(orch, s3, bucket, aws_env, tmp_path):
    plan = plan_file(tmp_path, candidate("g4dn.xlarge"))
    env = {**aws_env, "ORCH_TERRAFORM": "/bin/false"}  # every terraform command fails
    args = ("up", "--plan", plan, "--name", "nothing", "--ssh-cidr", CIDR, "--state", STATE_URL,
            "--no-check")  # fmt: skip
    one_line_error(orch(*args, "--json", env=env), 1, "terraform init failed")
    assert keys_in(s3) == set()  # claim and bundle given back
    # Another home may now use the name (its claim succeeds; init fails the same way).
    other = {**env, "ORCH_HOME": str(tmp_path / "home-2")}
    one_line_error(orch(*args, "--json", env=other), 1, "terraform init failed")


def test_rerun_that_fails_before_apply_keeps_the_state_of_an_earlier_apply(
    orch, ec2, s3, bucket, aws_env, capacity_proxy, tmp_path
):
    """A failed `up` that did create resources, re-run, fails again before `terraform apply`
    (init fails): this run created nothing, but the earlier one did, so the state that holds
    those resources and the name's claim stay in the bucket, and `down` removes everything."""
    name = "rerun-early"
    plan = plan_file(tmp_path, candidate("g4dn.xlarge"))
    env = {**aws_env, "AWS_ENDPOINT_URL": capacity_proxy.url}
    args = ("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR, "--state", STATE_URL,
            "--no-check", "--json")  # fmt: skip
    with capacity_proxy.refusing({"g4dn.xlarge": "InvalidParameterCombination"}):
        one_line_error(orch(*args, env=env), 1, "InvalidParameterCombination")
    assert len(security_groups_of(ec2, name)) == 1  # the first run created resources
    state_key, claim_key = (f"{PREFIX}/{name}/{leaf}" for leaf in ("terraform.tfstate",
                                                                   "orch-claim.json"))  # fmt: skip
    assert {state_key, claim_key} <= keys_in(s3)

    one_line_error(orch(*args, env={**env, "ORCH_TERRAFORM": "/bin/false"}), 1, "init failed")
    assert {state_key, claim_key} <= keys_in(s3), keys_in(s3)
    status = json.loads(ok(orch("status", name, "--json", env=env)).stdout)
    assert status["state"] == "failed" and "nothing was created" not in str(status["error"])
    ok(orch("down", name, env=env))
    assert_nothing_left(ec2, name)
    assert keys_in(s3) == set()


# ------------------------------------------------------------------------------ permissions

S3_DENIED = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    "<Message>Access Denied</Message><RequestId>orch-test</RequestId></Error>"
)


class DenyingS3Proxy:
    """Forward S3 requests to moto, answering 403 AccessDenied (S3's own error shape) for the
    denied methods: DELETE alone is a policy without s3:DeleteObject."""

    def __init__(self, upstream: str, deny: set[str]):
        target = urlparse(upstream)
        denied = deny

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.command in denied:
                    self._send(403, {"Content-Type": "application/xml"}, S3_DENIED.encode())
                    return
                upstream_conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                upstream_conn.request(self.command, self.path, body=body or None, headers=headers)
                response = upstream_conn.getresponse()
                data = response.read()
                skip = ("transfer-encoding", "connection", "content-length")
                kept = {k: v for k, v in response.getheaders() if k.lower() not in skip}
                self._send(response.status, kept, data if self.command != "HEAD" else b"")
                upstream_conn.close()

            def _send(self, status: int, headers: dict[str, str], data: bytes) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _relay

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> DenyingS3Proxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_state_bucket_without_delete_permission_is_refused_before_apply(
    orch, ec2, s3, bucket, aws_env, tmp_path
):
    name = "nodelete"
    plan = plan_file(tmp_path, candidate("g4dn.xlarge"))
    with DenyingS3Proxy(aws_env["AWS_ENDPOINT_URL"], {"DELETE"}) as proxy:
        env = {**aws_env, "AWS_ENDPOINT_URL_S3": proxy.url}
        result = orch("up", "--plan", plan, "--name", name, "--ssh-cidr", CIDR,
                      "--state", STATE_URL, "--no-check", env=env)  # fmt: skip
    line = one_line_error(result, 2, "s3:DeleteObject", "nothing was created")
    assert f"{PREFIX}/{name}/" in line
    assert live_instances(ec2, name) == []
    assert not (Path(aws_env["ORCH_HOME"]) / "boxes" / name).exists()
    assert keys_in(s3) == set()  # the delete was tried first: no probe object left behind
