"""Hostile input to `orch up` / `orch down` (issue 9 items 2-6, 19): each is refused with exit 2
and one `orch: error:` line before any cloud or Terraform call, and leaves no box record.

The real CLI runs in-process; what would reach a cloud (rendering a box, Terraform, the
caller-address lookup) is replaced by a tripwire, so a value that slips through fails the
test instead of touching anything.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.provision import display, inputs, launch
from orchestrator.provision.boxes import Box, box_directory
from orchestrator.provision.request import UpRequest
from tests.support import (
    Tripwire,
    candidate,
    cli_refused,
    forbid_cloud_reach,
    plan_file,
    run_cli,
    with_cloud_credentials,
)

CIDR = "203.0.113.7/32"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ORCH_LOCK_TIMEOUT", raising=False)
    with_cloud_credentials(monkeypatch)
    forbid_cloud_reach(monkeypatch)
    return tmp_path / "home"


def refused(capsys: pytest.CaptureFixture[str], *argv: str, words: tuple[str, ...] = ()) -> str:
    """Exit 2, one error line containing `words`, and `orch list` shows no box."""
    line = cli_refused(capsys, *argv, words=words)
    code, out, _ = run_cli(capsys, "list", "--json")
    assert code == 0 and json.loads(out) == []
    return line


def up_args(plan: str, *extra: str) -> list[str]:
    return ["up", "--plan", plan, "--name", "hostile", "--ssh-cidr", CIDR, "--no-check", *extra]


# ------------------------------------------------------------------------------ plan values

AWS = "g4dn.xlarge"
ALIYUN = "ecs.gn6i-c4g1.xlarge"

HOSTILE_CANDIDATES = [
    # (instance type, changes, words in the error)
    ("g9.nonesuch", {}, ("instance type", "not in the catalog")),
    ("ecs.gn99-nonesuch.xlarge", {}, ("aliyun instance type",)),  # not a NoStock failover
    (AWS, {"cloud": "gcp"}, ("unknown cloud",)),
    (AWS, {"region": "us-east-1\nx"}, ("region",)),
    (AWS, {"region": "../../etc"}, ("region",)),
    (ALIYUN, {"region": "us-east-1; rm -rf /"}, ("region",)),
    (AWS, {"market": "reserved"}, ("market",)),
    (AWS, {"ssh_user": "-oProxyCommand=touch /tmp/pwned"}, ("ssh_user",)),
    (AWS, {"ssh_user": "root@evil"}, ("ssh_user",)),
    (AWS, {"root_volume_gib": '160"'}, ("root_volume_gib",)),
    (AWS, {"root_volume_gib": 0}, ("root_volume_gib",)),
    (AWS, {"root_volume_gib": 10**9}, ("root_volume_gib",)),
    (AWS, {"root_volume_gib": True}, ("root_volume_gib",)),
    (ALIYUN, {"root_volume_gib": -5}, ("root_volume_gib",)),  # not 20 GiB
    (ALIYUN, {"root_volume_gib": 4096}, ("root_volume_gib", "2048")),
    (AWS, {"root_volume_gib": math.nan}, ("root_volume_gib",)),
    (AWS, {"image": {}}, ("image",)),
    (AWS, {"image": "ami-1e749f67"}, ("image",)),
    (AWS, {"image": {"id": "ami-1; curl evil"}}, ("image.id",)),
    (AWS, {"image": {"bogus": "x"}}, ("image",)),
    (AWS, {"image": {"owners": "amazon"}}, ("image",)),
    (AWS, {"image": {"ssm_parameter": 7}}, ("image.ssm_parameter",)),
    (ALIYUN, {"image": {"ssm_parameter": "/aws/x"}}, ("image",)),  # an AWS field on Aliyun
    (AWS, {"image": {"id": "ami-1e749f67", "cuda": "12.8; reboot"}}, ("image.cuda",)),
    (AWS, {"image": {"id": "ami-1e749f67", "cuda": 12.8}}, ("image.cuda",)),
    (AWS, {"image": {"cuda": "12.8"}}, ("image",)),  # a CUDA version names no image
    (AWS, {"price_per_hour": "cheap"}, ("price_per_hour",)),
    (AWS, {"price_per_hour": -1.0}, ("price_per_hour",)),
    (AWS, {"cost": math.inf}, ("cost",)),
    (AWS, {"gpu_count": 0}, ("gpu_count",)),
    (AWS, {"gpu_count": "1"}, ("gpu_count",)),
    (AWS, {"hours": -2.0}, ("hours",)),
    (AWS, {"nodes": 0}, ("nodes",)),
    (AWS, {"nodes": 65}, ("nodes",)),
    (AWS, {"nodes": True}, ("nodes",)),
    (AWS, {"mfu": "high"}, ("mfu",)),
    (AWS, {"tokens_per_s_per_gpu": -1.0}, ("tokens_per_s_per_gpu",)),
    (AWS, {"memory_per_gpu_bytes": 1.5}, ("memory_per_gpu_bytes",)),
    (AWS, {"warnings": "not a list"}, ("warnings",)),
    (AWS, {"ssh_ingress_cidrs": ["nope"]}, ("ssh_ingress_cidrs",)),
]


@pytest.mark.parametrize(("instance_type", "changes", "words"), HOSTILE_CANDIDATES)
def test_a_hostile_plan_value_is_refused_before_any_cloud_call(
    capsys, home, tmp_path, instance_type, changes, words
) -> None:
    plan = plan_file(tmp_path, replace(candidate(instance_type), **changes))
    refused(capsys, *up_args(plan), words=("plan choice", *words))


def test_a_bad_alternative_is_refused_too(capsys, home, tmp_path) -> None:
    plan = plan_file(tmp_path, candidate(AWS), candidate(AWS, market="dedicated"))
    refused(capsys, *up_args(plan), words=("plan alternative 1", "market"))


@pytest.mark.parametrize("instance_type", [AWS, ALIYUN])
@pytest.mark.parametrize("cuda", [None, "12.8"])
def test_the_suite_s_default_candidates_pass(capsys, home, tmp_path, instance_type, cuda) -> None:
    """The other side of the tests above: a sound plan gets as far as rendering the box,
    also with the CUDA its image needs (`image.cuda`, which `orch check` holds the driver to)."""
    sound = candidate(instance_type)
    if cuda:
        sound = replace(sound, image={**sound.image, "cuda": cuda})
    plan = plan_file(tmp_path, sound)
    with pytest.raises(Tripwire):
        run_cli(capsys, *up_args(plan))


@pytest.mark.parametrize(
    ("instance_type", "variables", "words"),
    [
        (AWS, ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"), ("no AWS credentials", "AWS")),
        (
            ALIYUN,
            ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET"),
            ("no Alibaba Cloud credentials", "Aliyun"),
        ),
    ],
)
def test_up_without_credentials_is_one_line_exit_2_and_no_record(
    home, tmp_path, instance_type, variables, words
) -> None:
    """Issue 23 item 3: the preflight refuses before the lock, the record and Terraform, so
    `orch down` has nothing stuck to fail on. A subprocess: the Alibaba credentials package
    reads the environment once, at import."""
    import os
    import subprocess
    import sys

    empty = tmp_path / "no-home"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ALIBABA_CLOUD_"))}
    env.update(
        HOME=str(empty),  # no ~/.aws, ~/.aliyun, ~/.alibabacloud
        AWS_EC2_METADATA_DISABLED="true",  # no instance role to find on a test machine
        ALIBABA_CLOUD_ECS_METADATA_DISABLED="true",
    )
    plan = plan_file(tmp_path, candidate(instance_type))
    orch = [sys.executable, "-m", "orchestrator"]
    result = subprocess.run([*orch, *up_args(plan)], env=env, capture_output=True, text=True)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("orch: error: "), result.stderr
    assert all(word in lines[0] for word in (*words, "nothing was created")), lines[0]
    assert not box_directory("hostile").exists()
    down = subprocess.run([*orch, "down", "hostile"], env=env, capture_output=True, text=True)
    assert down.returncode == 2 and "no box named 'hostile'" in down.stderr  # nothing stuck


def test_a_refusal_while_rendering_leaves_no_phantom_box(capsys, home, tmp_path, monkeypatch):
    """A UsageError raised by a cloud's tfvars (after the record was written) removes the new
    record again: `orch list` shows no `creating` box."""
    from orchestrator.errors import UsageError

    def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise UsageError("--subnet-id is not supported for Aliyun boxes yet")

    monkeypatch.setattr(launch, "render_box", refuse)
    plan = plan_file(tmp_path, candidate(ALIYUN))
    refused(capsys, *up_args(plan, "--subnet-id", "vsw-1"), words=("--subnet-id",))
    assert not box_directory("hostile").exists()


@pytest.mark.parametrize("bid", ["0.00001", "0.0000001"])
def test_a_bid_the_cloud_would_refuse_leaves_no_phantom_box(
    capsys, home, tmp_path, monkeypatch, bid
):
    """Issue 9 item 19: a spot bid that rounds to nothing is refused by the Aliyun mapping while
    the box is rendered (the real renderer runs here): exit 2 and no `creating` box."""
    from orchestrator.provision import render

    monkeypatch.setattr(launch, "render_box", render.render_box)
    plan = plan_file(tmp_path, candidate(ALIYUN, "spot"))
    refused(capsys, *up_args(plan, "--spot-bid", bid), words=("price",))
    assert not box_directory("hostile").exists()


# ------------------------------------------------------------------------------ options


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--ttl", ""], ("--ttl", "none")),  # an unset CI variable is not "no expiry"
        (["--ttl", "   "], ("--ttl",)),
        (["--ttl", "9999999999d"], ("--ttl",)),  # was OverflowError
        (["--ttl", "40d"], ("longer than 30 days",)),
        (["--ttl", "2h\nx"], ("--ttl",)),
        (["--ttl", "\u0663h"], ("--ttl",)),  # an Arabic-Indic 3: ASCII digits only
        (["--ssh-cidr", "0.0.0.0/1", "--ssh-cidr", "128.0.0.0/1"], ("--allow-world-ssh",)),
        (["--ssh-cidr", "10.0.0.0/8", "--ssh-cidr", "11.0.0.0/8"], ("more than a /8",)),
        (["--ssh-cidr", "0.0.0.0/7"], ("--allow-world-ssh",)),
        (["--name", "hostile\n"], ("bad box name",)),
    ],
)
def test_hostile_options_are_refused(capsys, home, tmp_path, extra, words) -> None:
    plan = plan_file(tmp_path, candidate(AWS))
    argv = ["up", "--plan", plan, "--name", "hostile", "--ssh-cidr", CIDR, "--no-check"]
    if "--name" in extra:
        argv[4] = extra[1]
        extra = []
    refused(capsys, *argv, *extra, words=words)


@pytest.mark.parametrize(
    ("instance_type", "extra", "words"),
    [
        # What the box modules' own validation would refuse only in Terraform (after the
        # record, the key and `terraform init`): aws_gpu's subnet_id, aliyun_gpu's tags.
        (AWS, ["--subnet-id", "bogus"], ("--subnet-id", "subnet-")),
        (AWS, ["--subnet-id", "subnet-0123\n"], ("--subnet-id",)),
        (ALIYUN, ["--tag", "team=" + "v" * 129], ("--tag", "128")),
        (ALIYUN, ["--tag", "k" * 129 + "=v"], ("--tag", "128")),
        (ALIYUN, ["--tag", "see-http://x=v"], ("--tag", "http://")),
        (ALIYUN, ["--tag", "https://x=v"], ("--tag", "https://")),
    ],
)
def test_values_a_cloud_s_module_refuses_are_refused_first(
    capsys, home, tmp_path, instance_type, extra, words
) -> None:
    plan = plan_file(tmp_path, candidate(instance_type))
    refused(capsys, *up_args(plan, *extra), words=words)


def test_values_within_the_modules_rules_pass(capsys, home, tmp_path) -> None:
    """A real subnet id and a 128-character Aliyun tag value reach the launch (the tripwire)."""
    for instance_type, extra in (
        (AWS, ["--subnet-id", "subnet-0123456789abcdef0", "--tag", "team=" + "v" * 256]),
        (ALIYUN, ["--tag", "team=" + "v" * 128]),
    ):
        plan = plan_file(tmp_path, candidate(instance_type))
        with pytest.raises(Tripwire):
            run_cli(capsys, *up_args(plan, *extra))


@pytest.mark.parametrize(
    ("instance_type", "owner", "words"),
    [
        # The orch:owner tag's value: AWS takes at most 256 characters (EC2 API_Tag), Aliyun
        # 128; past them only the cloud (AWS) or the module's validation (Aliyun) refused it,
        # after the box record, its key and `terraform init`.
        (AWS, "o" * 257, ("ORCH_OWNER", "257", "256")),
        (ALIYUN, "o" * 129, ("ORCH_OWNER", "129", "128")),
        (AWS, "ci\x1b]0;x\x07job", ("ORCH_OWNER", "printable")),
        (AWS, "ci\njob", ("ORCH_OWNER", "printable")),
    ],
)
def test_an_owner_the_clouds_would_refuse_is_refused_first(
    capsys, home, tmp_path, monkeypatch, instance_type, owner, words
) -> None:
    monkeypatch.setenv("ORCH_OWNER", owner)
    plan = plan_file(tmp_path, candidate(instance_type))
    line = refused(capsys, *up_args(plan), words=words)
    assert "\x1b" not in line and "\x07" not in line


def test_owners_within_the_clouds_limits_pass(capsys, home, tmp_path, monkeypatch) -> None:
    for instance_type, owner in ((AWS, "o" * 256), (ALIYUN, "ci-job@runner " + "o" * 114)):
        monkeypatch.setenv("ORCH_OWNER", owner)
        plan = plan_file(tmp_path, candidate(instance_type))
        with pytest.raises(Tripwire):
            run_cli(capsys, *up_args(plan))


@pytest.mark.parametrize(
    "cidrs",
    [["10.0.0.0/8"], ["0.0.0.0/1", "128.0.0.0/1"], ["0.0.0.0/0"]],
)
def test_wide_ssh_blocks_pass_with_allow_world_ssh(cidrs) -> None:
    assert inputs.normalise_cidrs(cidrs, allow_world_ssh=True) == cidrs
    if cidrs == ["10.0.0.0/8"]:  # a /8's worth is the limit, not over it
        assert inputs.normalise_cidrs(cidrs, allow_world_ssh=False) == cidrs


def test_ttl_none_is_the_explicit_no_expiry(capsys, home, tmp_path, monkeypatch) -> None:
    seen: dict[str, Any] = {}

    def fake_up(options: UpRequest, *_args: Any) -> None:
        seen["expires_at"] = inputs.expires_at_for(options.ttl)
        raise Tripwire("stop here")

    monkeypatch.setattr(launch, "up", fake_up)
    plan = plan_file(tmp_path, candidate(AWS))
    for spelling in ("none", "NONE"):
        with pytest.raises(Tripwire):
            run_cli(capsys, *up_args(plan, "--ttl", spelling))
        assert seen["expires_at"] is None
    assert inputs.expires_at_for("2h") is not None


def test_a_lock_timeout_that_is_no_number_is_one_line(capsys, home, monkeypatch) -> None:
    monkeypatch.setenv("ORCH_LOCK_TIMEOUT", "abc")  # was ValueError
    code, _, err = run_cli(capsys, "down", "exp1")
    assert code == 2 and err.strip().splitlines() == [
        "orch: error: ORCH_LOCK_TIMEOUT='abc' is not a number of seconds (0 to 86400)"
    ]


# ------------------------------------------------------------------------------ ssh command


def make_box(name: str, user: str, host: str = "198.51.100.7") -> Box:
    directory = box_directory(name)
    directory.mkdir(parents=True, mode=0o700)
    return Box(
        name=name,
        directory=directory,
        cloud="aws",
        region="us-east-1",
        candidate=candidate(AWS),
        state="up",
        created_at="2026-12-02T19:00:00Z",
        expires_at=None,
        outputs={"instance_id": "i-0abc", "public_ip": host, "ssh_user": user},
        owner="me@host",
        state_url=None,
    )


def test_the_ssh_command_names_the_user_with_l_and_ends_options(home) -> None:
    command = display.box_summary(make_box("exp1", "ec2-user"))["ssh_command"]
    assert command.split()[-4:] == ["-l", "ec2-user", "--", "198.51.100.7"]


@pytest.mark.parametrize(
    ("user", "host"),
    [("-oProxyCommand=touch /tmp/pwned", "198.51.100.7"), ("ubuntu", "-oProxyCommand=x")],
)
def test_a_tampered_record_prints_no_ssh_command(home, user, host) -> None:
    summary = display.box_summary(make_box("exp2", user, host))
    assert summary["ssh_command"] is None
