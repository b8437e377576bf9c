"""Read `orch.yaml`, validate it against its schema, and give each command its option defaults.

Every error is one line that names the file, the line and the key:
`orch.yaml:12: resources.gpus: 'two' is not of type 'integer'` (exit 2). Values are checked
here by the schema, and by the options' own rules that a schema cannot say (a duration's range,
reserved names, a model name, a box name, a CIDR, a bucket URL, a subnet id: jobfile/checks.py,
which calls the flags' validators). SSH blocks wider than a /8 are judged once the command line
is read (--allow-world-ssh may allow them: jobfile/command.py), and so is what joins two keys
that a flag may give instead (checkpoint.dir with its store, one model source, a fallback with
spot recovery, a subnet id with the cloud: jobfile/pairs.py). The file's values reach the
commands as their options' defaults (click's default_map).
"""

from __future__ import annotations

import difflib
import hashlib
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import UsageError
from orchestrator.jobfile.layout import KEYS, Key, schema

MAX_BYTES = 1 << 20  # a job file is a few hundred bytes; a megabyte is not one
MAX_NODES = 100_000  # values, aliases expanded; a job file has about a hundred


@dataclass
class JobFile:
    """A validated job file: its values, where each key sits, and its digest."""

    path: Path
    shown: str  # the path as the user gave it (for messages)
    data: dict[str, Any]
    lines: dict[tuple[Any, ...], int]  # (section, key[, index]) -> 1-based line
    sha256: str
    values: dict[str, tuple[Key, Any]] = field(default_factory=dict)  # by param, as written

    def line_of(self, path: tuple[Any, ...]) -> int:
        while path and path not in self.lines:
            path = path[:-1]
        return self.lines.get(path, 1)

    def error(self, path: tuple[Any, ...], message: str) -> UsageError:
        where = _dotted(path)
        prefix = f"{self.shown}:{self.line_of(path)}: " + (f"{where}: " if where else "")
        return UsageError(prefix + message)

    def command(self) -> list[str] | None:
        """`run.command` as argv: a list as written, a string split as a shell would."""
        value = self.data.get("run", {}).get("command")
        if value is None:
            return None
        if isinstance(value, list):
            return [str(v) for v in value]
        import shlex

        try:
            return shlex.split(value)
        except ValueError as exc:
            raise self.error(("run", "command"), f"cannot split the command: {exc}") from None


def read_job_file(path: str) -> JobFile:
    """The job file at `path`, parsed and validated; UsageError (one line) otherwise."""
    if not path:  # Path("") is the current folder
        raise UsageError("-f: the job file's name is empty")
    target = Path(path)
    try:
        if target.is_dir():
            raise UsageError(f"job file {path} is a directory")
        with target.open("rb") as handle:  # no more than that: `-f` may name a 10 GB file
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read job file {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise UsageError(f"job file {path} is larger than {MAX_BYTES >> 20} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    data, lines = _parse(text, path)
    job = JobFile(target, path, data, lines, hashlib.sha256(raw).hexdigest())
    _validate(job)
    job.values = {key.param: (key, value) for key, value in _present(job.data)}
    return job


def _parse(text: str, shown: str) -> tuple[dict[str, Any], dict[tuple[Any, ...], int]]:
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise UsageError(f"{shown}:{line}: not valid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{shown}: not valid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:  # PyYAML composes nested collections by recursion
        raise UsageError(f"{shown}: not valid YAML: nested too deeply") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        line = node.start_mark.line + 1 if node is not None else 1
        raise UsageError(f"{shown}:{line}: a job file is a mapping of keys (model:, job:, ...)")
    index = _LineIndex(shown)
    index.walk(node, ())
    return data, index.lines


@dataclass
class _LineIndex:
    """Each key's line, from one walk of the composed YAML. Refuses a key written twice (YAML
    would keep the last), an alias inside its own anchor (`&a [*a]`: a value without end) and
    more than MAX_NODES values once aliases are expanded (aliases of aliases grow a small file
    into billions of values), before anything walks the loaded data."""

    shown: str
    lines: dict[tuple[Any, ...], int] = field(default_factory=dict)
    count: int = 0
    inside: set[int] = field(default_factory=set)  # the collections being walked (by id)

    def walk(self, node: Any, path: tuple[Any, ...]) -> None:
        import yaml

        self.lines.setdefault(path, node.start_mark.line + 1)
        self.count += 1
        if id(node) in self.inside:
            raise self._error(path, "an alias inside its own anchor")
        if self.count > MAX_NODES:  # named by its top-level key: deeper lines are the anchors'
            raise self._error(path[:1], f"more than {MAX_NODES:,} values with aliases expanded")
        if isinstance(node, yaml.MappingNode):
            self.inside.add(id(node))
            seen: set[Any] = set()
            for key_node, value_node in node.value:
                key = _key(key_node)
                where = (*path, key)
                if key in seen:
                    self.lines[where] = key_node.start_mark.line + 1
                    raise self._error(where, "key given twice")
                seen.add(key)
                self.lines[where] = key_node.start_mark.line + 1
                self.walk(value_node, where)
            self.inside.discard(id(node))
        elif isinstance(node, yaml.SequenceNode):
            self.inside.add(id(node))
            for index, item in enumerate(node.value):
                self.walk(item, (*path, index))
            self.inside.discard(id(node))

    def _error(self, path: tuple[Any, ...], message: str) -> UsageError:
        return UsageError(f"{self.shown}:{self.lines.get(path, 1)}: {_dotted(path)}: {message}")


def _key(node: Any) -> Any:
    """A key as the loaded data has it (`1:` is the number 1, `~:` None), so that its line is
    found and `1:` with `0x1:` is a key given twice."""
    import yaml

    try:
        return yaml.constructor.SafeConstructor().construct_object(node)
    except yaml.YAMLError:  # `<<` (a merge) has no value of its own
        return node.value


def _dotted(path: tuple[Any, ...]) -> str:
    """`run.env[0]`: a key's path as the messages write it."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _validate(job: JobFile) -> None:
    from jsonschema import Draft202012Validator

    errors = list(Draft202012Validator(schema()).iter_errors(job.data))
    if errors:
        first = min(errors, key=lambda e: (job.line_of(tuple(e.absolute_path)), len(e.path)))
        raise _explain(job, first)
    for path, value in _walk(job.data, ()):
        # JSON Schema's minimum/maximum let NaN through (every comparison with it is false).
        if isinstance(value, float) and not math.isfinite(value):
            raise job.error(path, f"{value} is not a finite number")
        # A command line cannot hold a NUL byte, so the options' checks never meet one (and
        # a path with one is a ValueError in every os call).
        if any(isinstance(text, str) and "\0" in text for text in (value, *path[-1:])):
            raise job.error(path, "a NUL byte (\\0) in a key or value")
    for key, value in _present(job.data):  # the options' rules the schema cannot say
        problem = key.check(value) if key.check is not None else None
        if problem is not None:
            raise job.error((*key.path, *problem[0]), problem[1])


def _explain(job: JobFile, error: Any) -> UsageError:
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties":
        known = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(known), key=lambda k: job.line_of((*path, k)))
        name = unknown[0]
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(known)}"
        return job.error((*path, name), f"unknown key ({hint})")
    if error.validator == "pattern" and "[smhd]" in error.schema.get("pattern", ""):
        return job.error(path, f"{error.instance!r} is not a duration (30s, 10m, 2h, 1d)")
    if error.validator in ("maxItems", "maxProperties"):  # not the whole value: a long line
        return job.error(path, f"more than {error.validator_value} entries")
    if path[:2] == ("run", "env"):  # what is written there is not shown: it may be a secret
        what = "an environment variable name" if len(path) > 2 else "a list of variable names"
        return job.error(path, f"not {what} (names only: values are read at run time)")
    if error.validator == "anyOf" and path == ("box", "ttl"):
        return job.error(path, f"{error.instance!r} is not a duration (30m, 2h, 1d) or none")
    if error.validator == "anyOf" and path == ("job", "cuda_context_gib"):
        return job.error(path, f"{error.instance!r} is not GiB from 0 to 16, or box:NAME")
    message = " ".join(error.message.split())
    if len(message) > 200:
        message = message[:200] + "..."
    return job.error(path, message)


def _walk(value: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, (*path, index))


def _present(data: dict[str, Any]) -> Iterator[tuple[Key, Any]]:
    for key in KEYS:
        value: Any = data
        for part in key.path:
            if not isinstance(value, dict) or part not in value:
                break
            value = value[part]
        else:
            if value is not None:
                yield key, value


def option_value(job: JobFile, key: Key, value: Any) -> Any:
    """The value the command's option gets from the file's `value`."""
    if key.param == "env":
        return tuple(_environment_pair(job, index, name) for index, name in enumerate(value))
    if key.to_option is not None:
        return key.to_option(value, str(job.path.parent))
    return value


def _environment_pair(job: JobFile, index: int, name: str) -> str:
    """NAME=value from this process's environment: the file names variables, never values."""
    if name not in os.environ:
        raise job.error(("run", "env", index), f"{name} is not set in the environment")
    return f"{name}={os.environ[name]}"
