"""The box registry: one directory per box under ORCH_HOME, and a lock per box name.

$ORCH_HOME/                       default $XDG_STATE_HOME/orch, else ~/.local/state/orch
  boxes/<name>/                   mode 0700, self-contained Terraform root module
    box.json                      this registry's record (Box below)
    main.tf variables.tf outputs.tf terraform.tfvars.json modules/<cloud module>/
    terraform.tfstate             local backend only (S3 keeps it remotely)
    id_ed25519 id_ed25519.pub     per-box key, private half 0600
    known_hosts                   pinned host key, filled by `orch check`
  locks/<name>.lock               flock target, kept outside the box dir so `down` can
                                  delete the directory while holding the lock
  plugin-cache/                   default TF_PLUGIN_CACHE_DIR
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import jsontext
from orchestrator.errors import OrchError, UsageError
from orchestrator.plan import Candidate

BOX_STATES = ("creating", "up", "failed", "destroying", "destroyed")
BOX_NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,38}")  # fullmatch: "$" would let "\n" through
RECORD = "box.json"
DEFAULT_LOCK_TIMEOUT_S = 30.0


def orch_home() -> Path:
    """Where orch keeps boxes: $ORCH_HOME, else $XDG_STATE_HOME/orch, else ~/.local/state/orch."""
    explicit = os.environ.get("ORCH_HOME")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "orch"


def boxes_root() -> Path:
    return orch_home() / "boxes"


def validate_box_name(name: str) -> str:
    """Box names become resource names and tags: keep them DNS-label-like and short."""
    if not isinstance(name, str) or not BOX_NAME_RE.fullmatch(name):
        shown = name if isinstance(name, str) and len(name) <= 60 else f"{str(name)[:57]}..."
        raise UsageError(
            f"bad box name {shown!r}",
            hint="start with a lower-case letter; use at most 39 lower-case letters, digits, '-'",
        )
    return name


def box_directory(name: str) -> Path:
    return boxes_root() / validate_box_name(name)


def make_private_dir(path: Path) -> Path:
    """Create `path` (and parents) with the leaf at mode 0700."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


@dataclass(slots=True)
class Box:
    name: str
    directory: Path
    cloud: str  # a registered cloud name (orchestrator.clouds.names())
    region: str
    candidate: Candidate  # the plan row the box was (last) created from
    state: str  # one of BOX_STATES
    created_at: str  # ISO UTC
    expires_at: str | None  # ISO UTC, from --ttl
    outputs: dict[str, Any]  # terraform outputs: instance_id, public_ip, ssh_user, ...
    owner: str
    state_url: str | None  # s3://bucket/prefix when the state lives in a remote backend
    # Failover history: one {"instance_type", "region", "market", "error"} per failed try.
    attempts: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # why the last `up` or `down` failed
    # While `up`/`down` works on the box: the orch process (pid, start time, host) and the
    # Terraform child it runs, so `status` can tell a live apply from one whose orch is gone.
    runner: dict[str, Any] | None = None
    claim_id: str | None = None  # this home's claim on the name under --state (orch-claim.json)
    # `up --ci-runner`: what `down` needs to remove the registration (kind, api_url, repo, name,
    # label; GitLab also project_id, runner_id). Never a token (orchestrator/ci_runner).
    ci_runner: dict[str, Any] | None = None
    # The lifetime asked for ("12h"; "none": no expiry, asked for explicitly with --ttl none).
    ttl: str | None = None
    # This process only, never saved: whether `terraform apply` started on the box (in this
    # run or, for a re-run, possibly an earlier one), so a failed `up` gives the name back
    # under --state only when nothing can have been created.
    applied: bool = field(default=False, repr=False, compare=False)

    @property
    def key_path(self) -> Path:
        return self.directory / "id_ed25519"

    @property
    def public_key_path(self) -> Path:
        return self.directory / "id_ed25519.pub"

    @property
    def known_hosts_path(self) -> Path:
        return self.directory / "known_hosts"

    @property
    def record_path(self) -> Path:
        return self.directory / RECORD

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cloud": self.cloud,
            "region": self.region,
            "state": self.state,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "owner": self.owner,
            "state_url": self.state_url,
            "outputs": self.outputs,
            "candidate": self.candidate.to_dict(),
            "attempts": self.attempts,
            "error": self.error,
            "runner": self.runner,
            "claim_id": self.claim_id,
            "ci_runner": self.ci_runner,
            "ttl": self.ttl,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], directory: Path) -> Box:
        """The box a record describes; UsageError (one line naming the field) for a record
        whose shape `check_record` refuses: hand-edited, damaged, or a hostile bundle's."""
        try:
            check_record(data)
        except UsageError as exc:
            raise UsageError(f"box record {directory / RECORD} is damaged: {exc.message}") from None
        try:
            return cls(
                name=str(data["name"]),
                directory=directory,
                cloud=str(data["cloud"]),
                region=str(data["region"]),
                candidate=Candidate.from_dict(data["candidate"]),
                state=str(data["state"]),
                created_at=str(data["created_at"]),
                expires_at=data.get("expires_at"),
                outputs=dict(data.get("outputs") or {}),
                owner=str(data.get("owner") or ""),
                state_url=data.get("state_url"),
                attempts=list(data.get("attempts") or []),
                error=data.get("error"),
                runner=data.get("runner") if isinstance(data.get("runner"), dict) else None,
                claim_id=data.get("claim_id") if isinstance(data.get("claim_id"), str) else None,
                ci_runner=data["ci_runner"] if isinstance(data.get("ci_runner"), dict) else None,
                ttl=data["ttl"] if isinstance(data.get("ttl"), str) else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise OrchError(f"box record {directory / RECORD} is damaged: {exc}") from None

    def save(self) -> None:
        """Write box.json atomically (a reader never sees half a record)."""
        if self.state not in BOX_STATES:
            raise ValueError(f"unknown box state {self.state!r}")
        make_private_dir(self.directory)
        fd, tmp = tempfile.mkstemp(prefix=".box-", dir=self.directory)
        with os.fdopen(fd, "w") as handle:
            json.dump(self.to_dict(), handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.replace(tmp, self.record_path)


def check_record(data: object) -> None:
    """UsageError "FIELD VALUE is not ..." for the first field of a box record (box.json, or
    the `box` of a --state bundle, which whoever can write the bucket controls) that `down`,
    `status` and `list` could not read safely: a type they would crash on, or text that is not
    printable. The plan row gets the plan's own rules, less the catalog look-up."""
    from orchestrator.plan_validate import check_candidate_fields

    def bad(field: str, value: object, expected: str) -> UsageError:
        shown = repr(value)
        return UsageError(
            f"{field} {shown[:57] + '...' if len(shown) > 60 else shown} is not {expected}"
        )

    if not isinstance(data, dict):
        raise UsageError("it is not a JSON object")
    if not isinstance(data.get("name"), str) or not BOX_NAME_RE.fullmatch(data["name"]):
        raise bad("name", data.get("name"), "a box name")
    if data.get("state") not in BOX_STATES:
        raise bad("state", data.get("state"), f"one of {', '.join(BOX_STATES)}")
    for key, optional in _RECORD_TEXTS:
        value = data.get(key)
        if not (value is None and optional) and not _short_text(value):
            raise bad(key, value, "a printable text of 1 to 256 characters")
    for key, kind in (("outputs", dict), ("attempts", list)):
        if data.get(key) is not None and not isinstance(data[key], kind):
            raise bad(key, data[key], f"a JSON {'object' if kind is dict else 'list'}")
    if not all(isinstance(attempt, dict) for attempt in data.get("attempts") or []):
        raise bad("attempts", data["attempts"], "a list of objects")
    if data.get("error") is not None and not isinstance(data["error"], str):
        raise bad("error", data["error"], "a text")
    candidate = Candidate.from_dict(data.get("candidate"), "record")  # type: ignore[arg-type]
    check_candidate_fields(candidate, "candidate")


# Texts of a record that are shown or compared as text; (field, may be null).
_RECORD_TEXTS = (
    ("cloud", False),
    ("region", False),
    ("created_at", False),
    ("expires_at", True),
    ("state_url", True),
)


def _short_text(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 256 and value.isprintable()


def load_box(name: str) -> Box:
    directory = box_directory(name)
    record = directory / RECORD
    try:
        data = jsontext.loads(record.read_text())
    except FileNotFoundError:
        raise UsageError(f"no box named {name!r}", hint="see `orch list`") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise OrchError(f"cannot read box record {record}: {exc}") from None
    return Box.from_dict(data, directory)


def box_exists(name: str) -> bool:
    return (box_directory(name) / RECORD).is_file()


def list_boxes() -> list[Box]:
    """Every box with a readable record, by name; damaged records are skipped."""
    return read_boxes()[0]


def read_boxes() -> tuple[list[Box], dict[str, str]]:
    """Every box with a readable record, by name, and for each record that cannot be read
    (damaged, hand-edited, unreadable) the one-line reason, by box name."""
    root = boxes_root()
    if not root.is_dir():
        return [], {}
    boxes, damaged = [], {}
    for entry in sorted(root.iterdir()):
        if not (entry / RECORD).is_file() or not BOX_NAME_RE.match(entry.name):
            continue
        try:
            boxes.append(load_box(entry.name))
        except OrchError as exc:
            damaged[entry.name] = exc.one_line()
    return boxes, damaged


def lock_timeout_from_env() -> float:
    """$ORCH_LOCK_TIMEOUT in seconds (default 30); UsageError for anything but 0..86400."""
    raw = os.environ.get("ORCH_LOCK_TIMEOUT")
    if raw is None:
        return DEFAULT_LOCK_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 86400:  # also false for nan
        raise UsageError(f"ORCH_LOCK_TIMEOUT={raw[:40]!r} is not a number of seconds (0 to 86400)")
    return value


@contextlib.contextmanager
def box_lock(name: str, timeout: float | None = None) -> Iterator[Path]:
    """Hold an exclusive lock on box `name` so `up`/`down` on one box never overlap.

    Waits up to `timeout` seconds (default $ORCH_LOCK_TIMEOUT or 30) for another command to
    finish, saying once on stderr that it waits; then fails with a clear message.
    """
    validate_box_name(name)
    if timeout is None:
        timeout = lock_timeout_from_env()
    lock_dir = make_private_dir(orch_home() / "locks")
    path = lock_dir / f"{name}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            holder = _lock_holder(path)
            if time.monotonic() >= deadline:
                raise OrchError(
                    f"box {name} is busy: another orch command{holder} is working on it",
                    hint="wait for it to finish, then retry",
                )
            if not told:
                print(
                    f"orch: box {name} is busy (another orch command{holder}); "
                    f"waiting up to {timeout:g}s",
                    file=sys.stderr,
                )
                told = True
            time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield path
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def _lock_holder(path: Path) -> str:
    """The holder as " (pid N)", with what its box record says it is doing."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(path.read_text().strip() or "0")
        if pid:
            return f" (pid {pid}{_holder_doing(path.stem, pid)})"
    return ""


def _holder_doing(name: str, pid: int) -> str:
    with contextlib.suppress(OSError, ValueError, OrchError):
        runner = load_box(name).runner or {}
        if runner.get("pid") == pid:
            what = f": orch {runner.get('command', '?')}"
            if runner.get("terraform_pid"):
                what += f", terraform {runner.get('terraform')} pid {runner['terraform_pid']}"
            return what
    return ""
