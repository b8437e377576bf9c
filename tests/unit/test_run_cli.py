"""Bad input to `orch run`, `orch logs/wait/stop/ssh`: exit 2 and one `orch: error:` line
before any cloud, Terraform or SSH call, and no box record left behind. The run's pure parts
(spec, store, recovery plan, report arithmetic) are checked here too."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import OrchError, UsageError
from orchestrator.plan import Plan
from orchestrator.provision import inputs, launch, steps
from orchestrator.run import recovery, session, shell
from orchestrator.run.spec import RunSpec, parse_env, parse_store, relative_box_path
from tests.support import candidate, cli_refused, plan_file, with_cloud_credentials

CIDR = "203.0.113.7/32"


class Tripwire(AssertionError):
    pass


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    with_cloud_credentials(monkeypatch)

    def tripwire(*_args: Any, **_kwargs: Any) -> None:
        raise Tripwire("reached a cloud, Terraform or the box")

    for target, name in (
        (launch, "render_box"),
        (steps, "terraform_for"),
        (inputs, "discover_caller_cidr"),
        (shell, "call"),
    ):
        monkeypatch.setattr(target, name, tripwire)
    return tmp_path / "home"


def refused(capsys: pytest.CaptureFixture[str], *argv: str, words: tuple[str, ...] = ()) -> None:
    cli_refused(capsys, *argv, words=words)


@pytest.fixture
def plan(tmp_path: Path) -> str:
    return plan_file(tmp_path, candidate("g5.xlarge"))


@pytest.fixture
def workdir(tmp_path: Path) -> str:
    folder = tmp_path / "project"
    folder.mkdir()
    return str(folder)


BAD_RUNS = [
    # (extra arguments before `--`, command, words in the error)
    ((), (), ("give the command",)),
    (("--env", "1BAD=x"), ("true",), ("--env",)),
    (("--env", "NOEQUALS"), ("true",), ("--env",)),
    (("--env", "ORCH_ATTEMPT=9"), ("true",), ("orch sets ORCH_ATTEMPT",)),
    (("--fetch", "../etc"), ("true",), ("--fetch", "stay inside")),
    (("--fetch", "/etc/passwd"), ("true",), ("--fetch",)),
    (("--checkpoint-dir", "ckpt"), ("true",), ("go together",)),
    (("--store", "s3://bkt/p"), ("true",), ("go together",)),
    (("--checkpoint-dir", "c", "--store", "http://x/y"), ("true",), ("--store",)),
    (("--checkpoint-dir", "c", "--store", "s3://b/a/../c"), ("true",), ("--store",)),
    (("--checkpoint-interval", "0"), ("true",), ("--checkpoint-interval",)),
    (("--spot-recovery", "-1"), ("true",), ("--spot-recovery",)),
    (("--fallback-on-demand",), ("true",), ("--spot-recovery",)),
    (("--watch-interval", "nan"), ("true",), ("--watch-interval",)),
    (("--ttl", ""), ("true",), ("ttl",)),
    (("--name", "Bad_Name"), ("true",), ("bad box name",)),
    (("--detach", "--spot-recovery", "1"), ("true",), ("--detach",)),
    (("--launcher", "mpirun"), ("true",), ("--launcher",)),
    (("--rendezvous-timeout", "5s"), ("true",), ("--rendezvous-timeout",)),
    (("--env", "ORCH_NODE_RANK=1"), ("true",), ("orch sets ORCH_NODE_RANK",)),
]


def test_a_cluster_plan_is_refused_detached_before_anything_runs(home, tmp_path, workdir, capsys):
    plan = plan_file(tmp_path, candidate("p4d.24xlarge", nodes=2))
    argv = ["run", "--plan", plan, "--ssh-cidr", CIDR, "--workdir", workdir, "--detach"]
    refused(capsys, *argv, "--", "true", words=("--detach", "cluster"))
    assert not (home / "boxes").exists() or not any((home / "boxes").iterdir())


@pytest.mark.parametrize(("extra", "command", "words"), BAD_RUNS)
def test_bad_run_options_are_refused_before_anything_runs(
    home, plan, workdir, capsys, extra, command, words
):
    argv = ["run", "--plan", plan, "--ssh-cidr", CIDR, "--workdir", workdir, *extra]
    if command:
        argv += ["--", *command]
    refused(capsys, *argv, words=words)
    assert not (home / "boxes").exists() or not any((home / "boxes").iterdir())


def test_a_missing_workdir_and_box_options_with_box_are_refused(home, tmp_path, capsys):
    refused(capsys, "run", "--box", "exp1", "--workdir", str(tmp_path / "nope"), "--", "true",
            words=("--workdir",))  # fmt: skip
    refused(capsys, "run", "--box", "exp1", "--ttl", "1h", "--workdir", str(tmp_path), "--",
            "true", words=("--box", "--ttl"))  # fmt: skip
    refused(capsys, "run", "--box", "exp1", "--spot-recovery", "1", "--workdir", str(tmp_path),
            "--", "true", words=("--spot-recovery",))  # fmt: skip
    refused(capsys, "run", "--box", "nonesuch", "--workdir", str(tmp_path), "--", "true",
            words=("no box named",))  # fmt: skip


@pytest.mark.parametrize("command", ["logs", "wait", "stop", "ssh"])
def test_job_commands_on_an_unknown_box(home, capsys, command):
    refused(capsys, command, "nonesuch", words=("nonesuch",))
    refused(capsys, command, "Bad_Name", words=("bad box name",))


# ------------------------------------------------------------------------------ pure parts


def test_env_values_keep_anything_but_nul():
    assert parse_env(["A=x=y", "B=", "C=it's $HOME"]) == {"A": "x=y", "B": "", "C": "it's $HOME"}
    with pytest.raises(UsageError):
        parse_env(["A=\0"])


def test_env_name_alone_takes_the_value_from_orch_s_environment():
    """`--env TOKEN`: the value never stands in orch's argv or the shell's history."""
    mine = {"TOKEN": "s3cr3t 'x'", "EMPTY": ""}
    assert parse_env(["TOKEN", "EMPTY", "B=2"], mine) == {
        "TOKEN": "s3cr3t 'x'",
        "EMPTY": "",
        "B": "2",
    }
    with pytest.raises(UsageError, match="not set in orch's environment"):
        parse_env(["MISSING"], mine)
    with pytest.raises(UsageError, match="orch sets"):
        parse_env(["ORCH_RUN_ID"], {"ORCH_RUN_ID": "x"})


def test_store_urls():
    store = parse_store("s3://my-bucket/some/prefix/")
    assert (store.bucket, store.prefix) == ("my-bucket", "some/prefix")
    assert store.for_run("r-1") == "s3://my-bucket/some/prefix/r-1"
    assert parse_store("s3://my-bucket").for_run("r-1") == "s3://my-bucket/r-1"
    for bad in ("s3://", "s3://UPPER/x", "s3://a..b/x", "gs://b/x", "s3://b/x", "s3://bkt/a/./b"):
        with pytest.raises(UsageError):
            parse_store(bad)


def test_box_paths_stay_in_the_working_directory():
    assert relative_box_path("outputs/model.pt", "--fetch") == "outputs/model.pt"
    assert relative_box_path("./ckpt/", "--fetch") == "ckpt"
    for bad in ("", ".", "..", "a/../../b", "/abs", "a\nb"):
        with pytest.raises(UsageError):
            relative_box_path(bad, "--fetch")


def test_the_run_record_keeps_environment_names_not_values(tmp_path):
    spec = RunSpec(command=["python", "t.py"], workdir=tmp_path, env={"TOKEN": "s3cr3t"})
    record = spec.to_record()
    assert record["env_names"] == ["TOKEN"] and "s3cr3t" not in json.dumps(record)
    assert spec.command_line == "python t.py"


def plan_of(*candidates) -> Plan:
    return Plan(job={}, estimate={}, choice=candidates[0], alternatives=list(candidates[1:]),
                created_at="2026-12-03T00:00:00Z")  # fmt: skip


def test_recovery_tries_the_lost_candidate_first_then_the_others_then_on_demand():
    a = candidate("g5.xlarge", "spot", price_per_hour=0.4)
    b = candidate("g4dn.xlarge", "spot", price_per_hour=0.2)
    c = candidate("g5.xlarge", "on-demand")
    recovered = recovery.recovery_plan(plan_of(b, a, c), a, on_demand=False)
    assert recovered.candidates() == [a, b, c]
    fallback = recovery.recovery_plan(plan_of(b, a, c), a, on_demand=True)
    assert [x.market for x in fallback.candidates()] == ["on-demand"] * len(fallback.candidates())
    assert [x.instance_type for x in fallback.candidates()] == ["g5.xlarge", "g4dn.xlarge"]
    # Priced from the catalog's on-demand column, not the spot price.
    assert fallback.choice.price_per_hour is not None and fallback.choice.price_per_hour > 0.4


def test_report_costs_time_lost_and_on_demand_reference():
    report = session.RunReport(run_id="r-20261203-000000-abcdef", box="b", exit_code=0)
    report.on_demand_price_per_hour = 2.0
    report.attempts = [
        session.Attempt(1, "aws", "us-east-1", "g5.xlarge", "spot", "us-east-1a", 1.0,
                        started=0.0, job_started=600.0, ended=3600.0, outcome="reclaimed"),
        session.Attempt(2, "aws", "us-east-1", "g5.xlarge", "spot", "us-east-1b", 1.0,
                        started=3600.0, job_started=3900.0, ended=7200.0, outcome="completed"),
    ]  # fmt: skip
    assert report.recoveries == 1
    assert report.time_lost_s() == 300.0  # from the loss to the command running again
    assert report.cost() == pytest.approx(2.0)  # two box-hours at $1
    assert report.on_demand_cost() == pytest.approx((7200 - 300) / 3600 * 2.0)
    data = report.to_dict()
    assert data["attempts"][0]["started"] == "1970-01-01T00:00:00Z"
    assert data["cost_usd"] == 2.0 and data["recoveries"] == 1


def test_the_agent_s_outcome_is_read_warily_and_a_failed_final_upload_fails_the_run():
    from orchestrator.run.checkpoints import failure_line, parse_outcome

    ok_text = 'exit=0\n{"final_upload": "ok", "checkpoint": "00000003", "error": null}'
    assert parse_outcome(ok_text).summary() == "checkpoint 00000003"
    failed = parse_outcome(
        'exit=1\n{"final_upload": "failed", "checkpoint": "00000002", "error": "No\\u001b]0;x"}'
    )
    assert failed.failed and failed.error == "No\\x1b]0;x"  # box text, escaped
    assert failure_line(failed) == (
        "the final checkpoint upload failed (No\\x1b]0;x); the store keeps checkpoint 00000002"
    )
    assert parse_outcome("exit=2\n").error == "the checkpoint agent exited 2"
    for junk in ("", "exit=-\n", "exit=$(x)\n{]", 'exit=0\n{"final_upload": "maybe"}'):
        assert parse_outcome(junk).state == "unknown"
    forged = parse_outcome('exit=0\n{"final_upload": "ok", "checkpoint": "../../x"}')
    assert forged.state == "saved" and forged.checkpoint is None


def test_the_report_carries_each_attempt_s_checkpoint_outcome():
    attempt = session.Attempt(1, "aws", "us-east-1", "g5.xlarge", "spot", "", 1.0, 0.0)
    attempt.checkpoint = {"state": "failed", "checkpoint": None, "error": "gone"}
    report = session.RunReport("r-20261203-101500-a1b2c3", "b", 1, attempts=[attempt])
    assert report.to_dict()["attempts"][0]["checkpoint"]["state"] == "failed"


@pytest.mark.parametrize(
    "argv",
    [
        ("wait", "exp1", "--timeout", "nan"),
        ("wait", "exp1", "--timeout", "-5"),
        ("wait", "exp1", "--timeout", "inf"),
        ("stop", "exp1", "--timeout", "0"),
        ("logs", "exp1", "-f", "--timeout", "nan"),
    ],
)
def test_job_command_durations_are_bounded(home, capsys, argv):
    refused(capsys, *argv, words=("--timeout",))


def test_a_zero_duration_is_said_to_be_zero(home, capsys):
    # It was "'0s' is not a duration (use e.g. 30s, 10m, 2h, 1d)": written as the examples.
    refused(capsys, "stop", "exp1", "--timeout", "0s", words=("--timeout", "'0s' is zero"))


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ("wait", "exp1", "--timeout", "61d"),
            "--timeout must be a duration from 1s to 60d, not 61d",
        ),
        (("stop", "exp1", "--timeout", "2d"), "--timeout must be a duration from 1s to 1d, not 2d"),
        (("watch", "--local", "--interval", "0.05s"), "from 0.1s to 1d, not 0.05s"),
        (("check", "--local", "--timeout", "25h"), "from 1s to 1d, not 25h"),
    ],
)
def test_a_duration_out_of_range_is_said_in_durations(home, capsys, argv, said):
    # It was "--timeout must be a number from 1 to 5.184e+06, not 5270400.0": seconds in
    # scientific notation for an option the user wrote as "61d".
    refused(capsys, *argv, words=(said,))


class _SaysOnStderr:
    """A box whose scripts fail with `stderr` (the box writes every byte of it)."""

    host = "203.0.113.9"

    def __init__(self, stderr: str, code: int = 1) -> None:
        self.stderr, self.code = stderr, code

    def run(self, script: str, timeout: float, on_stdin: bool = False) -> Any:
        from orchestrator.check.transport import CommandResult

        return CommandResult(self.code, "", self.stderr)

    def argv(self, script: str) -> list[str]:
        return ["ssh", "-l", "ubuntu", "--", self.host, script]


HOSTILE = "fine\n\x1b]0;owned\x07\x1b[2J\x1b[Horch: run done: exit 0\x9b\u202e"


def _plain(text: str) -> bool:
    from orchestrator.check.untrusted import _unsafe

    return not any(_unsafe(c) for c in text)


def test_a_failed_box_script_s_message_carries_no_terminal_controls():
    with pytest.raises(OrchError) as failed:
        shell.call_ok(_SaysOnStderr(HOSTILE), "true", what="preparing the run")  # type: ignore[arg-type]
    message = failed.value.one_line()
    assert message.startswith("preparing the run failed on the box (exit 1): ")
    assert _plain(message) and "\\x1b]0;owned\\x07" in message


def test_rsync_s_last_line_from_the_box_carries_no_terminal_controls(monkeypatch, tmp_path):
    import subprocess

    from orchestrator.run import sync

    def rsync(argv: list[str], what: str) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 12, "", HOSTILE)

    monkeypatch.setattr(sync, "_run", rsync)
    monkeypatch.setattr(sync, "_rsync", lambda: "rsync")
    with pytest.raises(OrchError) as failed:
        sync.pull_file(_SaysOnStderr(""), "/home/u/x", tmp_path / "x")  # type: ignore[arg-type]
    assert _plain(failed.value.one_line()) and "\\x1b[2J" in failed.value.one_line()
    said: list[str] = []
    monkeypatch.setattr(sync, "_say_unsafe", lambda *args: None)
    monkeypatch.setattr(
        sync, "_run", lambda argv, what: subprocess.CompletedProcess(argv, 23, "", HOSTILE)
    )
    sync.pull(_SaysOnStderr(""), "/home/u/w", ["outputs"], tmp_path, said.append)  # type: ignore[arg-type]
    assert said and all(_plain(line) for line in said)


def test_the_run_report_shows_box_text_escaped(capsys):
    from orchestrator.commands.run import _print_report

    attempt = session.Attempt(1, "aws", "us-east-1", "g5.xlarge", "spot", "", 1.0, 0.0)
    attempt.job_started, attempt.ended, attempt.outcome = 1.0, 2.0, "failed"
    attempt.reason = "stopping the job: " + HOSTILE
    report = session.RunReport("r-20261203-101500-a1b2c3", "b", 1, attempts=[attempt])
    report.error = "starting the job failed on the box (exit 1): " + HOSTILE
    _print_report(report, as_json=False, detached=False)
    shown = capsys.readouterr().err
    assert _plain(shown.replace("\n", "")) and "\\x1b]0;owned" in shown
    attempt.job_started = None
    _print_report(report, as_json=False, detached=False)  # the job never ran: the error alone
    assert _plain(capsys.readouterr().err.replace("\n", ""))


def test_rsync_text_that_is_not_utf8_is_no_traceback(monkeypatch, tmp_path):
    """The box's shell writes into rsync's stderr (its rc files, a broken locale): bytes that
    are not UTF-8 once made `orch run`'s fetch raise UnicodeDecodeError, past the teardown
    that catches OrchError, so the box it created stayed up."""
    from orchestrator.run import sync

    fake = tmp_path / "rsync"
    fake.write_text(
        "#!/bin/bash\nprintf 'hiding \\377\\376\\n'\nprintf 'box \\377\\n' >&2\nexit 23\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(sync, "_rsync", lambda: str(fake))
    monkeypatch.setattr(sync, "_say_unsafe", lambda *args: None)
    said: list[str] = []
    box = _SaysOnStderr("")
    assert sync.pull(box, "/home/u/w", ["outputs"], tmp_path, said.append) == []  # type: ignore[arg-type]
    assert said == ["--fetch outputs: not on the box (box \ufffd)"]
    assert sync.pull_file(box, "/home/u/x", tmp_path / "x") is False  # type: ignore[arg-type]
    with pytest.raises(OrchError, match="rsync exit 23"):
        sync.push(box, tmp_path, "/home/u/w", [])  # type: ignore[arg-type]


def test_orch_logs_never_passes_the_box_s_stderr_to_the_terminal(monkeypatch, capfd):
    """`orch logs NAME` reads output.log with `cat` over ssh; the box's shell writes what it
    likes on stderr (rc files, a forged line), which went straight to orch's stderr."""
    from orchestrator.commands import jobs
    from orchestrator.run import shell as run_shell

    box_side = "printf 'job line\\n'; printf '\\033]0;owned\\007orch: run ok\\n' >&2; exit 1"
    monkeypatch.setattr(
        run_shell, "stream_argv", lambda transport, script: ["bash", "-c", box_side]
    )
    sink = io.BytesIO()
    with pytest.raises(OrchError) as failed:
        jobs._print_log(None, "cat output.log", sink, "r-20261203-101500-a1b2c3")
    assert sink.getvalue() == b"job line\n"
    assert "\x1b" not in capfd.readouterr().err
    assert "\x1b" not in failed.value.one_line() and "ssh exit 1" in failed.value.one_line()


def test_orch_logs_interrupted_ends_its_ssh(monkeypatch, tmp_path):
    """ssh runs in a session of its own (a terminal's Ctrl-C reaches orch, not it): when orch
    stops printing (Ctrl-C, a closed pipe), it ends the ssh it started instead of leaving it."""
    from orchestrator.commands import jobs
    from orchestrator.run import shell as run_shell

    pid_file = tmp_path / "pid"
    box_side = f"echo $$ > {pid_file}; printf 'job line\\n'; exec sleep 600"
    monkeypatch.setattr(
        run_shell, "stream_argv", lambda transport, script: ["bash", "-c", box_side]
    )

    class Interrupted(io.BytesIO):
        def write(self, data: bytes) -> int:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        jobs._print_log(None, "cat output.log", Interrupted(), "r-20261203-101500-a1b2c3")
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped: no such process left
        os.kill(pid, 0)


def test_a_failed_destroy_at_the_end_of_a_run_is_said_escaped(monkeypatch, tmp_path):
    """`down`'s error may quote Terraform's diagnostic (the cloud's words, such as a tag value
    anyone could set): the run's teardown says it escaped."""
    said: list[str] = []
    spec = RunSpec(command=["true"], workdir=tmp_path)
    run = session.Run(
        session.RunRequest(spec=spec, box_name="esc2"), said.append, None, io.BytesIO()
    )
    run.created = True

    def down(*_args: object) -> None:
        raise OrchError(
            "box esc2: aws still lists instance i-1 after Terraform's destroy failed "
            "(terraform destroy failed: tag \x1b]0;pwned\x07 \x1b[2J)"
        )

    monkeypatch.setattr(session, "box_exists", lambda name: True)
    monkeypatch.setattr(session.teardown, "down", down)
    run._teardown(stop_job=False)
    line = next(text for text in said if text.startswith("destroying box esc2 failed"))
    assert "\x1b" not in line and "\x07" not in line
    assert "tag \\x1b]0;pwned\\x07 \\x1b[2J)" in line


def test_every_orch_line_and_progress_line_is_escaped(capsys):
    """console.make_say/make_progress are the last gate before the terminal: a message that
    quotes a box raw is escaped line by line there; text already escaped stays as it was."""
    from orchestrator.commands.console import make_progress, make_say

    make_say(False)("box said: \x1b]0;owned\x07done\nsecond \x9b2J line")
    make_progress(False)("aws_instance.box: \x1b[2Jcreating")
    make_say(False)("already \\x1b[2J escaped, 2 \u00d7 p4d \u2014 fine")
    make_say(True)("\x1b[2J quiet")
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\x9b" not in err
    assert err.splitlines() == [
        "orch: box said: \\x1b]0;owned\\x07done",
        "second \\x9b2J line",
        "  aws_instance.box: \\x1b[2Jcreating",
        "orch: already \\x1b[2J escaped, 2 \u00d7 p4d \u2014 fine",
    ]
