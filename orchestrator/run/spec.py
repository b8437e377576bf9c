"""What `orch run` was asked to run, validated before any cloud, Terraform or SSH call.

A RunSpec holds the job (command, setup, environment, working directory, what to fetch) and
its checkpointing; values from the command line are checked here so that a bad one is exit 2
with nothing created. Environment values are kept in memory only: the run record on disk keeps
their names (`RunSpec.to_record`), never their values, since they often carry tokens.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from orchestrator.errors import UsageError

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Names orch sets for the job itself; a user value would silently lose.
RESERVED_ENV = (
    "ORCH_CHECKPOINT_DIR",
    "ORCH_RESUMED",
    "ORCH_ATTEMPT",
    "ORCH_RUN_ID",
    "ORCH_STORE",
    "ORCH_NODE_RANK",
    "ORCH_NUM_NODES",
    "ORCH_NODE_IPS",
    "ORCH_GPUS_PER_NODE",
    # What the launch hands the job's wrapper (run/remote.py): where the job runs, the agent's
    # settings. The wrapper sources the env file after them, so a user value would win.
    "ORCH_WORKDIR",
    "ORCH_PATH",
    "ORCH_CHECKPOINT_INTERVAL",
    "ORCH_CLOUD_NAME",
    "ORCH_CHECKPOINT_UPLOAD",
)
# The prefix of the wrapper's own shell variables (boxside/wrapper.py), which it keeps apart
# from the job's environment it sources.
WRAPPER_PREFIX = "_orch_"
_STORE = re.compile(r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<prefix>[^\s]*))?")
_RUN_ID = re.compile(r"r-\d{8}-\d{6}-[0-9a-f]{6}")
MAX_ENV = 100
MAX_FETCH = 50


def new_run_id(now: datetime | None = None) -> str:
    moment = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    return f"r-{moment}-{secrets.token_hex(3)}"


def validate_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise UsageError(f"bad run id {run_id!r} (expected r-YYYYMMDD-HHMMSS-xxxxxx)")
    return run_id


def parse_env(
    values: tuple[str, ...] | list[str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """--env NAME=VALUE or --env NAME (the value of NAME in orch's own environment, so a
    secret stays out of orch's argv and the shell's history); repeatable. A value may hold
    anything but a NUL byte."""
    environ = os.environ if environ is None else environ
    env: dict[str, str] = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not _ENV_NAME.fullmatch(name):
            raise UsageError(
                f"--env expects NAME=VALUE or NAME with a shell variable name, got {name!r}"
            )
        if not sep:
            if name not in environ:
                raise UsageError(f"--env {name}: {name} is not set in orch's environment")
            text = environ[name]
        if name in RESERVED_ENV:
            raise UsageError(f"--env {name}: orch sets {name} for the job itself")
        if name.startswith(WRAPPER_PREFIX):
            raise UsageError(f"--env {name}: names starting with {WRAPPER_PREFIX} are orch's own")
        if "\0" in text:
            raise UsageError(f"--env {name}: the value holds a NUL byte")
        env[name] = text
    if len(env) > MAX_ENV:
        raise UsageError(f"at most {MAX_ENV} --env values")
    return env


def relative_box_path(path: str, option: str) -> str:
    """A path inside the job's working directory on the box: relative, no '..'."""
    if not isinstance(path, str) or not path.strip() or "\0" in path or "\n" in path:
        raise UsageError(f"{option} {path!r} is not a path")
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts:
        raise UsageError(
            f"{option} {path!r} must be relative to the working directory and stay inside it"
        )
    text = str(pure)
    if text == ".":
        raise UsageError(f"{option} {path!r} names the whole working directory")
    return text


def check_pattern(pattern: str, option: str) -> str:
    """An rsync pattern (--exclude, --include): one line of rsync's filter list."""
    if not pattern or "\n" in pattern or "\0" in pattern:
        raise UsageError(f"{option} {pattern!r} is not a pattern")
    return pattern


@dataclass(frozen=True, slots=True)
class Store:
    """An S3 (or S3-compatible: Alibaba OSS) location for checkpoints."""

    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def for_run(self, run_id: str) -> str:
        """Where one run's checkpoints live: every attempt of the run shares it."""
        return f"s3://{self.bucket}/{'/'.join(p for p in (self.prefix, run_id) if p)}"


def parse_store(url: str) -> Store:
    match = _STORE.fullmatch(url or "")
    if not match or ".." in match.group("bucket"):
        raise UsageError(f"--store {url!r} is not s3://bucket[/prefix]")
    prefix = (match.group("prefix") or "").strip("/")
    if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
        raise UsageError(f"--store {url!r}: the prefix has an empty, '.' or '..' part")
    return Store(match.group("bucket"), prefix)


@dataclass(slots=True)
class RunSpec:
    command: list[str]  # CMD as argv; quoted when it becomes shell text
    workdir: Path
    setup: str | None = None  # a shell command line the user wrote, run as written
    env: dict[str, str] = field(default_factory=dict)
    excludes: list[str] = field(default_factory=list)
    includes: list[str] = field(default_factory=list)  # forced in, secrets included
    fetch: list[str] = field(default_factory=list)
    checkpoint_dir: str | None = None  # relative to the working directory on the box
    store: Store | None = None
    checkpoint_interval_s: float = 300.0
    run_id: str = field(default_factory=new_run_id)

    def __post_init__(self) -> None:
        if not self.command:
            raise UsageError("give the command to run after `--`: orch run ... -- python train.py")
        if not self.workdir.is_dir():
            raise UsageError(f"--workdir {self.workdir} is not a directory")
        if (self.checkpoint_dir is None) != (self.store is None):
            raise UsageError("--checkpoint-dir and --store go together")
        if self.checkpoint_dir is not None:
            self.checkpoint_dir = relative_box_path(self.checkpoint_dir, "--checkpoint-dir")
        self.fetch = [relative_box_path(p, "--fetch") for p in self.fetch]
        if len(self.fetch) > MAX_FETCH:
            raise UsageError(f"at most {MAX_FETCH} --fetch paths")
        for option, patterns in (("--exclude", self.excludes), ("--include", self.includes)):
            for pattern in patterns:
                check_pattern(pattern, option)
        if not 1 <= self.checkpoint_interval_s <= 86400:
            raise UsageError("--checkpoint-interval must be between 1 s and 1 day")
        validate_run_id(self.run_id)

    @property
    def command_line(self) -> str:
        return shlex.join(self.command)

    @property
    def remote_dir_name(self) -> str:
        """The working directory's name on the box (~/orch/work/<name>): the local folder's
        name, reduced to safe characters, so repeated runs from one folder sync incrementally."""
        name = re.sub(r"[^A-Za-z0-9._-]", "-", self.workdir.resolve().name).strip(".-")
        return name[:64] or "work"

    def to_record(self) -> dict[str, object]:
        """What the box's run record keeps: no environment values (they may be secrets)."""
        return {
            "run_id": self.run_id,
            "command": self.command,
            "workdir": str(self.workdir.resolve()),
            "setup": self.setup,
            "env_names": sorted(self.env),
            "fetch": self.fetch,
            "checkpoint_dir": self.checkpoint_dir,
            "store": self.store.url if self.store else None,
        }
