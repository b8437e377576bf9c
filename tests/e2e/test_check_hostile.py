"""`orch check` / `orch watch` against a hostile or broken box (issue 9, items 12-15).

The box is the real sshd on loopback of tests/e2e/sshbox.py; its fake nvidia-smi prints crafted
answers: bytes that are not UTF-8, CSV that the csv module refuses, 50 MB of junk, inf/1e400,
escape sequences, repeated GPUs, an old driver, a hang. Each must end in a clear verdict with the
right exit code, one `orch: error:` line at most, and with --json a JSON document on stdout.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace

import pytest

from orchestrator.check import untrusted
from tests.e2e import sshbox
from tests.e2e.test_check_ssh import ANSWERED, make_candidate, orch, save_box
from tests.ports import refused_port
from tests.support import require

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require(sshbox.prerequisites() is None, sshbox.prerequisites() or "")
    box = sshbox.make_sshbox(tmp_path_factory.mktemp("hostile"))
    yield box
    box.stop()


@pytest.fixture
def orch_home(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "orch-home"))
    monkeypatch.delenv("ORCH_SSH_CONFIG", raising=False)


HEADER = (
    "index,name,memory.total,driver_version,ecc.errors.uncorrected.volatile.total,pci.bus_id,uuid"
)
A10G_ROW = (
    "0,NVIDIA A10G,23028,515.105.01,0,00000000:00:1E.0,GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94"
)


def a10g(**fields: str) -> str:
    """The A10G capture (tests/fixtures/nvidia-smi/a10g.csv) with some fields replaced."""
    names = HEADER.split(",")
    values = dict(zip(names, A10G_ROW.split(","), strict=True))
    by_key = {n.replace(".", "_"): n for n in names}
    values.update({by_key[k]: v for k, v in fields.items()})
    return HEADER + "\n" + ",".join(values[n] for n in names) + "\n"


def check(server, name, candidate=None, *args, timeout=ANSWERED):
    save_box(server, name, candidate or make_candidate("A10G", 1, 24))
    return orch("check", name, *args, "--timeout", timeout, "--ssh-config", str(server.ssh_config))


def check_json(server, name, candidate=None, timeout=ANSWERED):
    result = check(server, name, candidate, "--json", timeout=timeout)
    assert "Traceback" not in result.stderr, result.stderr
    return result, json.loads(result.stdout)


def failed(report) -> dict[str, str]:
    return {c["name"]: c["message"] for c in report["checks"] if not c["ok"]}


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("orch: error: "), result.stderr
    return lines[0]


# ----------------------------------------------------------------- 12: no tracebacks


@pytest.mark.parametrize(
    ("label", "data", "expect"),
    [
        ("not utf-8", A10G_ROW.replace("NVIDIA", "NV\xff\xfeIDIA").encode("latin-1"), "gpu_model"),
        ("field over 128 KiB", b'0,"' + b"A" * 200_000 + b'",1,2,3,4,5\n', "driver"),
        ("unclosed quote", b'0,"NVIDIA A10G,23028,515.105.01,0,bus,uuid\n', "driver"),
        ("nul byte", b"0,NVIDIA\x00A10G,23028,515.105.01,0,bus,uuid\n", None),
        ("inf memory", a10g(memory_total="inf").split("\n", 1)[1].encode(), "driver"),
        (
            "1e400 ecc",
            a10g(**{"ecc_errors_uncorrected_volatile_total": "1e400"}).split("\n", 1)[1].encode(),
            "driver",
        ),
    ],
)
def test_broken_output_is_a_verdict_not_a_traceback(server, orch_home, label, data, expect):
    server.serve_raw(data)
    slug = "".join(c for c in label.lower() if c.isalnum())[:20]
    result, report = check_json(server, f"broken-{slug}")
    assert result.returncode == 3, result.stderr
    assert report["ok"] is False
    if expect:
        assert expect in failed(report)
    text = check(server, f"text-{slug}")
    assert text.returncode == 3 and "Traceback" not in text.stderr
    assert "MISMATCH" in text.stdout


def test_fifty_megabytes_of_junk_is_cut_at_one_mebibyte(server, orch_home):
    server.serve_raw(b"junk," * (10 * 1024 * 1024))  # 50 MiB, no newline
    result, report = check_json(server, "flood")
    assert result.returncode == 3
    assert "more than 1024 KiB" in failed(report)["driver"]
    assert len(result.stdout) < 10_000  # the report does not carry the flood


@pytest.mark.parametrize(
    "args",
    [
        ["check", "b", "--timeout", "nan"],
        ["check", "b", "--timeout", "inf"],
        ["check", "b", "--timeout", "1e308"],
        ["watch", "b", "--interval", "nan"],
        ["watch", "b", "--interval", "inf"],
        ["watch", "b", "--interval", "1e308"],
        ["watch", "b", "--window", "nan"],
        ["watch", "b", "--window", "inf"],
        ["watch", "b", "--low-util", "nan"],
    ],
)
def test_non_finite_option_values_are_refused(orch_home, args):
    result = orch(*args)
    assert result.returncode == 2
    assert one_error_line(result)
    with_json = orch(*args, "--json")
    assert with_json.returncode == 2
    error = json.loads(with_json.stdout)
    assert error["ok"] is False and error["exit_code"] == 2 and args[2] in error["error"]


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--json", "--no-such-option"],
        ["check", "b", "--json", "--via", "telnet"],
        ["watch", "b", "--json", "--count", "0"],
        ["check", "--json"],  # neither NAME nor --local: our own usage error
        ["check", "missing-box", "--json"],  # no such box
    ],
)
def test_every_error_under_json_prints_a_json_error(orch_home, args):
    result = orch(*args)
    assert result.returncode in (1, 2)
    error = json.loads(result.stdout)
    assert error["ok"] is False and error["exit_code"] == result.returncode
    assert error["error"]
    assert one_error_line(result)


# --------------------------------------------------------- 13: box text is escaped


ESCAPES = "\x1b[2J\x1b[H\x1b]0;owned\x07\x1b[1A\x1b[K"


def test_escape_sequences_from_the_box_never_reach_the_terminal(server, orch_home):
    server.serve_raw(
        a10g(name=f"NVIDIA A10G{ESCAPES}", driver_version=f"515{ESCAPES}")
        .split("\n", 1)[1]
        .encode()
    )
    result = check(server, "esc")
    assert result.returncode == 3
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\\x1b[2J" in result.stdout  # visible, not obeyed


def test_escape_sequences_in_nvidia_smi_failure_are_escaped(server, orch_home):
    server.fail(9, f"NVIDIA-SMI has failed{ESCAPES}[pass] gpu_model: forged")
    result = check(server, "escfail")
    assert result.returncode == 3
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "nvidia-smi failed (exit 9)" in result.stdout


def test_escape_sequences_in_the_error_line_are_escaped(server, orch_home):
    server.fail(9, f"broken{ESCAPES}")
    save_box(server, "escwatch", make_candidate("A10G", 1, 24))
    result = orch("watch", "escwatch", "--count", "1", "--ssh-config", str(server.ssh_config))
    assert result.returncode == 3
    line = one_error_line(result)
    assert "\x1b" not in line and "\x07" not in line and "\\x1b]0;owned\\x07" in line


def test_printable_escapes_controls_and_bidi_but_keeps_text():
    assert untrusted.printable("NVIDIA A10G") == "NVIDIA A10G"
    assert untrusted.printable("a\x1b[2Jb\rc\u202ed\x85") == "a\\x1b[2Jb\\x0dc\\u202ed\\x85"
    assert untrusted.printable("x" * 600).endswith("x...")


# ------------------------------------------------------------- 14: right verdicts


def test_nvidia_smi_exiting_255_is_a_box_answer_not_an_ssh_failure(server, orch_home):
    server.fail(255, "NVIDIA-SMI has failed because it couldn't communicate with the driver.")
    started = time.monotonic()
    result, report = check_json(server, "exit255", timeout="60")
    assert result.returncode == 3, result.stderr
    assert "exit 255" in failed(report)["driver"]
    assert report["attempts"] == 1
    assert time.monotonic() - started < 30


def test_too_old_driver_for_the_gpu_fails(server, orch_home):
    server.serve_text("old-driver", a10g(driver_version="390.157"))
    result, report = check_json(server, "olddriver")
    assert result.returncode == 3
    assert set(failed(report)) == {"driver"}
    assert "390.157 is too old" in failed(report)["driver"] and "455.23" in failed(report)["driver"]


def test_driver_too_old_for_the_images_cuda_fails(server, orch_home):
    server.serve("a10g")  # driver 515.105.01: fine for the A10G, too old for CUDA 12
    candidate = make_candidate("A10G", 1, 24)
    cuda12 = replace(candidate, image={"id": "ami-12345678", "cuda": "12.8"})
    result, report = check_json(server, "cuda12", cuda12)
    assert result.returncode == 3
    assert "CUDA 12.8 needs driver >= 525.60.13" in failed(report)["driver"]
    cuda11 = replace(candidate, image={"id": "ami-12345678", "cuda": "11.8"})
    result, report = check_json(server, "cuda11", cuda11)
    assert result.returncode == 0, report


def test_the_same_gpu_twice_does_not_pass_a_two_gpu_plan(server, orch_home):
    row = A10G_ROW.replace("NVIDIA A10G,23028", "NVIDIA A100-SXM4-40GB,40960")
    server.serve_text("twice", HEADER + "\n" + row + "\n" + row + "\n")
    result, report = check_json(server, "twice", make_candidate("A100-40GB", 2, 40))
    assert result.returncode == 3
    assert {"gpu_ids", "gpu_count"} <= set(failed(report))
    assert "index 0 listed more than once" in failed(report)["gpu_ids"]
    assert "1 GPU found, 2 expected" in failed(report)["gpu_count"]


def test_deprecated_field_counts_as_unknown(server, orch_home):
    deprecated = "[Requested functionality has been deprecated]"
    server.serve_text("deprecated", a10g(**{"ecc_errors_uncorrected_volatile_total": deprecated}))
    result, report = check_json(server, "deprecated")
    assert result.returncode == 0, report
    ecc = next(c for c in report["checks"] if c["name"] == "ecc")
    assert "without ECC reporting" in ecc["message"]


@pytest.mark.parametrize(
    ("host", "user"),
    [
        ("-oProxyCommand=touch /tmp/orch-pwned", None),
        ("box under test", None),
        ("box-under-test\n", None),
        (None, "-oProxyCommand=id"),
        (None, "root;id"),
    ],
)
def test_tampered_host_or_user_fails_at_once(server, orch_home, host, user):
    box = save_box(server, "tampered", make_candidate("T4", 1, 16), host=host)
    if user:
        box.outputs["ssh_user"] = user
        box.save()
    started = time.monotonic()
    result = orch("check", "tampered", "--timeout", "60", "--ssh-config", str(server.ssh_config))
    assert result.returncode == 2, result.stderr
    assert one_error_line(result)
    assert time.monotonic() - started < 15
    assert not os.path.exists("/tmp/orch-pwned")


def test_hung_nvidia_smi_is_stopped_on_the_box(server, orch_home):
    server.serve("a10g")
    server.hang(120)
    started = time.monotonic()
    result, report = check_json(server, "hung", timeout="8")
    elapsed = time.monotonic() - started
    assert result.returncode == 3, result.stderr
    assert "stopped on the box" in failed(report)["driver"]
    assert elapsed < 60  # bounded by --timeout, not by the 120 s hang
    pid = server.hung_pid()
    assert pid is not None
    deadline = time.monotonic() + 60  # a bound on a hang: the loop ends once it is gone
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{pid}"), "nvidia-smi was left running on the box"
    server.serve("a10g")


# -------------------------------------------------------------------------- 15: watch


def watch(server, name, *args):
    save_box(server, name, make_candidate("A10G", 1, 24))
    return orch("watch", name, *args, "--ssh-config", str(server.ssh_config))


def test_watch_skips_a_malformed_sample_and_goes_on(server, orch_home, tmp_path):
    sequence = tmp_path / "seq.csv"
    sequence.write_text(
        "frame,index,utilization.gpu,memory.used,memory.total\n"
        "0,0,50,1000,23028\n1,0,1e400,1000,23028\n2,0,inf,1000,23028\n3,0,60,1000,23028\n"
    )
    server.serve_sequence(sequence)
    result = watch(server, "skips", "--json", "--interval", "0.1", "--count", "4")
    assert result.returncode == 0, result.stderr
    samples = [json.loads(line) for line in result.stdout.splitlines()]
    assert [s["error_kind"] for s in samples] == [None, "skipped", "skipped", None]
    assert [s["gpus"][0]["utilization_pct"] for s in (samples[0], samples[3])] == [50, 60]
    server.serve_sequence(sequence)  # from frame 0 again
    text = watch(server, "skipstext", "--interval", "0.1", "--count", "2")
    assert text.returncode == 0 and "skipped: malformed sample skipped" in text.stdout


def test_watch_where_no_sample_answered_fails(tmp_path, orch_home):
    require(sshbox.prerequisites() is None, sshbox.prerequisites() or "")
    with refused_port() as port:  # nothing listens, nor can anything else meanwhile
        closed = sshbox.make_sshbox(tmp_path / "closed", start=False, port=port)
        result = watch(closed, "nobody", "--interval", "0.1", "--count", "2")
    assert result.returncode == 1
    assert "no sample of 2 gave a reading" in one_error_line(result)
    assert result.stdout.count("unreachable:") == 2


def test_hung_sample_is_bounded_by_the_interval(server, orch_home):
    server.serve("a10g")
    server.hang(120)
    started = time.monotonic()
    result = watch(server, "hungwatch", "--json", "--interval", "0.1", "--count", "1")
    elapsed = time.monotonic() - started
    server.serve("a10g")
    assert result.returncode == 1
    sample = json.loads(result.stdout.splitlines()[0])
    assert sample["error_kind"] == "skipped" and "stopped on the box" in sample["error"]
    assert elapsed < 30  # was 35 s whatever --interval said (MIN_SAMPLE_S is 5 s)


# ---------------------------------------------------------------- 15: ProxyJump hop


@pytest.fixture
def two_hops(tmp_path):
    """A bastion sshd and a box sshd; the ssh_config reaches the box only through the bastion.

    The bastion is the user's own host: its key sits in a known_hosts file the user's config
    names for it, and the hop logs in with the user's own key, not the box key.
    """
    require(sshbox.prerequisites() is None, sshbox.prerequisites() or "")
    bastion = sshbox.make_sshbox(tmp_path / "bastion")
    box = sshbox.make_sshbox(tmp_path / "box")
    known = tmp_path / "bastion_known_hosts"
    host_key = (bastion.root / "ssh_host_ed25519_key.pub").read_text().split()
    known.write_text(f"[127.0.0.1]:{bastion.port} {host_key[0]} {host_key[1]}\n")
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host bastion\n  HostName 127.0.0.1\n  Port {bastion.port}\n  User {bastion.user}\n"
        f"  IdentityFile {bastion.key_path}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {known}\n  GlobalKnownHostsFile /dev/null\n"
        f"Host {sshbox.HOST_ALIAS}\n  HostName 127.0.0.1\n  Port {box.port}\n"
        "  ProxyJump bastion\n"
    )
    box.ssh_config = config
    box.serve("t4")
    yield bastion, box, known
    box.stop()
    bastion.stop()


def test_check_through_a_bastion(two_hops, orch_home):
    bastion, box, _ = two_hops
    save_box(box, "jumped", make_candidate("T4", 1, 16))
    result = orch("check", "jumped", "--timeout", ANSWERED, "--ssh-config", str(box.ssh_config))
    assert result.returncode == 0, result.stderr
    bastion.stop()  # the path really goes through the bastion
    result = orch("check", "jumped", "--timeout", "3", "--ssh-config", str(box.ssh_config))
    assert result.returncode == 1
    assert "jump host bastion" in one_error_line(result) and "refused" in result.stderr


def test_unknown_bastion_key_is_reported_as_such(two_hops, orch_home):
    _, box, known = two_hops
    known.write_text("")  # the user never connected to this bastion
    save_box(box, "newbastion", make_candidate("T4", 1, 16))
    started = time.monotonic()
    result = orch("check", "newbastion", "--timeout", "60", "--ssh-config", str(box.ssh_config))
    assert result.returncode == 1
    line = one_error_line(result)
    assert "host key of the jump host bastion is not known" in line
    assert "pinned" not in line
    assert time.monotonic() - started < 30  # not retried until the timeout


def test_hop_gets_orchs_options(tmp_path):
    from orchestrator.check.transport import SshTransport

    config = tmp_path / "ssh_config"
    config.write_text("Host box\n  ProxyJump ops@bastion.example:2222\n")
    transport = SshTransport(
        "box", "ubuntu", tmp_path / "key", tmp_path / "known", ssh_config=str(config)
    )
    argv = transport.argv("true", 7, tmp_path / "hop.log")
    (proxy,) = [a for a in argv if a.startswith("ProxyCommand=")]
    for option in ("BatchMode=yes", "ConnectTimeout=7", "ServerAliveInterval=15"):
        assert f"-o {option}" in proxy
    assert "-l ops -p 2222" in proxy and proxy.endswith("-W '[%h]:%p' -- bastion.example")
    assert f"-F {config}" in proxy and f"-E {tmp_path / 'hop.log'}" in proxy
