"""The shell that `orch run` sends to a box: prepare, launch detached, follow, stop, status.

On the box a run lives in ~/.orch/runs/RUN_ID/ (mode 0700):

    job.sh      the wrapper (orchestrator/boxside/wrapper.py): runs setup, then the command,
                and writes `exit` last
    setup.sh    --setup, as the user wrote it (absent without --setup)
    cmd.sh      the command after `--`, each argument quoted
    agent.py    the checkpoint agent (orchestrator/boxside/agent.py), with --store only
    env         --env values (export lines), mode 0600; deleted by the wrapper once read
    *.py        the modules the agent imports (checkpoint_store.py, watcher.py,
                cloud_metadata.py, store_clients.py, its S3 client box_s3.py, agent_log.py:
                orchestrator/boxside/), next to it
    metadata.json  each cloud's instance metadata service, for the agent (boxside.agent_files)
    interruption.json, reclaim_deadline  the spot notice the agent saw, and the Unix second by
                which the job must have stopped (stop_script's grace on a reclaim)
    reclaim_stop  the agent stopped the job itself on that notice: the Unix second of its KILL
                (boxside/watcher.py's JobStop); status_script says `reclaim=1`
    pid         the wrapper's pid (its process group in the setsid launch)
    unit        the systemd unit name, in the systemd launch
    output.log  setup's and the command's stdout and stderr, appended (an earlier attempt's on
                this box: output.log.1)
    agent.json  the checkpoint agent's outcome (final upload ok or failed), with --store
    agent.exit  the agent's exit status, written by the wrapper once the agent is done
    exit        "STATUS STEP" once the wrapper is done (STEP: setup, cmd, restore, workdir),
                written over exit.reserve, space set aside at prepare: a full disk keeps it

and the job works in ~/orch/work/NAME (what `orch run` synced).

The job must outlive SSH: where systemd runs and sudo needs no password (cloud images), the
wrapper is a transient unit (`systemd-run`), which logind cannot kill at logout even with
KillUserProcesses=yes; elsewhere it is started with setsid + nohup in a session of its own.
Environment values (--env) never stand in an argv or a unit property: every script travels
on ssh's stdin (orchestrator/run/shell.py), and the launch script writes them to `env`
(mode 0600 in the 0700 run folder), which the wrapper sources and deletes before it reports
its pid. systemd-run gets orch's own variables only (`--setenv NAME` takes the value from its
environment, systemd-run(1); `sudo --preserve-env=NAMES`, sudoers(5): NOPASSWD: ALL implies
SETENV): systemd.exec(5) warns that Environment= is readable over D-Bus (`systemctl show`).
"""

from __future__ import annotations

import base64
import re
import shlex
from dataclasses import dataclass

from orchestrator.boxside import agent_files
from orchestrator.boxside.cloud_metadata import UPLOAD_MARGIN_S
from orchestrator.boxside.wrapper import JOB_SH
from orchestrator.run.spec import RunSpec, validate_run_id

RUNS_DIR = ".orch/runs"  # under the login user's home
WORK_DIR = "orch/work"
EXIT_RESERVE_BYTES = 64
# Free space (KiB) below which a failed job is reported as having met a full disk.
FULL_DISK_KIB = 1024
STOP_GRACE_S = 30  # TERM, then KILL after this long (CI cancellations give ~10 s more)
# A stop on a spot reclaim waits instead until the deadline the checkpoint agent took from the
# notice (reclaim_deadline: the reclaim time less the final upload's margin,
# orchestrator/boxside/cloud_metadata.py's stop_deadline), from STOP_GRACE_S up to this long.
RECLAIM_GRACE_MAX_S = 600


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _put(path: str, text: str, mode: str = "600") -> str:
    # base64 keeps any byte of the user's text out of the shell's reach.
    return f"printf '%s' '{_b64(text)}' | base64 -d > {path} && chmod {mode} {path}"


def run_dir(run_id: str) -> str:
    """The run's folder as shell text ($HOME-relative, quoted apart from $HOME)."""
    return f'"$HOME/{RUNS_DIR}/{validate_run_id(run_id)}"'


def work_dir(spec: RunSpec) -> str:
    return f"{WORK_DIR}/{spec.remote_dir_name}"


def prepare_script(spec: RunSpec, agent_source: str | None) -> str:
    """Create the run's folder, its scripts and the working directory; clear an old status."""
    rd = run_dir(spec.run_id)
    lines = [
        "set -eu",
        "umask 077",
        f'mkdir -p "$HOME/{RUNS_DIR}" {rd} "$HOME/{work_dir(spec)}"',
        f'chmod 700 "$HOME/.orch" "$HOME/{RUNS_DIR}" {rd}',
        f"rm -f {rd}/exit {rd}/pid {rd}/unit {rd}/env {rd}/interruption.json {rd}/rebalance.json"
        f" {rd}/agent.json {rd}/agent.exit {rd}/reclaim_deadline {rd}/reclaim_stop",
        # A new attempt on a node that stayed (a cluster whose lost node alone was replaced):
        # its stream starts at byte 0, so the last attempt's output moves aside, not replayed.
        f"if [ -e {rd}/output.log ]; then mv -f {rd}/output.log {rd}/output.log.1; fi",
        # Space for the exit status, set aside now: the job may fill the disk.
        f"printf '\\n%.0s' $(seq {EXIT_RESERVE_BYTES}) > {rd}/exit.reserve",
        _put(f"{rd}/job.sh", JOB_SH, "700"),
        _put(f"{rd}/cmd.sh", f"exec {spec.command_line}\n"),
    ]
    if spec.setup:
        lines.append(_put(f"{rd}/setup.sh", spec.setup + "\n"))
    else:
        lines.append(f"rm -f {rd}/setup.sh")
    if agent_source is not None:
        for name, text in agent_files(agent_source).items():
            lines.append(_put(f"{rd}/{name}", text))
    # The absolute working directory: rsync's remote paths are relative to the login folder,
    # which need not be $HOME.
    lines.append(f'echo "prepared $HOME/{work_dir(spec)}"')
    return "\n".join(lines)


def prepared_dir(output: str) -> str:
    """The absolute working directory `prepare_script` printed."""
    for line in reversed(output.strip().splitlines()):
        if line.startswith("prepared /"):
            return line.removeprefix("prepared ").strip()
    raise ValueError("the box did not say where the working directory is")


@dataclass(frozen=True, slots=True)
class LaunchEnv:
    """What the job sees besides the user's --env values."""

    attempt: int
    cloud: str
    store_url: str | None = None
    checkpoint_interval_s: float = 300.0
    upload: bool = True  # False: restore checkpoints, never upload (a cluster's other nodes)


# Ordered after the network: at shutdown a unit stops before the units it was ordered after
# ("the inverse of the start-up order is applied", systemd.unit(5) Before=/After=), so the job
# and the agent's final upload end while the network is up: "any unit that has
# After=network.target can be sure that it is stopped before the network is shut down"
# (https://systemd.io/NETWORK_ONLINE/, systemd.special(7)). No Wants=network-online.target: it
# would pull systemd-networkd-wait-online into the job's start (and hold it up to 2 minutes).
SHUTDOWN_ORDER = "After=network.target network-online.target"


def launch_script(spec: RunSpec, launch: LaunchEnv) -> str:
    """Start job.sh detached; print `started PID MODE` once it runs."""
    rd = run_dir(spec.run_id)
    wd = f'"$HOME/{work_dir(spec)}"'
    env: dict[str, str] = dict(spec.env)
    env.update(ORCH_RUN_ID=spec.run_id, ORCH_ATTEMPT=str(launch.attempt))
    env_lines = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items())
    exports = [f"export ORCH_WORKDIR={wd}", 'export ORCH_PATH="$PATH"']
    if launch.store_url and spec.checkpoint_dir:
        exports += [
            f"export ORCH_STORE={shlex.quote(launch.store_url)}",
            f"export ORCH_CHECKPOINT_DIR={wd}/{shlex.quote(spec.checkpoint_dir)}",
            f"export ORCH_CHECKPOINT_INTERVAL={launch.checkpoint_interval_s:g}",
            f"export ORCH_CLOUD_NAME={shlex.quote(launch.cloud)}",
            f"export ORCH_CHECKPOINT_UPLOAD={1 if launch.upload else 0}",
        ]
    names = ["ORCH_WORKDIR", "ORCH_PATH"]
    if launch.store_url and spec.checkpoint_dir:
        names += ["ORCH_STORE", "ORCH_CHECKPOINT_DIR", "ORCH_CHECKPOINT_INTERVAL"]
        names += ["ORCH_CLOUD_NAME", "ORCH_CHECKPOINT_UPLOAD"]
    setenv = " ".join(f"--setenv={n}" for n in names)
    preserve = ",".join(names)
    unit = f"orch-{spec.run_id}"
    return "\n".join(
        [
            "set -eu",
            "umask 077",
            _put(f"{rd}/env", env_lines),
            *exports,
            f"cd {wd}",
            "if [ -d /run/systemd/system ] && command -v systemd-run >/dev/null 2>&1 \\",
            "   && sudo -n true 2>/dev/null; then",
            f"  sudo -n --preserve-env={preserve} systemd-run --quiet --collect --unit={unit} \\",
            '    --uid="$(id -u)" --gid="$(id -g)" --working-directory=' + wd + " \\",
            f"    --property=StandardOutput=append:{rd}/output.log \\",
            f"    --property=StandardError=append:{rd}/output.log \\",
            f"    {shlex.quote('--property=' + SHUTDOWN_ORDER)} \\",
            f"    {setenv} /bin/bash {rd}/job.sh {rd}",
            f"  echo {unit} > {rd}/unit",
            "  mode=systemd",
            "else",
            f"  setsid nohup /bin/bash {rd}/job.sh {rd} >>{rd}/output.log 2>&1 </dev/null &",
            "  mode=setsid",
            "fi",
            "i=0",
            f'while [ ! -s {rd}/pid ] && [ "$i" -lt 200 ]; do sleep 0.05; i=$((i+1)); done',
            f'[ -s {rd}/pid ] || {{ rm -f {rd}/env; echo "the job did not start" >&2; exit 1; }}',
            f'echo "started $(cat {rd}/pid) $mode"',
        ]
    )


def follow_script(run_id: str, offset: int) -> str:
    """Print output.log from byte `offset` on until the wrapper exits (tail --pid), then exit 0.

    Exit 3: the run is not on this box (no pid file)."""
    rd = run_dir(run_id)
    return "\n".join(
        [
            f"[ -s {rd}/pid ] || exit 3",
            f"touch {rd}/output.log",
            f'exec tail -c +{int(offset) + 1} --pid="$(cat {rd}/pid)" -f {rd}/output.log',
        ]
    )


def status_script(run_id: str) -> str:
    """One line: `pid=N alive=0|1 exit=STATUS STEP|- size=BYTES free=KIB|- reclaim=0|1`
    (reclaim=1: the agent stopped the job on a spot notice)."""
    rd = run_dir(run_id)
    return "\n".join(
        [
            f"[ -d {rd} ] || {{ echo 'missing'; exit 0; }}",
            f"pid=$(cat {rd}/pid 2>/dev/null || echo 0); alive=0",
            'if [ "$pid" -gt 0 ] && kill -0 "$pid" 2>/dev/null; then alive=1; fi',
            f"exit_line=$(cat {rd}/exit 2>/dev/null || echo -)",
            f"size=$(wc -c < {rd}/output.log 2>/dev/null || echo 0)",
            f"free=$(df -Pk {rd} 2>/dev/null | awk 'NR==2 {{print $4}}')",
            f"reclaim=0; if [ -e {rd}/reclaim_stop ]; then reclaim=1; fi",
            'echo "pid=$pid alive=$alive exit=$exit_line size=$size free=${free:--}'
            ' reclaim=$reclaim"',
        ]
    )


def stop_timeout(reclaim: bool = False) -> float:
    """How long the SSH call of `stop_script` may take: its longest grace, and some."""
    return (RECLAIM_GRACE_MAX_S if reclaim else STOP_GRACE_S) + 15


def _stopped_by_agent(rd: str) -> list[str]:
    """Shell: `stopped` = the Unix second of the KILL the agent set when it stopped the job on
    a spot notice itself (reclaim_stop, digits only), else empty."""
    return [
        f"stopped=$(head -c 32 {rd}/reclaim_stop 2>/dev/null || true)",
        "case \"$stopped\" in ''|*[!0-9]*) stopped= ;; esac",
        'if [ "${#stopped}" -gt 12 ]; then stopped=; fi',
    ]


def _reclaim_grace(rd: str) -> list[str]:
    """Shell: `grace` = the agent's reclaim deadline less the box's clock, both digits only
    (else `grace` stays), within [$grace, RECLAIM_GRACE_MAX_S]; printed as `grace N`. When the
    agent stopped the job itself (`stopped`), its KILL and the final upload's margin after it:
    this stop only waits for the job's end."""
    return [
        f"by=$(head -c 32 {rd}/reclaim_deadline 2>/dev/null || true)",
        "now=$(date +%s 2>/dev/null || true)",
        "case \"$by\" in ''|*[!0-9]*) by= ;; esac",
        f'if [ -n "$stopped" ]; then by=$((10#$stopped + {UPLOAD_MARGIN_S})); fi',
        "case \"$now\" in ''|*[!0-9]*) by= ;; esac",
        'if [ -n "$by" ] && [ "${#by}" -le 12 ] && [ "${#now}" -le 12 ]; then',
        "  left=$((10#$by - 10#$now))",
        f'  if [ "$left" -gt {RECLAIM_GRACE_MAX_S} ]; then left={RECLAIM_GRACE_MAX_S}; fi',
        '  if [ "$left" -gt "$grace" ]; then grace=$left; fi',
        "fi",
        'echo "grace $grace"',
    ]


def stop_script(run_id: str, grace_s: int = STOP_GRACE_S, *, reclaim: bool = False) -> str:
    """TERM the job (its unit or its process group), KILL what is left after `grace_s`.

    `reclaim`: the spot service is taking the box back; the job gets the time the notice
    leaves it (`_reclaim_grace`), `grace_s` at least. A user's stop (orch stop, Ctrl-C, a CI
    cancellation) keeps `grace_s`. A job the agent already stopped on the spot notice
    (reclaim_stop) gets no second TERM: its handler may be running."""
    rd = run_dir(run_id)
    return "\n".join(
        [
            f"[ -s {rd}/pid ] || exit 0",
            f"pid=$(cat {rd}/pid)",
            f"unit=$(cat {rd}/unit 2>/dev/null || true)",
            f"grace={int(grace_s)}",
            *_stopped_by_agent(rd),
            *(_reclaim_grace(rd) if reclaim else []),
            'if [ -n "$stopped" ]; then :;',
            'elif [ -n "$unit" ]; then sudo -n systemctl kill --signal=TERM "$unit" 2>/dev/null;',
            'else kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null; fi',
            "i=0",
            f'while [ ! -s {rd}/exit ] && [ "$i" -lt $((grace * 10)) ]; do',
            "  sleep 0.1; i=$((i+1))",
            "done",
            f"if [ ! -s {rd}/exit ]; then",
            '  if [ -n "$unit" ]; then sudo -n systemctl kill --signal=KILL "$unit" 2>/dev/null;',
            '  else kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null; fi',
            f"  echo '137 killed' > {rd}/exit",
            "fi",
            f"cat {rd}/exit",
        ]
    )


@dataclass(frozen=True, slots=True)
class JobStatus:
    found: bool
    pid: int = 0
    alive: bool = False
    exit_code: int | None = None
    step: str = ""
    size: int = 0
    free_kib: int | None = None  # free space on the run folder's disk
    reclaim_stopped: bool = False  # the box's agent stopped the job on a spot notice

    @property
    def disk_full(self) -> bool:
        return self.free_kib is not None and self.free_kib < FULL_DISK_KIB

    @property
    def done(self) -> bool:
        return self.exit_code is not None


_STATUS = re.compile(
    r"pid=(?P<pid>\d+) alive=(?P<alive>[01]) exit=(?:-|(?P<code>\d{1,3}) (?P<step>[a-z]+))"
    r" size=\s*(?P<size>\d+)(?: free=(?:-|(?P<free>\d+)))?(?: reclaim=(?P<reclaim>[01]))?"
)


def parse_status(text: str) -> JobStatus:
    line = text.strip().splitlines()[-1] if text.strip() else ""
    if line == "missing":
        return JobStatus(found=False)
    match = _STATUS.fullmatch(line)
    if not match:
        return JobStatus(found=False)
    code = match.group("code")
    return JobStatus(
        found=True,
        pid=int(match.group("pid")),
        alive=match.group("alive") == "1",
        exit_code=int(code) if code is not None else None,
        step=match.group("step") or "",
        size=int(match.group("size")),
        free_kib=int(match.group("free")) if match.group("free") else None,
        reclaim_stopped=match.group("reclaim") == "1",
    )


def parse_exit_line(text: str) -> tuple[int, str] | None:
    match = re.search(r"(\d{1,3}) ([a-z]+)\s*$", text)
    return (int(match.group(1)), match.group(2)) if match else None
