"""`orch logs`, `orch wait`, `orch stop`, `orch ssh`: a run on a box after `orch run` started
it (attached elsewhere, or with --detach), and a shell on the box."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from typing import Any

import click

from orchestrator.commands.check_options import DAY_S, bounded_duration, ssh_config_option
from orchestrator.commands.console import make_progress, make_say
from orchestrator.commands.duration_type import DURATION
from orchestrator.errors import EXIT_FAILURE, OrchError
from orchestrator.textui import counted

# The longest `orch wait` (a training job may run for weeks).
WAIT_MAX_S = 60 * DAY_S

run_option = click.option("--run", "run_id", metavar="RUN_ID", help="A run other than the newest.")


def _box_and_run(name: str, run_id: str | None, ssh_config: str | None):  # noqa: ANN202
    from orchestrator.check.transport import resolve_ssh_config
    from orchestrator.provision.boxes import load_box
    from orchestrator.run import record, shell

    box = load_box(name)
    run = record.load_run(box, run_id)
    transport = shell.ssh_transport(box, resolve_ssh_config(ssh_config))
    return box, run, transport


def _gone(box: Any):  # noqa: ANN202 - the cloud's word, asked before each SSH retry
    from functools import partial

    from orchestrator.run.reach import box_gone

    return partial(box_gone, box)


@click.command("logs")
@click.argument("name")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the run ends.")
@click.option(
    "--timeout",
    type=DURATION,
    default="5m",
    show_default=True,
    help="With -f: give up when SSH stays silent this long (the cloud is asked first).",
)
@run_option
@ssh_config_option()
def logs(
    name: str, follow: bool, timeout: float, run_id: str | None, ssh_config: str | None
) -> None:
    """Print the output of the newest run on box NAME (-f: follow it to the end). On a
    terminal, the box's control characters are shown escaped.

    \b
    Examples:
      orch logs exp1
      orch logs exp1 -f
      orch logs exp1 --run r-20261203-101500-a1b2c3
    """
    from orchestrator.run import terminal
    from orchestrator.run.remote import run_dir
    from orchestrator.run.stream import LogFollower

    bounded_duration("--timeout", timeout, low=5, high=DAY_S)
    box, run, transport = _box_and_run(name, run_id, ssh_config)
    sink = terminal.for_terminal(sys.stdout.buffer, sys.stdout)
    try:
        if follow:
            LogFollower(
                transport,
                run["run_id"],
                sink,
                make_say(False),
                lost_after_s=timeout,
                gone=_gone(box),
            ).follow()
            return
        _print_log(transport, f"cat {run_dir(run['run_id'])}/output.log", sink, run["run_id"])
    finally:
        terminal.finish(sink)


def _print_log(transport: Any, script: str, sink: Any, run_id: str) -> None:
    import subprocess
    import threading

    from orchestrator.check.untrusted import last_line
    from orchestrator.run.shell import stream_argv

    # stderr is the box's too (its shell's rc files, `cat`): kept here, the tail only, and
    # shown escaped in the error line, never passed to the terminal as it came.
    proc = subprocess.Popen(
        stream_argv(transport, script),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    errors = bytearray()

    def drain(source: Any) -> None:
        while chunk := source.read1(65536):
            errors.extend(chunk)
            del errors[:-65536]

    reader = threading.Thread(target=drain, args=(proc.stderr,), daemon=True)
    reader.start()
    try:
        while chunk := proc.stdout.read1(65536):
            sink.write(chunk)
            sink.flush()
    except BaseException:  # Ctrl-C, a closed pipe: ssh runs in a session of its own
        proc.kill()
        proc.wait()
        raise
    code = proc.wait()
    reader.join(timeout=5)
    if code != 0:
        said = last_line(errors.decode("utf-8", "replace"))
        why = f": {said}" if said else ""
        raise OrchError(f"reading the output of run {run_id} failed (ssh exit {code}){why}")


@click.command("wait")
@click.argument("name")
@run_option
@click.option(
    "--timeout", type=DURATION, help="Give up after this long (2h, 90m; a bare number is seconds)."
)
@ssh_config_option()
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def wait(
    name: str, run_id: str | None, timeout: float | None, ssh_config: str | None, as_json: bool
) -> None:
    """Wait for the run on box NAME to end, fetch its --fetch paths, destroy the box if the run
    created it (unless it was started with --keep), and exit with the run's exit status.

    \b
    Examples:
      orch wait exp2
      orch wait exp2 --timeout 10h --json
    """
    from orchestrator.ci_runner import forget
    from orchestrator.provision import teardown
    from orchestrator.run import checkpoints, record, sync

    if timeout is not None:
        bounded_duration("--timeout", timeout, low=1, high=WAIT_MAX_S)
    box, run, transport = _box_and_run(name, run_id, ssh_config)
    status = _wait_for_end(box, run, transport, timeout)
    code = status.exit_code if status.exit_code is not None else EXIT_FAILURE
    say = make_say(as_json)
    problem = saved = None
    if run.get("store") and status.found:
        saved, code, problem = checkpoints.settle(transport, run["run_id"], code)
    fetched: list[str] = []
    if run.get("fetch"):
        local = run.get("workdir") or "."
        fetched = sync.pull(
            transport, str(run["remote_dir"]), list(run["fetch"]), _local_dir(local), say
        )
    record.save_run(box, {**run, "state": "done", "exit_code": code})
    destroyed = False
    if run.get("created_box") and not run.get("keep"):
        teardown.down(box.name, box.state_url, say, make_progress(as_json), forget)
        destroyed = True
    if as_json:
        outcome = {"run_id": run["run_id"], "box": name, "exit_code": code, "step": status.step}
        outcome.update(fetched=fetched, box_destroyed=destroyed, error=problem)
        outcome["checkpoint"] = saved.to_dict() if saved else None
        click.echo(json.dumps(outcome))
    else:
        click.echo(
            f"run {run['run_id']} on box {name}: exit {code}"
            + (" (box destroyed)" if destroyed else ""),
            err=True,
        )
        if problem:
            click.echo(f"orch: error: {problem}", err=True)
    if code:
        sys.exit(code)


def _wait_for_end(box: Any, run: dict[str, Any], transport: Any, timeout: float | None) -> Any:
    """Poll the run's status until it ends; --timeout bounds the whole wait, SSH retries
    included, and a box the cloud calls gone ends it at once."""
    from orchestrator.run import reach, remote, shell

    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        window = reach.retry_window(deadline)
        text = shell.call_ok(
            transport,
            remote.status_script(run["run_id"]),
            what="reading the run's status",
            timeout=min(60.0, window),
            retry_s=window,
            gone=_gone(box),
        )
        status = remote.parse_status(text)
        if status.done or not status.found or not status.alive:
            return status
        if deadline is not None and time.monotonic() > deadline:
            raise OrchError(f"run {run['run_id']} still runs after {timeout:g} s")
        time.sleep(5 if deadline is None else max(0.0, min(5.0, deadline - time.monotonic())))


def _local_dir(path: str):  # noqa: ANN202
    from pathlib import Path

    folder = Path(path)
    if not folder.is_dir():
        raise OrchError(f"the run's working directory {folder} is gone; cannot fetch into it")
    return folder


@click.command("stop")
@click.argument("name")
@run_option
@click.option(
    "--timeout",
    type=DURATION,
    default="2m",
    show_default=True,
    help="How long to keep trying a box that does not answer (the cloud is asked first).",
)
@ssh_config_option()
def stop(name: str, run_id: str | None, timeout: float, ssh_config: str | None) -> None:
    """Stop the run on box NAME (on a cluster: on every node): TERM, then KILL after 30 s. The
    box stays; `orch wait NAME` then fetches and destroys what the run created.

    \b
    Examples:
      orch stop exp2
    """
    from orchestrator.provision.cluster import cluster_nodes
    from orchestrator.run import remote, shell

    bounded_duration("--timeout", timeout, low=1, high=DAY_S)
    box, run, transport = _box_and_run(name, run_id, ssh_config)
    if len(cluster_nodes(box)) > 1:
        _stop_cluster(box, run["run_id"], timeout, ssh_config)
        return
    out = shell.call_ok(
        transport,
        remote.stop_script(run["run_id"]),
        what="stopping the run",
        timeout=remote.STOP_GRACE_S + 15,
        retry_s=timeout,
        gone=_gone(box),
    )
    parsed = remote.parse_exit_line(out)
    shown = f"exit {parsed[0]}" if parsed else "it was not running"
    click.echo(f"run {run['run_id']} on box {name} stopped ({shown})", err=True)


def _stop_cluster(box: Any, run_id: str, timeout: float, ssh_config: str | None) -> None:
    """Every node of a cluster box, at once: a run whose orch died runs on all of them."""
    from orchestrator.check.cluster import node_transports
    from orchestrator.errors import OrchError
    from orchestrator.run.cluster_job import stop_everywhere

    results = stop_everywhere(node_transports(box, ssh_config), run_id, timeout)
    for index, shown, _ in results:
        if shown is not None:
            click.echo(
                f"run {run_id} on node {index} of box {box.name} stopped ({shown})", err=True
            )
    failed = [(index, error) for index, _, error in results if error is not None]
    if failed:
        index, error = failed[0]
        raise OrchError(f"{counted(len(failed), 'node')} not stopped; node {index}: {error}")


@click.command("ssh", context_settings={"allow_interspersed_args": False})
@click.argument("name")
@ssh_config_option()
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def ssh(name: str, ssh_config: str | None, command: tuple[str, ...]) -> None:
    """Open a shell on box NAME, or run COMMAND there, with its key and pinned host key.

    \b
    Examples:
      orch ssh exp1
      orch ssh exp1 -- nvidia-smi
    """
    from orchestrator.check.transport import resolve_ssh_config
    from orchestrator.provision.boxes import load_box
    from orchestrator.run import shell

    box = load_box(name)
    transport = shell.ssh_transport(box, resolve_ssh_config(ssh_config))
    argv: list[Any] = transport.argv("x")[:-1]  # without the (placeholder) remote command
    if command[:1] == ("--",):  # after NAME, click passes the separator through
        command = command[1:]
    if command:
        argv.append(shlex.join(command))
    elif sys.stdin.isatty():
        argv.insert(1, "-t")
    sys.stdout.flush()
    os.execvp(argv[0], argv)
