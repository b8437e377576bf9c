"""Instance RAM roles: the emulator's RAM, STS and ECS role actions (driven over HTTP by the real
SDK, through orch's own RAM client), orch's listing and deleting of its roles by tag, and the
module inputs a box identity becomes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.clouds.identity import BoxIdentity
from orchestrator.errors import UsageError
from tests.sim.aliyun.server import RunningEmulator
from tests.support import require_module

require_module("alibabacloud_ecs20140526")

from alibabacloud_ecs20140526 import models  # noqa: E402
from alibabacloud_ecs20140526.client import Client  # noqa: E402
from alibabacloud_tea_openapi.models import Config  # noqa: E402

from orchestrator.clouds.aliyun import ram  # noqa: E402
from orchestrator.clouds.aliyun.errors import AliyunError  # noqa: E402
from orchestrator.clouds.aliyun.identity import identity_vars  # noqa: E402
from tests.sim.aliyun.ram_responses import instance_credentials  # noqa: E402
from tests.sim.identity import EmulatorInstanceIdentity  # noqa: E402
from tests.unit.test_aliyun_emulator import network, run  # noqa: E402

REGION = "cn-hangzhou"
ECS_TRUST = json.dumps(
    {
        "Version": "1",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "sts:AssumeRole",
                "Principal": {"Service": ["ecs.aliyuncs.com"]},
            }
        ],
    }
)
ACCOUNT_TRUST = ECS_TRUST.replace(
    '"Service": ["ecs.aliyuncs.com"]', '"RAM": ["acs:ram::1234567890123456:root"]'
)
POLICY = json.dumps(
    {
        "Version": "1",
        "Statement": [{"Effect": "Allow", "Action": ["oss:GetObject"], "Resource": ["*"]}],
    }
)


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    with RunningEmulator() as running:
        yield running


@pytest.fixture
def sim(emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch) -> RunningEmulator:
    emulator.backend.reset()
    emulator.backend.settings.launch_delay_s = 0.0
    for product in ("ECS", "VPC", "RAM"):
        monkeypatch.setenv(f"ALIBABA_CLOUD_ENDPOINT_{product}", emulator.endpoint)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "AKID")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "secret")
    return emulator


@pytest.fixture
def ecs(sim: RunningEmulator) -> Client:
    host = sim.endpoint.removeprefix("http://")
    return Client(Config(access_key_id="AKID", access_key_secret="secret", region_id=REGION,
                         endpoint=host, protocol="HTTP"))  # fmt: skip


def call(action: str, **params: Any) -> dict[str, Any]:
    return ram.ram_rpc(REGION, action, params)


def code_of(action: str, **params: Any) -> str:
    with pytest.raises(AliyunError) as caught:
        call(action, **params)
    return caught.value.code


def role(name: str, trust: str = ECS_TRUST, **tags: str) -> dict[str, Any]:
    tag = json.dumps([{"Key": k, "Value": v} for k, v in tags.items()]) if tags else None
    return call("CreateRole", RoleName=name, AssumeRolePolicyDocument=trust, Tag=tag)["Role"]


# ---------------------------------------------------------------------------- the emulator


def test_roles_are_checked_as_ram_checks_them(sim):
    made = role("orch-b1-abc", **{"orch:box": "b1"})
    assert made["Arn"] == "acs:ram::1234567890123456:role/orch-b1-abc"
    assert call("GetRole", RoleName="ORCH-B1-ABC")["Role"]["RoleName"] == "orch-b1-abc"
    assert code_of("CreateRole", RoleName="orch-b1-abc", AssumeRolePolicyDocument=ECS_TRUST) == (
        "EntityAlreadyExists.Role"
    )
    assert code_of("CreateRole", RoleName="bad_name", AssumeRolePolicyDocument=ECS_TRUST) == (
        "InvalidParameter.RoleName.InvalidChars"
    )
    assert code_of("CreateRole", RoleName="r" * 65, AssumeRolePolicyDocument=ECS_TRUST) == (
        "InvalidParameter.RoleName.Length"
    )
    assert code_of("CreateRole", RoleName="r1", AssumeRolePolicyDocument="{") == (
        "MalformedPolicyDocument"
    )
    assert code_of("GetRole", RoleName="nope") == "EntityNotExist.Role"


def test_attached_policies_block_deletes_in_both_directions(sim):
    role("r1")
    call("CreatePolicy", PolicyName="p1", PolicyDocument=POLICY)
    assert code_of("CreatePolicy", PolicyName="p.1", PolicyDocument=POLICY) == (
        "InvalidParameter.PolicyName.InvalidChars"
    )
    call("AttachPolicyToRole", RoleName="r1", PolicyName="p1", PolicyType="Custom")
    assert code_of("AttachPolicyToRole", RoleName="r1", PolicyName="p1", PolicyType="Custom") == (
        "EntityAlreadyExists.Role.Policy"
    )
    assert code_of("DeleteRole", RoleName="r1") == "DeleteConflict.Role.Policy"
    assert code_of("DeletePolicy", PolicyName="p1") == "DeleteConflict.Role.Policy"
    got = call("GetPolicy", PolicyName="p1", PolicyType="Custom")
    assert got["Policy"]["AttachmentCount"] == 1
    assert got["DefaultPolicyVersion"]["PolicyDocument"] == POLICY
    call("DetachPolicyFromRole", RoleName="r1", PolicyName="p1", PolicyType="Custom")
    assert code_of("DetachPolicyFromRole", RoleName="r1", PolicyName="p1", PolicyType="Custom") == (
        "EntityNotExist.Role.Policy"
    )
    call("DeletePolicy", PolicyName="p1")
    call("DeleteRole", RoleName="r1")
    assert sim.backend.ram.summary() == {"roles": [], "policies": [], "attachments": []}


def test_an_instance_role_must_trust_ecs_and_one_per_instance(sim, ecs):
    _, vswitch, group = network(ecs)
    [instance] = run(ecs, vswitch, group)
    role("account-role", ACCOUNT_TRUST)
    role("box-role")

    def attach(name: str) -> Any:
        request = models.AttachInstanceRamRoleRequest(
            region_id=REGION, ram_role_name=name, instance_ids=json.dumps([instance])
        )
        return ecs.attach_instance_ram_role(request).body

    with pytest.raises(Exception, match="InvalidRamRole.NotEcsRole"):
        attach("account-role")
    with pytest.raises(Exception, match="InvalidRamRole.NotFound"):
        attach("missing")
    assert instance_credentials(sim.backend, instance) is None  # no role: no credentials
    assert attach("box-role").fail_count == 0
    second = attach("box-role")
    assert second.fail_count == 1
    assert not second.attach_instance_ram_role_results.attach_instance_ram_role_result[0].success
    described = ecs.describe_instance_ram_role(
        models.DescribeInstanceRamRoleRequest(region_id=REGION, instance_ids=json.dumps([instance]))
    ).body.instance_ram_role_sets.instance_ram_role_set
    assert [(d.instance_id, d.ram_role_name) for d in described] == [(instance, "box-role")]

    # What the metadata serves at ram/security-credentials/box-role.
    identity = EmulatorInstanceIdentity(sim.backend, "b1")
    name, document = identity()
    assert name == "box-role" and document["Code"] == "Success"
    assert document["AccessKeyId"].startswith("STS.") and document["SecurityToken"]
    assert set(document) >= {"AccessKeySecret", "Expiration"}
    assert sim.backend.ram.issued == [("box-role", instance)]


def test_sts_assume_role_only_for_principals_the_role_trusts(sim):
    import urllib.error
    import urllib.parse
    import urllib.request

    role("ecs-only")
    role("for-account", ACCOUNT_TRUST)

    def assume(name: str) -> tuple[int, dict[str, Any]]:
        query = urllib.parse.urlencode(
            {"Action": "AssumeRole", "Version": "2015-04-01", "AccessKeyId": "AKID",
             "RoleArn": f"acs:ram::1234567890123456:role/{name}", "RoleSessionName": "s1"}
        )  # fmt: skip
        try:
            with urllib.request.urlopen(f"{sim.endpoint}/?{query}", data=b"") as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    status, body = assume("ecs-only")
    assert (status, body["Code"]) == (403, "NoPermission")
    status, body = assume("for-account")
    assert status == 200
    assert set(body["Credentials"]) == {
        "AccessKeyId", "AccessKeySecret", "SecurityToken", "Expiration",
    }  # fmt: skip
    assert body["AssumedRoleUser"]["Arn"].endswith("role/for-account/s1")


# ---------------------------------------------------------------------------- orch's side


def test_orch_finds_and_deletes_only_its_own_roles_by_tag_and_region(sim):
    mine = {"orch:box": "b1", "orch:region": REGION}
    role("orch-b1-1", **mine)
    role("orch-b2-1", **{**mine, "orch:box": "b2"})
    role("orch-b1-elsewhere", **{**mine, "orch:region": "cn-beijing"})
    role("users-own-role")  # --instance-profile: no orch tags
    call("CreatePolicy", PolicyName="orch-b1-1", PolicyDocument=POLICY,
         Tag=json.dumps([{"Key": k, "Value": v} for k, v in mine.items()]))  # fmt: skip
    call("AttachPolicyToRole", RoleName="orch-b1-1", PolicyName="orch-b1-1", PolicyType="Custom")
    call("AttachPolicyToRole", RoleName="users-own-role", PolicyName="orch-b1-1",
         PolicyType="Custom")  # fmt: skip

    found = ram.list_tagged(REGION, {"orch:box": "b1"})
    assert sorted((r.kind, r.id) for r in found) == [
        ("ram_policy", "orch-b1-1"),
        ("ram_role", "orch-b1-1"),
    ]
    assert {r.id for r in ram.list_tagged(REGION, {})} == {"orch-b1-1", "orch-b2-1"}

    ram.delete_role(REGION, "orch-b1-1")
    ram.delete_policy(REGION, "orch-b1-1")  # detached from the user's role first
    ram.delete_role(REGION, "orch-b1-1")  # gone already: not an error
    ram.delete_policy(REGION, "orch-b1-1")
    assert sim.backend.ram.summary()["roles"] == [
        "orch-b1-elsewhere", "orch-b2-1", "users-own-role",
    ]  # fmt: skip
    assert sim.backend.ram.summary()["policies"] == []


def test_a_box_identity_becomes_the_module_s_ram_inputs():
    assert identity_vars(None) == {}
    assert identity_vars(BoxIdentity(agent=True)) == {}  # Cloud Assistant needs no role
    assert identity_vars(BoxIdentity(existing="my.role-1")) == {"ram_role_name": "my.role-1"}
    assert identity_vars(BoxIdentity(stores=("s3://ckpt-bucket/runs/r1", "s3://other"))) == {
        "create_ram_role": True,
        "ram_role_oss_prefixes": ["ckpt-bucket/runs/r1", "other"],
    }
    with pytest.raises(UsageError, match="no RAM role name"):
        identity_vars(BoxIdentity(existing="a+b"))
    with pytest.raises(UsageError, match="no OSS bucket name"):
        identity_vars(BoxIdentity(stores=("s3://my.bucket/runs",)))


def test_credentials_without_ram_rights_list_no_roles_and_other_errors_stand(sim):
    role("orch-b1-1", **{"orch:box": "b1", "orch:region": REGION})
    sim.backend.inject_fault("ListTagResources", "NoPermission")
    assert ram.list_tagged(REGION, {}) == []  # could not have created one either
    sim.backend.inject_fault("ListTagResources", "Throttling")
    with pytest.raises(AliyunError, match="Throttling"):
        ram.list_tagged(REGION, {})
    assert [r.id for r in ram.list_tagged(REGION, {})] == ["orch-b1-1"]
