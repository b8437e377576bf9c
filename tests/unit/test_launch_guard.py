"""Issue 23 items 2 and 7: every box expires unless `--ttl none` says otherwise (warned about,
recorded), and in a terminal `up`/`run` show the offer and ask before creating anything.

The question is tested with a real pseudo-terminal: `orch up` runs as a child process on a
pty, the test waits for the question, answers "n", and checks that nothing was created. The
rest runs the CLI in-process with tripwires where a cloud would be reached (as
test_up_validation.py does)."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.commands import launch_guard
from orchestrator.errors import OrchError
from orchestrator.provision import display, inputs, launch
from orchestrator.provision.boxes import Box
from tests.support import (
    Tripwire,
    candidate,
    forbid_cloud_reach,
    plan_file,
    run_cli,
    with_cloud_credentials,
)

CIDR = "203.0.113.7/32"
REPO = Path(__file__).resolve().parents[2]


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    with_cloud_credentials(monkeypatch)
    forbid_cloud_reach(monkeypatch)
    return tmp_path / "home"


def captured_up_options(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Stop `orch up` where it would create the box, keeping the options it would use."""
    seen: list[Any] = []

    def fake_up(options: Any, *_args: Any, **_kwargs: Any) -> Box:
        seen.append(options)
        raise Tripwire("up")

    monkeypatch.setattr(launch, "up", fake_up)
    return seen


# ------------------------------------------------------------------------------ expiry


def test_up_without_ttl_gets_twelve_hours(home, tmp_path, capsys, monkeypatch):
    seen = captured_up_options(monkeypatch)
    plan = plan_file(tmp_path, candidate())
    with pytest.raises(Tripwire):
        run_cli(capsys, "up", "--plan", plan, "--name", "exp1", "--ssh-cidr", CIDR, "--no-check")
    assert seen[0].ttl == "12h" == launch_guard.DEFAULT_TTL
    assert "never expire" not in capsys.readouterr().err


def test_ttl_none_is_warned_about_and_recorded(home, tmp_path, capsys, monkeypatch):
    seen = captured_up_options(monkeypatch)
    plan = plan_file(tmp_path, candidate())
    argv = ["up", "--plan", plan, "--name", "exp1", "--ssh-cidr", CIDR, "--no-check"]
    with pytest.raises(Tripwire):
        run_cli(capsys, *argv, "--ttl", "none", "--json")
    err = capsys.readouterr().err
    assert "warning: box exp1 will never expire (--ttl none)" in err  # under --json too
    assert seen[0].ttl == "none"
    assert inputs.expires_at_for(seen[0].ttl) is None


def test_the_record_keeps_the_ttl_asked_for(tmp_path):
    box = Box(
        name="exp1",
        directory=tmp_path,
        cloud="aws",
        region="us-east-1",
        candidate=candidate(),
        state="up",
        created_at="2026-12-04T19:00:00Z",
        expires_at=None,
        outputs={},
        owner="me",
        state_url=None,
        ttl="none",
    )
    box.save()
    data = json.loads(box.record_path.read_text())
    assert data["ttl"] == "none" and data["expires_at"] is None
    assert Box.from_dict(data, tmp_path).ttl == "none"
    assert display.box_summary(box)["ttl"] == "none"


def test_run_without_ttl_gets_the_same_default(home, tmp_path, capsys, monkeypatch):
    from orchestrator.run import session

    seen: list[Any] = []

    class Stop(Exception):
        pass

    def fake_run(request: Any, *_args: Any) -> None:
        seen.append(request)
        raise Stop

    monkeypatch.setattr(session, "Run", fake_run)
    plan = plan_file(tmp_path, candidate())
    work = tmp_path / "work"
    work.mkdir()
    argv = ["run", "--plan", plan, "--ssh-cidr", CIDR, "--workdir", str(work), "--", "true"]
    with pytest.raises(Stop):
        run_cli(capsys, *argv)
    assert seen[0].up_options.ttl == launch_guard.DEFAULT_TTL


# ------------------------------------------------------------------------------ the question


def test_offer_shows_box_price_lifetime_and_job_cost():
    choice = candidate("g5.xlarge", price_per_hour=1.006, cost=2.5, hours=2.49)
    text = "\n".join(launch_guard.offer_lines(choice, "exp1", "12h", 2))
    assert "box exp1: g5.xlarge" in text and "$1.006/h" in text
    assert "lifetime: 12h" in text and "at most $12.07 if kept" in text
    assert "expected job cost: $2.50" in text and "2 alternatives" in text
    never = "\n".join(launch_guard.offer_lines(choice, "exp1", "none", 0))
    assert "never expires" in never


ANSWERS = [("y\n", True), ("yes\n", True), ("n\n", False), ("\n", False), ("", False),
           ("maybe\n", False)]  # fmt: skip


@pytest.mark.parametrize(("answer", "goes_on"), ANSWERS)
def test_only_yes_goes_on(answer, goes_on):
    plan = type("P", (), {"choice": candidate(), "alternatives": []})()
    err = Terminal()
    ask = {"stdin": Terminal(answer), "stderr": err}
    if goes_on:
        launch_guard.confirm_launch(plan, "exp1", "2h", False, **ask)
    else:
        with pytest.raises(OrchError, match="nothing was created") as caught:
            launch_guard.confirm_launch(plan, "exp1", "2h", False, **ask)
        assert caught.value.exit_code == 1
    assert "Create it? [y/N]" in err.getvalue()


def test_yes_and_no_terminal_never_ask():
    plan = type("P", (), {"choice": candidate(), "alternatives": []})()
    for stdin, yes in ((Terminal("n\n"), True), (io.StringIO("n\n"), False)):
        err = Terminal()
        launch_guard.confirm_launch(plan, "exp1", "2h", yes, stdin=stdin, stderr=err)
        assert err.getvalue() == "" and stdin.read() == "n\n"  # nothing shown, nothing read


def test_yes_in_a_terminal_goes_on_to_create(home, tmp_path, capsys, monkeypatch):
    """`y` reaches the code that creates the box (the tripwire), with the same options."""
    monkeypatch.setattr(launch_guard, "interactive", lambda *_: True)
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    seen = captured_up_options(monkeypatch)
    plan = plan_file(tmp_path, candidate())
    with pytest.raises(Tripwire):
        run_cli(capsys, "up", "--plan", plan, "--name", "exp1", "--ssh-cidr", CIDR, "--no-check")
    assert seen and "Create it? [y/N]" in capsys.readouterr().err


def _read_until(fd: int, marker: bytes, limit_s: float = 120.0) -> bytes:
    """What the pty printed up to `marker` (an upper bound, not a synchronisation delay)."""
    seen = b""
    end = time.monotonic() + limit_s
    while marker not in seen:
        left = end - time.monotonic()
        assert left > 0, f"no {marker!r} on the terminal; it showed {seen[-2000:]!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                chunk = b""
            assert chunk, f"the terminal closed before {marker!r}: {seen[-2000:]!r}"
            seen += chunk
    return seen


def _up_on_a_pty(tmp_path: Path, answer: bytes | None, *extra: str) -> tuple[int, bytes]:
    home = tmp_path / "home"
    plan = plan_file(tmp_path, candidate("g5.xlarge"))
    env = {
        **os.environ,
        "ORCH_HOME": str(home),
        "PYTHONPATH": str(REPO),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        # Were the answer ignored, nothing could reach a real cloud from here.
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    }
    argv = [sys.executable, "-m", "orchestrator", "up", "--plan", plan, "--name", "exp1",
            "--ssh-cidr", CIDR, "--no-check", *extra]  # fmt: skip
    leader, follower = pty.openpty()
    child = subprocess.Popen(
        argv, stdin=follower, stdout=follower, stderr=follower, env=env, cwd=REPO
    )
    os.close(follower)
    try:
        shown = _read_until(leader, b"Create it? [y/N]") if answer is not None else b""
        if answer is not None:
            os.write(leader, answer)
        status = child.wait(timeout=300)
        try:
            while select.select([leader], [], [], 0)[0]:
                chunk = os.read(leader, 4096)
                if not chunk:
                    break
                shown += chunk
        except OSError:
            pass
    finally:
        if child.poll() is None:
            child.kill()
        os.close(leader)
    return status, shown


def test_a_terminal_is_asked_and_no_creates_nothing(tmp_path):
    status, shown = _up_on_a_pty(tmp_path, b"n\n")
    text = shown.decode(errors="replace")
    assert "box exp1: g5.xlarge" in text and "lifetime: 12h" in text
    assert "expected job cost:" in text
    assert "orch: error: cancelled: nothing was created" in text
    assert status == 1
    boxes = tmp_path / "home" / "boxes"
    assert not boxes.exists() or not any(boxes.iterdir())
