"""The checks a job file's value gets at loading where its schema cannot say the rule: a
duration's range (durations are text, "40d"), run.env's reserved names, box.tags' reserved
prefixes, and the validators of the model and GPU names, box name, SSH blocks, S3 URLs, subnet id,
pool name and paths on the box. Each applies the rule the option's own check applies once the
options are parsed (the same constants or the same function), so that the file's error names
its file, line and key rather than a flag the user did not type (the flag's name is taken out
of the validator's message).

A check takes the key's value and returns None, or (the path below the key, message).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.durations import duration_range, parse_seconds
from orchestrator.errors import UsageError

Problem = tuple[tuple[Any, ...], str] | None
Check = Callable[[Any], Problem]


def _seconds(value: Any) -> float:
    # The schema let only the one duration format through, with its unit.
    return parse_seconds(str(value), "duration", allow_zero=True)


def duration_within(low: float, high: float) -> Check:
    """A duration from `low` to `high` seconds (commands/check_options.py's `bounded`)."""

    def check(value: Any) -> Problem:
        if not low <= _seconds(value) <= high:
            span = duration_range(low, high)
            return (), f"{value!r} is not {span}"
        return None

    return check


def positive_duration(value: Any) -> Problem:
    """--deadline: any positive duration (selection_options.py reads it with parse_hours)."""
    return ((), f"{value!r} is zero: give a positive duration") if _seconds(value) == 0 else None


def box_lifetime(value: Any) -> Problem:
    """box.ttl: `none`, or a lifetime provision/inputs.py's parse_ttl takes (1m to 30d)."""
    from orchestrator.provision import inputs

    if inputs.no_expiry(value):
        return None
    low, high = inputs.MIN_TTL.total_seconds(), inputs.MAX_TTL.total_seconds()
    return duration_within(low, high)(value)


def environment_names(names: list[str]) -> Problem:
    """run.env: names the job may be given (run/spec.py's parse_env, on NAME= so that the
    value, read from the environment only at run time, is neither needed nor shown)."""
    from orchestrator.run.spec import parse_env

    for index, name in enumerate(names):
        try:
            parse_env([f"{name}="], environ={})
        except UsageError as exc:
            return (index,), exc.message.removeprefix(f"--env {name}: ")
    return None


def box_tags(tags: dict[str, str]) -> Problem:
    """box.tags: keys without `=` (a key becomes KEY=VALUE for --tag) and the rules of
    provision/inputs.py's check_tags (reserved prefixes, lengths)."""
    from orchestrator.provision import inputs

    for key, text in tags.items():
        if "=" in key:
            return (key,), "a tag key cannot hold '='"
        try:
            inputs.check_tags({key: text})
        except UsageError as exc:
            return (key,), exc.message.removeprefix("--tag ")
    return None


def _refused(where: tuple[Any, ...], flag: str, check: Callable[..., Any], *args: Any) -> Problem:
    """(where, the refusal's line without `flag`) when check(*args) refuses; else None."""
    try:
        check(*args)
    except UsageError as exc:
        return where, without_flag(exc, flag)
    return None


def without_flag(exc: UsageError, flag: str) -> str:
    """The error's one line with the first `flag: ` or `flag ` (the option's name) taken out."""
    text = exc.one_line()
    for form in (f"{flag}: ", f"{flag} ") if flag else ():
        if form in text:
            return text.replace(form, "", 1)
    return text


def _each(flag: str, check: Callable[..., Any], *more: Any) -> Check:
    """A list key whose every item passes check(item, *more)."""

    def check_all(values: list[Any]) -> Problem:
        for index, value in enumerate(values):
            problem = _refused((index,), flag, check, value, *more)
            if problem is not None:
                return problem
        return None

    return check_all


def box_name(value: str) -> Problem:
    """box.name: provision/boxes.py's validate_box_name (--name)."""
    from orchestrator.provision.boxes import validate_box_name

    return _refused((), "", validate_box_name, value)


def ssh_blocks(values: list[str]) -> Problem:
    """box.ssh_cidr: each an IPv4 block (provision/inputs.py's normalise_cidrs, --ssh-cidr).
    How wide they are together is judged once the command line is read (--allow-world-ssh
    may allow it): jobfile/command.py's check_ssh_reach."""
    from orchestrator.provision import inputs

    return _each("--ssh-cidr", lambda text: inputs.normalise_cidrs([text], True))(values)


def state_url(value: str) -> Problem:
    """box.state: provision/state_backend.py's parse_state_url (--state)."""
    from orchestrator.provision.state_backend import parse_state_url

    return _refused((), "--state", parse_state_url, value)


def subnet_id(value: str) -> Problem:
    """box.subnet_id: refused when every registered cloud's rule refuses it (the plan picks
    the cloud later; clouds/registry.py's subnet_id_refusal)."""
    from orchestrator.clouds.registry import subnet_id_refusal

    refusal = subnet_id_refusal(value)
    return None if refusal is None else ((), without_flag(refusal, "--subnet-id"))


def checkpoint_store(value: str) -> Problem:
    """checkpoint.store: run/spec.py's parse_store (--store)."""
    from orchestrator.run.spec import parse_store

    return _refused((), "--store", parse_store, value)


def checkpoint_dir(value: str) -> Problem:
    """checkpoint.dir: a path inside the working directory (run/spec.py's relative_box_path)."""
    from orchestrator.run.spec import relative_box_path

    return _refused((), "--checkpoint-dir", relative_box_path, value, "--checkpoint-dir")


def fetch_paths(values: list[str]) -> Problem:
    """run.fetch: each a path inside the working directory (relative_box_path, --fetch)."""
    from orchestrator.run.spec import relative_box_path

    return _each("--fetch", relative_box_path, "--fetch")(values)


def exclude_patterns(values: list[str]) -> Problem:
    """run.exclude: each an rsync pattern (run/spec.py's check_pattern, --exclude)."""
    from orchestrator.run.spec import check_pattern

    return _each("--exclude", check_pattern, "--exclude")(values)


def pool_name(value: str) -> Problem:
    """pool.name: pool/record.py's validate_pool_name (--pool)."""
    from orchestrator.pool.record import validate_pool_name

    return _refused((), "", validate_pool_name, value)


def pool_store(value: str) -> Problem:
    """pool.store: pool/store.py's check_store_url (--pool-store)."""
    from orchestrator.pool.store import check_store_url

    return _refused((), "", check_store_url, value)


def model_name(value: str) -> Problem:
    """model: a catalog model or alias (catalog/loader.py's find_model, as --model)."""
    from orchestrator.catalog import find_model

    return _refused((), "", find_model, value)


def gpu_name(value: str) -> Problem:
    """resources.gpu: a catalog GPU (catalog/gpu_names.py's resolve_gpu, as --gpu)."""
    from orchestrator.catalog import load_gpus
    from orchestrator.catalog.gpu_names import resolve_gpu

    return _refused((), "--gpu", resolve_gpu, value, load_gpus())


def throughput_gpus(rates: dict[str, float]) -> Problem:
    """resources.throughput: each key a catalog GPU (selection_options.py's parse_throughput,
    given the GPU=RATE that --throughput takes)."""
    from orchestrator.commands.selection_options import parse_throughput

    for name, rate in rates.items():
        problem = _refused((name,), "--throughput", parse_throughput, (f"{name}={rate}",))
        if problem is not None:
            return problem
    return None
