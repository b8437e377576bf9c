"""The rules that join two of the job file's keys, either of which a typed flag may give
instead: one model source; checkpoint.dir with checkpoint.store; recovery.fallback_on_demand
with recovery.spot; box.subnet_id with the cloud resources.cloud names.

They are judged once the command line is read (jobfile/command.py's command_defaults), on the
values the command takes: the file's (its default_map, what the command line's choices left of
it) and the typed flags'. Where the file gave the key that completes the conflict, the error is
`orch.yaml:LINE: key: reason` at that key, naming the other key (and its line) or the typed
flag; where both halves were typed, nothing is said here and the flags' own check says it as
it would without a file (sizing/resolve.py, run/spec.py, commands/run.py, the cloud's tfvars).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.errors import UsageError

MODEL_SOURCES = ("model", "hf_config", "params_m")


class _Halves:
    """Where each value the command takes comes from: typed (`typed`, by parameter, as typed)
    or the file (`defaults`, the file's values the command keeps)."""

    def __init__(self, job: Any, defaults: Mapping[str, Any], typed: Mapping[str, Any]):
        self.job, self.defaults, self.typed = job, defaults, typed

    def from_file(self, param: str) -> bool:
        return param in self.defaults and param not in self.typed

    def given(self, param: str) -> bool:
        return param in self.typed or param in self.defaults

    def line(self, param: str) -> int:
        return self.job.line_of(self.job.values[param][0].path)

    def key(self, param: str) -> str:
        from orchestrator.jobfile.layout import KEYS

        return next(k.dotted for k in KEYS if k.param == param)

    def error(self, param: str, message: str) -> UsageError:
        return self.job.error(self.job.values[param][0].path, message)


def flag(param: str) -> str:
    return "--" + param.replace("_", "-")


def check_pairs(job: Any, defaults: Mapping[str, Any], typed: Mapping[str, Any]) -> None:
    """UsageError at the file's line where the file completes a conflict of two keys."""
    halves = _Halves(job, defaults, typed)
    one_model_source(halves)
    checkpoint_with_store(halves)
    fallback_with_spot(halves)
    subnet_for_cloud(halves)


def one_model_source(halves: _Halves) -> None:
    """sizing/resolve.py's "give only one model source". A typed source replaces all of the
    file's (command.py), so two sources here are both the file's: the later one is named."""
    sources = sorted((p for p in MODEL_SOURCES if halves.from_file(p)), key=halves.line)
    if len(sources) > 1:
        first, second = sources[:2]
        raise halves.error(
            second,
            f"give only one model source: {halves.key(first)} (line {halves.line(first)})"
            " is given too",
        )


def checkpoint_with_store(halves: _Halves) -> None:
    """run/spec.py's "--checkpoint-dir and --store go together"."""
    for mine, other in (("checkpoint_dir", "store"), ("store", "checkpoint_dir")):
        if halves.from_file(mine) and not halves.given(other):
            raise halves.error(
                mine, f"goes with {halves.key(other)} (or {flag(other)}), which is not given"
            )


def fallback_with_spot(halves: _Halves) -> None:
    """commands/run.py's "--fallback-on-demand goes with --spot-recovery N", judged where run
    judges it: on a box the run creates (not with --box or a pool)."""
    typed, defaults = halves.typed, halves.defaults
    if typed.get("box_name") or typed.get("pool") or defaults.get("pool"):
        return
    if not (typed.get("fallback_on_demand") or halves.from_file("fallback_on_demand")):
        return
    spot: Any = typed.get("spot_recovery", defaults.get("spot_recovery"))
    try:
        if spot is not None and int(spot):
            return
    except (TypeError, ValueError):
        return  # click refuses what is not a number
    spot_key = halves.key("spot_recovery")
    if halves.from_file("fallback_on_demand"):
        if "spot_recovery" in typed:
            other = "--spot-recovery N, which is 0"
        elif halves.from_file("spot_recovery"):
            other = f"{spot_key} N, which is 0 (line {halves.line('spot_recovery')})"
        else:
            other = f"{spot_key} N (or --spot-recovery N), which is not given"
        raise halves.error("fallback_on_demand", f"goes with {other}")
    if halves.from_file("spot_recovery"):
        raise halves.error(
            "spot_recovery",
            "--fallback-on-demand goes with spot recovery of 1 or more, not 0",
        )


def subnet_for_cloud(halves: _Halves) -> None:
    """The chosen cloud's rule for a subnet id (its check_subnet_id; Aliyun takes none yet),
    before the plan and any cloud call. An id that no cloud takes is the id's own fault: the
    loader refuses the file's (checks.py), the flag's check a typed one."""
    from orchestrator.clouds.registry import cloud_subnet_refusal, subnet_id_refusal

    cloud = halves.typed.get("cloud", halves.defaults.get("cloud"))
    subnet = halves.typed.get("subnet_id", halves.defaults.get("subnet_id"))
    if not (isinstance(cloud, str) and isinstance(subnet, str)):
        return
    if not (halves.from_file("cloud") or halves.from_file("subnet_id")):
        return  # both typed
    refusal = cloud_subnet_refusal(cloud, subnet)
    if refusal is None or subnet_id_refusal(subnet) is not None:
        return
    reason = refusal.one_line().replace("--subnet-id", "a subnet id", 1)
    if halves.from_file("subnet_id"):
        if halves.from_file("cloud"):
            where = f"{halves.key('cloud')} is {cloud} (line {halves.line('cloud')})"
        else:
            where = f"--cloud is {cloud}"
        raise halves.error("subnet_id", f"{where}: {reason}")
    raise halves.error("cloud", f"{cloud}, with --subnet-id: {reason}")
