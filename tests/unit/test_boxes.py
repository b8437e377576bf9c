"""Box registry, locks, keys and the input checks of `orch up` (no cloud, no Terraform)."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import stat
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import OrchError, UsageError
from orchestrator.provision import display, failover, inputs, state_backend, teardown
from orchestrator.provision.boxes import (
    Box,
    box_lock,
    list_boxes,
    load_box,
    orch_home,
    validate_box_name,
)
from orchestrator.provision.keys import ensure_keypair
from orchestrator.provision.terraform import TerraformError
from tests.support import candidate, require


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def make_box(name: str, **changes: object) -> Box:
    values: dict[str, object] = dict(
        name=name,
        directory=orch_home() / "boxes" / name,
        cloud="aws",
        region="us-east-1",
        candidate=candidate(),
        state="up",
        created_at="2026-12-02T19:00:00Z",
        expires_at="2026-12-02T21:00:00Z",
        outputs={"instance_id": "i-0abc", "public_ip": "198.51.100.7", "ssh_user": "ubuntu"},
        owner="me@host",
        state_url=None,
    )
    values.update(changes)
    return Box(**values)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ home + names


def test_orch_home_order(tmp_path, monkeypatch):
    monkeypatch.delenv("ORCH_HOME", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert orch_home() == tmp_path / ".local" / "state" / "orch"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert orch_home() == tmp_path / "xdg" / "orch"
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "explicit"))
    assert orch_home() == tmp_path / "explicit"


@pytest.mark.parametrize("name", ["a", "exp1", "bert-large-run-2", "a" + "b" * 38])
def test_good_box_names(name):
    assert validate_box_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "1abc",
        "-abc",
        "Abc",
        "a_b",
        "a.b",
        "a b",
        "a" * 40,
        "${var.x}",
        "%{if true}x%{endif}",
        'a"b',
        "a\\b",
        "a\nb",
        "../etc",
    ],
)
def test_bad_box_names_are_usage_errors(name):
    with pytest.raises(UsageError) as info:
        validate_box_name(name)
    assert "bad box name" in info.value.one_line()
    assert "\n" not in info.value.one_line()


# ------------------------------------------------------------------------------ registry


def test_box_round_trips_through_box_json(home):
    box = make_box("exp1", attempts=[{"instance_type": "p4d.24xlarge", "error": "X"}])
    box.save()
    assert stat.S_IMODE(box.directory.stat().st_mode) == 0o700
    loaded = load_box("exp1")
    assert loaded == box
    assert loaded.key_path == box.directory / "id_ed25519"
    assert loaded.known_hosts_path == box.directory / "known_hosts"
    record = json.loads((box.directory / "box.json").read_text())
    assert record["candidate"]["instance_type"] == "g5.xlarge"
    assert "directory" not in record  # derived from where the record lies


def test_unknown_box_is_a_usage_error(home):
    with pytest.raises(UsageError, match="no box named 'ghost'"):
        load_box("ghost")


def test_save_refuses_unknown_state(home):
    with pytest.raises(ValueError):
        make_box("exp1", state="sleeping").save()


def test_list_boxes_sorted_and_skips_damaged(home):
    make_box("zeta").save()
    make_box("alpha", state="failed").save()
    damaged = home / "boxes" / "broken"
    damaged.mkdir(parents=True)
    (damaged / "box.json").write_text("{not json")
    (home / "boxes" / "no-record").mkdir()
    assert [b.name for b in list_boxes()] == ["alpha", "zeta"]


def test_list_boxes_without_home(home):
    assert list_boxes() == []


# ------------------------------------------------------------------------------ locks


def test_lock_times_out_with_a_clear_message(home, capsys):
    with box_lock("exp1"):
        started = time.monotonic()
        with pytest.raises(OrchError) as info, box_lock("exp1", timeout=0.5):
            pass
        assert time.monotonic() - started >= 0.5
    assert "box exp1 is busy" in info.value.one_line()
    assert "waiting up to 0.5s" in capsys.readouterr().err


def test_lock_wait_names_the_holder_and_what_it_runs(home, capsys):
    box = make_box("exp2", state="creating")
    box.runner = {"pid": os.getpid(), "command": "up", "terraform_pid": 4242,
                  "terraform": "apply"}  # fmt: skip
    box.save()
    with box_lock("exp2"), pytest.raises(OrchError), box_lock("exp2", timeout=0.3):
        pass
    assert f"(pid {os.getpid()}: orch up, terraform apply pid 4242)" in capsys.readouterr().err


def test_lock_serialises_commands_on_one_box(home):
    order: list[str] = []
    holding = threading.Event()

    def first() -> None:
        with box_lock("exp1"):
            holding.set()
            order.append("first in")
            time.sleep(0.4)
            order.append("first out")

    thread = threading.Thread(target=first)
    thread.start()
    assert holding.wait(120)  # the thread holds the lock: only then does this one ask for it
    with box_lock("exp1", timeout=120):
        order.append("second in")
    thread.join()
    assert order == ["first in", "first out", "second in"]


def test_locks_on_different_boxes_do_not_block(home):
    with box_lock("one"), box_lock("two", timeout=0.1):
        pass


# ------------------------------------------------------------------------------ keys


def test_keypair_is_ed25519_private_0600_and_reused(tmp_path):
    private = tmp_path / "id_ed25519"
    public = ensure_keypair(private, comment="orch-exp1")
    assert public.startswith("ssh-ed25519 ") and public.endswith(" orch-exp1")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert "OPENSSH PRIVATE KEY" in private.read_text()
    assert ensure_keypair(private, comment="orch-exp1") == public


def _without_cryptography(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.provision import keys

    def missing(comment: str, key_type: str) -> tuple[str, str]:
        raise ImportError("No module named 'cryptography'")

    monkeypatch.setattr(keys, "_generate_with_cryptography", missing)


def test_keypair_falls_back_to_ssh_keygen(tmp_path, monkeypatch):
    require(shutil.which("ssh-keygen"), "ssh-keygen on PATH")
    _without_cryptography(monkeypatch)
    private = tmp_path / "id_ed25519"
    public = ensure_keypair(private, comment="orch-exp1")
    assert public.startswith("ssh-ed25519 ") and public.endswith(" orch-exp1")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert "OPENSSH PRIVATE KEY" in private.read_text()


def test_a_failing_ssh_keygen_is_one_error(tmp_path, monkeypatch):
    _without_cryptography(monkeypatch)
    fake = tmp_path / "bin" / "ssh-keygen"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'no entropy' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    with pytest.raises(OrchError, match="ssh-keygen could not create a key: no entropy"):
        ensure_keypair(tmp_path / "id_ed25519", comment="orch-exp1")
    assert not (tmp_path / "id_ed25519").exists()


# ------------------------------------------------------------------------------ up inputs


@pytest.mark.parametrize(
    ("text", "delta"),
    [
        ("30m", timedelta(minutes=30)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("1.5h", timedelta(minutes=90)),  # the one duration format (orchestrator/durations.py)
        ("90s", timedelta(seconds=90)),
    ],
)
def test_ttl(text, delta):
    now = datetime(2026, 12, 2, 19, 0, tzinfo=UTC)
    assert inputs.parse_ttl(text) == delta
    expected = (now + delta).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert inputs.expires_at_for(text, now) == expected


@pytest.mark.parametrize("text", ["", "2", "2x", "0h", "-1h", "30s", "31d", "2 hours", "1e3h"])
def test_bad_ttl(text):
    with pytest.raises(UsageError, match="--ttl"):
        inputs.parse_ttl(text)


def test_cidrs_are_normalised_and_deduplicated():
    cidrs = ["203.0.113.7/32", "203.0.113.7", "198.51.100.9/24"]
    assert inputs.normalise_cidrs(cidrs, False) == ["203.0.113.7/32", "198.51.100.0/24"]


@pytest.mark.parametrize("bad", ["0.0.0.0/0", "10.0.0.1/0"])
def test_world_ssh_needs_opt_in(bad):
    with pytest.raises(UsageError) as info:
        inputs.normalise_cidrs([bad], False)
    assert "--allow-world-ssh" in info.value.one_line()
    assert inputs.normalise_cidrs([bad], True) == ["0.0.0.0/0"]


@pytest.mark.parametrize("bad", ["10.0.0.0/33", "example.com", "2001:db8::/64", ""])
def test_bad_cidrs(bad):
    with pytest.raises(UsageError, match="--ssh-cidr"):
        inputs.normalise_cidrs([bad], False)


class _CheckIp(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"198.51.100.4\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_caller_address_from_checkip(monkeypatch):
    server = http.server.HTTPServer(("127.0.0.1", 0), _CheckIp)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setattr(inputs, "CHECKIP_URL", f"http://127.0.0.1:{server.server_port}/")
        assert inputs.discover_caller_cidr() == "198.51.100.4/32"
    finally:
        server.shutdown()
        server.server_close()


def test_offline_caller_address_asks_for_ssh_cidr(monkeypatch):
    from tests.ports import refused_port

    with refused_port() as port, pytest.raises(UsageError) as info:
        monkeypatch.setattr(inputs, "CHECKIP_URL", f"http://127.0.0.1:{port}/")
        inputs.discover_caller_cidr(timeout=2)
    assert "--ssh-cidr" in info.value.one_line()
    assert "0.0.0.0" not in info.value.one_line()


@pytest.mark.parametrize(
    "text",
    [
        "api error InsufficientInstanceCapacity: We currently do not have sufficient capacity",
        "operation error EC2: RunInstances, api error VcpuLimitExceeded: You have requested",
        "api error InstanceLimitExceeded: Your quota allows for 0 more running instance(s)",
        "api error MaxSpotInstanceCountExceeded: Max spot instance count exceeded",
        "api error SpotMaxPriceTooLow: Your Spot request price of 0.1 is lower than",
        "api error Unsupported: The requested configuration is currently not supported",
        "Code: OperationDenied.NoStock, Message: The resource is out of stock",
        "SDKError:\n   StatusCode: 403\n   Code: OperationDenied.NoStock\n   Message: out of stock",
        "Error Code: InsufficientInstanceCapacity; Request ID: 1",
    ],
)
def test_capacity_errors_are_recognised(text):
    assert failover.is_capacity_error(TerraformError("terraform apply failed", [{"detail": text}]))


@pytest.mark.parametrize(
    "text",
    [
        "api error InvalidAMIID.NotFound: The image id does not exist",
        "api error UnsupportedTenancy: tenancy not supported",
        "api error UnauthorizedOperation: You are not authorized",
        "InvalidParameterValue: Value (g9.huge) for parameter instanceType is invalid",
        # Terraform's own diagnostics: configuration or version problems, not capacity.
        "Error: Unsupported argument",
        "Error: Unsupported Terraform Core version",
    ],
)
def test_other_errors_do_not_fail_over(text):
    assert not failover.is_capacity_error(TerraformError("failed", [{"detail": text}]))


def test_box_summary_has_the_ssh_command(home):
    box = make_box("exp1")
    summary = display.box_summary(box)
    assert summary["instance_type"] == "g5.xlarge"
    command = summary["ssh_command"]
    assert command.startswith("ssh -i ") and command.endswith(" -l ubuntu -- 198.51.100.7")
    assert f"UserKnownHostsFile={box.directory}/known_hosts" in command


# ------------------------------------------------------------------------------ state URLs


def test_state_url_layout():
    location = state_backend.parse_state_url("s3://my-bucket/ci/runs/")
    assert (location.bucket, location.prefix, location.url) == (
        "my-bucket",
        "ci/runs",
        "s3://my-bucket/ci/runs",
    )
    assert location.state_key("exp1") == "ci/runs/exp1/terraform.tfstate"
    assert location.bundle_key("exp1") == "ci/runs/exp1/orch-box.json"
    bare = state_backend.parse_state_url("s3://my-bucket")
    assert bare.state_key("exp1") == "exp1/terraform.tfstate"


@pytest.mark.parametrize(
    "url", ["gs://b/p", "my-bucket/p", "s3://", "s3://B/p", "s3://b/p?x=1", "s3://bucket/a b"]
)
def test_bad_state_urls(url):
    with pytest.raises(UsageError, match="--state"):
        state_backend.parse_state_url(url)


def test_backend_config_follows_the_endpoint_knob(monkeypatch):
    location = state_backend.parse_state_url("s3://my-bucket/ci")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    config = state_backend.backend_config(location, "exp1", "eu-west-1")
    assert config == {
        "bucket": "my-bucket",
        "key": "ci/exp1/terraform.tfstate",
        "region": "eu-west-1",
    }
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:5000")
    config = state_backend.backend_config(location, "exp1", "eu-west-1")
    assert config["use_path_style"] is True and config["skip_credentials_validation"] is True


def test_restored_box_runs_only_local_code(home, monkeypatch):
    """A remote bundle supplies values, never HCL: a tampered bucket cannot run code here."""
    from orchestrator.provision.render import render_hcl

    record = Box(
        name="remote1",
        directory=home / "x",
        cloud="aws",
        region="us-east-1",
        candidate=candidate(),
        state="up",
        created_at="2026-12-02T00:00:00Z",
        expires_at=None,
        outputs={},
        owner="ci",
        state_url="s3://bucket/ci",
    )
    evil = 'resource "terraform_data" "x" { provisioner "local-exec" { command = "touch /tmp/p" } }'
    bundle = {
        "box": record.to_dict(),
        "files": {
            "main.tf": evil,
            "../../escape.tf": evil,
            "modules/aws_gpu/main.tf": evil,
            "terraform.tfvars.json": json.dumps({"name": "remote1", "region": "us-east-1"}),
        },
    }
    monkeypatch.setattr(state_backend, "bucket_region", lambda location: "us-east-1")
    monkeypatch.setattr(state_backend, "download_bundle", lambda location, name, region: bundle)
    monkeypatch.setattr(state_backend, "state_facts", lambda location, name, region: (set(), set()))
    box = teardown.restore_box(state_backend.parse_state_url("s3://bucket/ci"), "remote1")
    written = [
        p for p in box.directory.parent.parent.rglob("*.tf") if "local-exec" in p.read_text()
    ]
    assert written == []
    assert (box.directory / "main.tf").read_text() == render_hcl("aws", "s3")["main.tf"]
    assert json.loads((box.directory / "terraform.tfvars.json").read_text())["name"] == "remote1"

    bundle["files"] = {"main.tf": evil}
    shutil.rmtree(box.directory)
    with pytest.raises(OrchError, match="no usable terraform.tfvars.json"):
        teardown.restore_box(state_backend.parse_state_url("s3://bucket/ci"), "remote1")


def test_tags_option():
    from orchestrator.commands.boxes import parse_tags

    assert parse_tags(("team=ml", "note=a=b", "empty=")) == {
        "team": "ml",
        "note": "a=b",
        "empty": "",
    }
    for bad in ("novalue", "=x", "orch:box=x", "aws:foo=y"):
        with pytest.raises(UsageError):
            parse_tags((bad,))


def test_bundle_must_describe_the_box_named_on_the_command_line():
    from orchestrator.errors import UsageError

    record = make_box("victim").to_dict()
    values = {"name": "victim", "region": "us-east-1", "default_tags": {"orch:box": "victim"}}
    good = {"box": record, "files": {"terraform.tfvars.json": json.dumps(values)}}
    state_backend.verify_bundle(good, "victim", "s3://b/p")

    def bad(box_name: str, edit_record: dict, edit_values: dict, why: str) -> None:
        bundle = {
            "box": {**record, **edit_record},
            "files": {"terraform.tfvars.json": json.dumps({**values, **edit_values})},
        }
        with pytest.raises(UsageError, match=why) as info:
            state_backend.verify_bundle(bundle, box_name, "s3://b/p")
        assert info.value.exit_code == 2 and "nothing was destroyed" in info.value.message

    bad("decoy", {}, {}, "names another box")  # the victim's bundle under decoy's key
    bad("victim", {"name": "../../.."}, {}, "names another box")
    bad("victim", {}, {"default_tags": {"orch:box": "other"}}, "names another box")
    bad("victim", {"cloud": "nowhere"}, {}, "cloud")
    bad("victim", {"cloud": "aliyun"}, {}, "cloud")  # the plan row still says aws
    bad("victim", {"region": "us-west-2"}, {}, "regions")
    bad("victim", {}, {"region": "us-east-1\n"}, "regions")


def test_keypair_of_the_type_the_cloud_takes(tmp_path: Path) -> None:
    """Aliyun's ImportKeyPair takes no ed25519: its boxes get RSA 3072; a box dir holding a key
    of the other type (an earlier attempt on another cloud) gets a new pair."""
    from cryptography.hazmat.primitives.serialization import load_ssh_public_key

    from orchestrator import clouds

    assert clouds.ssh_key_type_of(clouds.get("aliyun")) == "rsa"
    assert clouds.ssh_key_type_of(clouds.get("aws")) == "ed25519"
    private = tmp_path / "id_ed25519"
    ed = ensure_keypair(private, comment="orch-k1")
    rsa = ensure_keypair(private, comment="orch-k1", key_type="rsa")
    assert ed.startswith("ssh-ed25519 ") and rsa.startswith("ssh-rsa ")
    assert load_ssh_public_key(rsa.encode()).key_size == 3072
    assert ensure_keypair(private, comment="orch-k1", key_type="rsa") == rsa  # kept
    assert "RSA" in private.read_text() or "OPENSSH" in private.read_text()
    assert private.stat().st_mode & 0o777 == 0o600


def test_ssh_keygen_fallback_makes_rsa_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    from tests.support import require

    require(shutil.which("ssh-keygen"), "ssh-keygen (OpenSSH)")
    _without_cryptography(monkeypatch)
    public = ensure_keypair(tmp_path / "k", comment="orch-k2", key_type="rsa")
    assert public.startswith("ssh-rsa ") and public.endswith(" orch-k2")


def test_a_private_key_written_over_a_readable_file_is_0600_before_its_first_byte(
    tmp_path, monkeypatch
):
    """A key file left readable by others (0644) is made 0600 before the key is written into
    it, not after: it is never readable by others, even briefly."""
    from orchestrator.provision import keys

    path = tmp_path / "id_ed25519"
    path.write_text("an older key\n")
    path.chmod(0o644)
    modes: list[int] = []
    real_fdopen = os.fdopen

    def fdopen(fd: int, *args: object, **kwargs: object) -> object:
        modes.append(stat.S_IMODE(os.fstat(fd).st_mode))  # when the text is about to go in
        return real_fdopen(fd, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(keys.os, "fdopen", fdopen)
    keys.write_private_key(path, "-----BEGIN OPENSSH PRIVATE KEY-----\n")
    assert modes == [0o600] and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_ssh_alias_keeps_a_symlinked_ssh_config_a_symlink(tmp_path, monkeypatch):
    """A ~/.ssh/config that is a link into a dotfiles checkout (stow, home-manager) gets the
    Include line in the file it points to; the link itself stays."""
    from orchestrator.provision import ssh_alias

    dotfiles = tmp_path / "dotfiles" / "ssh_config"
    dotfiles.parent.mkdir()
    dotfiles.write_text("Host work\n  User me\n")
    dotfiles.chmod(0o600)
    link = tmp_path / "dot-ssh" / "config"
    link.parent.mkdir()
    link.symlink_to(dotfiles)
    monkeypatch.setenv("ORCH_USER_SSH_CONFIG", str(link))
    box = make_box("linked")
    box.directory.mkdir(parents=True)
    ssh_alias.write_alias(box, "198.51.100.7", "ubuntu")
    assert link.is_symlink() and link.resolve() == dotfiles
    lines = dotfiles.read_text().splitlines()
    assert lines[1] == f"Include {ssh_alias.alias_dir()}/*.conf" and "Host work" in lines
    assert stat.S_IMODE(dotfiles.stat().st_mode) == 0o600
    assert sorted(p.name for p in link.parent.iterdir()) == ["config"]  # no temp file left


@pytest.mark.parametrize(
    "state",
    [
        {"resources": [1]},
        {"resources": {"aws_instance": {}}},
        {"resources": [{"provider": "x", "instances": ["i-0abc"]}]},
        {"resources": [{"provider": "x", "instances": [{"attributes": ["zone"]}]}]},
        [],
    ],
)
def test_a_damaged_remote_state_is_one_line_not_a_traceback(monkeypatch, state):
    """`down --state` reads the box's Terraform state from the bucket (whoever can write the
    bucket wrote it): a shape Terraform never writes is an OrchError naming it."""

    class Body:
        def read(self) -> bytes:
            return json.dumps(state).encode()

    class Client:
        def get_object(self, **_kwargs: object) -> dict[str, object]:
            return {"Body": Body()}

    monkeypatch.setattr(state_backend, "s3_client", lambda region=None: Client())
    location = state_backend.parse_state_url("s3://bucket/ci")
    with pytest.raises(OrchError, match="state of box remote1 .* damaged"):
        state_backend.state_facts(location, "remote1", "us-east-1")


@pytest.mark.parametrize(
    ("edit_record", "edit_values"),
    [
        ({"name": ["victim"]}, {}),
        ({}, {"name": {"n": "victim"}}),
        ({}, {"default_tags": {"orch:box": ["victim"]}}),
        ({"region": ["us-east-1"]}, {}),
        ({}, {"region": {}}),
        ({"cloud": ["aws"]}, {}),
    ],
)
def test_a_bundle_with_unhashable_names_or_regions_is_refused_in_one_line(edit_record, edit_values):
    """Values that are lists or objects where the bundle holds texts: refused (exit 2), not a
    TypeError traceback from putting them in a set."""
    record = {**make_box("victim").to_dict(), **edit_record}
    values = {"name": "victim", "region": "us-east-1", "default_tags": {"orch:box": "victim"}}
    bundle = {
        "box": record,
        "files": {"terraform.tfvars.json": json.dumps({**values, **edit_values})},
    }
    with pytest.raises(UsageError, match="nothing was destroyed") as info:
        state_backend.verify_bundle(bundle, "victim", "s3://b/p")
    assert info.value.exit_code == 2


def test_a_permission_refused_after_the_probe_was_written_leaves_no_probe(monkeypatch):
    """--state's permission check writes a probe object under prefix/NAME/; a bucket that lets
    orch write and delete but not read it (s3:GetObject denied) is refused, and the probe is
    deleted again rather than left in the bucket for good (`down` deletes only the box's keys)."""
    from botocore.exceptions import ClientError

    stored: set[str] = set()

    class Client:
        def list_objects_v2(self, **_kwargs: object) -> dict[str, object]:
            return {}

        def put_object(self, *, Key: str, **_kwargs: object) -> None:  # noqa: N803
            stored.add(Key)

        def get_object(self, **_kwargs: object) -> None:
            raise ClientError({"Error": {"Code": "AccessDenied"}}, "GetObject")

        def delete_object(self, *, Key: str, **_kwargs: object) -> None:  # noqa: N803
            stored.discard(Key)

    monkeypatch.setattr(state_backend, "s3_client", lambda region=None: Client())
    location = state_backend.parse_state_url("s3://bucket/ci")
    with pytest.raises(UsageError, match="s3:GetObject is denied"):
        state_backend.check_permissions(location, "remote1", "us-east-1")
    assert stored == set()


# ------------------------------------------------------------------------------ bundle shape


def bundle_of(record: dict[str, Any]) -> dict[str, Any]:
    values = {"name": "victim", "region": "us-east-1", "default_tags": {"orch:box": "victim"}}
    return {"box": record, "files": {"terraform.tfvars.json": json.dumps(values)}}


def down_from_bundle(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bundle: dict[str, Any]
) -> tuple[int, str, list[str]]:
    """`orch down victim --state s3://bucket/ci` with the bucket holding `bundle`; what would
    read the bucket's state, run Terraform, ask the cloud or delete objects is recorded."""
    from tests.support import run_cli

    called: list[str] = []
    monkeypatch.setattr(state_backend, "bucket_region", lambda location: "us-east-1")
    monkeypatch.setattr(state_backend, "download_bundle", lambda location, name, region: bundle)
    monkeypatch.setattr(
        state_backend, "state_facts", lambda *a: called.append("state") or (set(), set())
    )
    monkeypatch.setattr(state_backend, "delete_box_objects", lambda *a: called.append("delete"))
    monkeypatch.setattr(teardown, "destroy", lambda *a: called.append("destroy"))
    monkeypatch.setattr(teardown, "_end_on_cloud_truth", lambda *a: called.append("cloud"))
    code, _, err = run_cli(capsys, "down", "victim", "--state", "s3://bucket/ci")
    return code, err, called


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("instance_type", "g5.xlarge\x1b]0;owned\x07\x1b[2J"),  # a terminal escape
        ("price_per_hour", "1.006"),  # a string where a number belongs
        ("gpu_count", "8"),
        ("gpu", ["A10G"]),  # a list where a string belongs
        ("instance_type", ["g5.xlarge"]),
    ],
)
def test_a_hostile_bundle_record_is_refused_in_one_line_with_nothing_destroyed(
    home, monkeypatch, capsys, field, value
):
    """Whoever can write the bucket writes the bundle: every field `down` (and later
    `status`) reads is checked before the bucket's state, Terraform or the cloud is used."""
    record = make_box("victim").to_dict()
    record["candidate"][field] = value
    code, err, called = down_from_bundle(monkeypatch, capsys, bundle_of(record))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert f"candidate: {field} " in lines[0] and "nothing was destroyed" in lines[0]
    assert "\x1b" not in err and "\x07" not in err
    assert called == []
    assert not (home / "boxes" / "victim").exists()


def test_a_bundle_of_a_type_no_longer_in_the_catalog_is_still_destroyed(home, monkeypatch, capsys):
    """The catalog changes; a box made with a type it no longer lists must still go."""
    from orchestrator.plan_validate import validate_candidate

    retired = candidate("g3.4xlarge", gpu="M60", gpu_count=1, gpu_memory_gib=8.0)
    with pytest.raises(UsageError, match="not in the catalog"):
        validate_candidate(retired)  # a plan may not name it
    record = make_box("victim", candidate=retired).to_dict()
    code, err, called = down_from_bundle(monkeypatch, capsys, bundle_of(record))
    assert code == 0, err
    assert "destroying box victim (g3.4xlarge in us-east-1)" in err
    assert called == ["state", "destroy", "cloud", "delete"]


def test_terraform_s_destroy_error_is_said_escaped_line_by_line(home, monkeypatch):
    """`down`'s "Terraform could not destroy" line quotes Terraform's diagnostic, the cloud's
    words: escaped line by line on the terminal, kept as sent in the box record."""
    box = make_box("esc1")
    box.directory.mkdir(parents=True)
    (box.directory / "main.tf").write_text("")
    box.save()
    message = "terraform destroy failed: tag \x1b]0;pwned\x07: detail\nsecond \x1b[2J"

    def destroy(*args: object) -> None:
        raise TerraformError(message)

    monkeypatch.setattr(teardown, "destroy", destroy)
    monkeypatch.setattr(teardown, "_end_on_cloud_truth", lambda box, why: None)
    monkeypatch.setattr(teardown.ssh_alias, "remove_alias", lambda name: None)
    said: list[str] = []
    teardown.down("esc1", None, said.append)
    line = next(text for text in said if text.startswith("Terraform could not destroy"))
    assert "\x1b" not in line and "\x07" not in line
    assert "tag \\x1b]0;pwned\\x07: detail\nsecond \\x1b[2J); deleting by tag" in line


# ------------------------------------------------------------------------------ nested JSON

# Nested deeper than the interpreter's recursion limit: json.loads raises RecursionError, which
# is not a ValueError, for it.
DEEP = "[" * 100_000 + "]" * 100_000


def test_a_bundle_whose_tfvars_nest_too_deep_is_refused_in_one_line(home, monkeypatch, capsys):
    record = make_box("victim").to_dict()
    bundle = {"box": record, "files": {"terraform.tfvars.json": DEEP}}
    code, err, called = down_from_bundle(monkeypatch, capsys, bundle)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("orch: error: "), err
    assert "terraform.tfvars.json" in lines[0] and "nothing was destroyed" in lines[0]
    assert called == []
    # restore_box's own read of the values, past verify_bundle: one line too.
    monkeypatch.setattr(state_backend, "verify_bundle", lambda *a: None)
    monkeypatch.setattr(state_backend, "bucket_region", lambda location: "us-east-1")
    monkeypatch.setattr(state_backend, "download_bundle", lambda *a: bundle)
    monkeypatch.setattr(state_backend, "state_facts", lambda *a: (set(), set()))
    with pytest.raises(OrchError, match="no usable terraform.tfvars.json"):
        teardown.restore_box(state_backend.parse_state_url("s3://bucket/ci"), "victim")


@pytest.mark.parametrize(
    ("read", "outcome"),
    [
        (state_backend.download_bundle, "box remote1 in s3://bucket/ci is damaged"),
        (state_backend.state_facts, "the state of box remote1 in s3://bucket/ci is not JSON"),
        (state_backend.read_claim, {}),  # unreadable: as for any claim that is not JSON
        (state_backend.lock_info, {}),
    ],
)
def test_bucket_objects_nested_too_deep_are_read_as_damaged(monkeypatch, read, outcome):
    """Whoever can write the bucket writes these objects: nesting past the recursion limit
    is damage (one line, or the reader's 'unreadable' answer), never a traceback."""

    class Client:
        def get_object(self, **_kwargs: object) -> dict[str, object]:
            return {"Body": type("Body", (), {"read": lambda self: DEEP.encode()})()}

    monkeypatch.setattr(state_backend, "s3_client", lambda region=None: Client())
    location = state_backend.parse_state_url("s3://bucket/ci")
    if isinstance(outcome, str):
        with pytest.raises(OrchError, match=outcome):
            read(location, "remote1", "us-east-1")
    else:
        assert read(location, "remote1", "us-east-1") == outcome


def test_a_box_record_nested_too_deep_is_a_damaged_record(home):
    from orchestrator.provision.boxes import load_box, read_boxes

    box = make_box("deep1")
    box.directory.mkdir(parents=True)
    (box.directory / "box.json").write_text(DEEP)
    with pytest.raises(OrchError, match="cannot read box record"):
        load_box("deep1")
    assert read_boxes()[0] == [] and "cannot read box record" in read_boxes()[1]["deep1"]


def test_a_pool_box_s_tfvars_nested_too_deep_hold_no_tags(home):
    from orchestrator.pool import ownership

    box = make_box("deep2")
    box.directory.mkdir(parents=True)
    (box.directory / "terraform.tfvars.json").write_text(DEEP)
    assert ownership._rendered_tags(box) == {}


def test_a_state_lock_held_elsewhere_is_said_escaped(home, monkeypatch):
    """Terraform's lock object lies in the bucket (whoever can write it wrote it): who holds
    the lock is said escaped."""
    from orchestrator.provision import steps

    lock = {"Who": "me\x1b]0;x\x07@h", "Operation": "apply", "Created": "now\x1b[2J", "ID": "1"}
    monkeypatch.setattr(state_backend, "bucket_region", lambda location: "us-east-1")
    monkeypatch.setattr(state_backend, "lock_info", lambda *a: lock)
    said: list[str] = []
    location = state_backend.parse_state_url("s3://bucket/ci")
    steps.tell_state_lock(make_box("lock1"), None, location, said.append)
    assert len(said) == 1 and "\x1b" not in said[0] and "\x07" not in said[0]
    assert "held by me\\x1b]0;x\\x07@h (apply since now\\x1b[2J, lock ID 1)" in said[0]
