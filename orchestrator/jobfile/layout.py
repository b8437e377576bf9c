"""Every key of `orch.yaml`: where it sits, which option of plan/up/run it sets, its schema.

A key sets the option of the same meaning on each command that has it (a command without the
option ignores the key: `plan` has no `run.setup`). Job and selection keys take their types,
choices and ranges from the `Option` records of the command line (commands/job_options.py,
commands/selection_options.py), so the file and the flags cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.commands.check_options import DURATION_RANGES
from orchestrator.commands.job_options import RUN_OPTIONS, SHAPE_OPTIONS
from orchestrator.commands.option_spec import Option
from orchestrator.commands.selection_options import SELECTION_OPTIONS
from orchestrator.jobfile import checks
from orchestrator.provision.inputs import MAX_TAGS
from orchestrator.run.spec import MAX_ENV, MAX_FETCH
from orchestrator.sizing import resolve

SCHEMA_ID = "https://github.com/orch/orch/docs/orch.schema.json"
# One duration format (orchestrator/durations.py); in the file a unit is always written.
DURATION = {"type": "string", "pattern": r"^\s*[0-9]{1,12}(\.[0-9]{1,9})?\s*[smhd]\s*$"}
ENV_NAME = {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"}
STRINGS = {"type": "array", "items": {"type": "string", "minLength": 1}}


@dataclass(frozen=True)
class Key:
    """One leaf of the file: `path` ("job", "batch"), the command parameter it sets, and its
    schema. `to_option(value, base)` turns the file's value into the option's (e.g. a mapping
    into KEY=VALUE strings); `base` is the job file's folder, for relative paths. `check`: the
    option's own rule where the schema cannot say it (jobfile/checks.py), run at loading."""

    path: tuple[str, ...]
    param: str
    schema: dict[str, Any]
    description: str = ""
    to_option: Callable[[Any, str], Any] | None = None
    check: checks.Check | None = None

    @property
    def dotted(self) -> str:
        return ".".join(self.path)


def _option_schema(option: Option) -> dict[str, Any]:
    if option.kind == "flag":
        schema: dict[str, Any] = {"type": "boolean"}
    elif option.choices:
        schema = {"enum": list(option.choices)}
    elif option.kind in ("int", "float"):
        schema = {"type": "integer" if option.kind == "int" else "number"}
        if option.minimum is not None:
            schema["exclusiveMinimum" if option.minimum_open else "minimum"] = option.minimum
        if option.maximum is not None:
            schema["maximum"] = option.maximum
    else:
        schema = {"type": "string", "minLength": 1}
    if option.multiple:
        schema = {"type": "array", "items": schema}
    return schema


def _flag_name(option: Option) -> str:
    return option.flags[-1].lstrip("-").replace("-", "_")


# The job's ranges that sizing/resolve.py checks (validate_job) once the options are parsed,
# by parameter: in the schema too, so that a value out of range in the file is an error that
# names the file, line and key rather than a flag the user did not type.
RANGES: dict[str, dict[str, float]] = {
    "batch": {"minimum": 1, "maximum": resolve.MAX_BATCH},
    "seq": {"minimum": 1, "maximum": resolve.MAX_SEQ},
    "target_seq": {"minimum": 1, "maximum": resolve.MAX_SEQ},
    "image_size": {"minimum": 1, "maximum": resolve.MAX_IMAGE},
    "lora_rank": {"minimum": 1, "maximum": resolve.MAX_LORA_RANK},
    "grad_accum": {"minimum": 1, "maximum": resolve.MAX_GRAD_ACCUM},
    "lora_dropout": {"minimum": 0, "exclusiveMaximum": 1},
    "gpus": {"minimum": 1, "maximum": resolve.MAX_GPUS},
    "params_m": {"minimum": resolve.MIN_PARAMS_M, "maximum": resolve.MAX_PARAMS_M},
}


def _ranged(param: str, schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with the parameter's range from RANGES (replacing the option's own bounds)."""
    if param not in RANGES:
        return schema
    bounds = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")
    return {**{k: v for k, v in schema.items() if k not in bounds}, **RANGES[param]}


# The flags' own rules, by parameter, of the keys built from the option declarations.
OPTION_CHECKS: dict[str, checks.Check] = {"gpu": checks.gpu_name}


def _from_options(section: str, options: tuple[Option, ...], skip: set[str]) -> list[Key]:
    return [
        Key(
            (section, _flag_name(o)),
            o.name,
            _ranged(o.name, _option_schema(o)),
            o.help or "",
            check=OPTION_CHECKS.get(o.name),
        )
        for o in options
        if o.name not in skip
    ]


def _relative_path(value: Any, base: str) -> Any:
    import os

    return value if os.path.isabs(value) else os.path.normpath(os.path.join(base, value))


def _pairs(value: dict[str, Any], _base: str) -> list[str]:
    return [f"{key}={item}" for key, item in value.items()]


def _as_text(value: Any, _base: str) -> str:
    return str(value)


def _negate(value: bool, _base: str) -> bool:
    return not value


MODEL_KEYS = [
    Key(
        ("model",),
        "model",
        {"type": "string", "minLength": 1},
        "Catalog model name or alias.",
        check=checks.model_name,
    ),
    Key(
        ("hf_config",),
        "hf_config",
        {"type": "string", "minLength": 1},
        "A Hugging Face config.json (relative to this file's folder).",
        _relative_path,
    ),
    Key(
        ("params_m",),
        "params_m",
        _ranged("params_m", {"type": "number"}),
        "Only a size in millions of parameters: a GPT-style guess.",
    ),
]

_SHAPE_SKIP = {"model", "hf_config", "params_m", "gpus", "cuda_context_gib"}
JOB_KEYS = [
    *_from_options("job", SHAPE_OPTIONS + RUN_OPTIONS, _SHAPE_SKIP),
    Key(
        ("job", "cuda_context_gib"),
        "cuda_context_gib",
        {
            "anyOf": [
                {"type": "number", "minimum": 0, "maximum": 16},  # as sizing/resolve.py
                {"type": "string", "pattern": "^box:"},
            ]
        },
        "CUDA context per GPU in GiB, or box:NAME.",
        _as_text,
    ),
]

_GPUS = next(o for o in SHAPE_OPTIONS if o.name == "gpus")
_SELECTION_SKIP = {"throughput", "deadline", "max_price", "nodes"}
_NODES = next(o for o in SELECTION_OPTIONS if o.name == "nodes")
RESOURCE_KEYS = [
    Key(("resources", "gpus"), "gpus", _ranged("gpus", {"type": "integer"}), _GPUS.help or ""),
    *_from_options("resources", SELECTION_OPTIONS, _SELECTION_SKIP),
    Key(
        ("resources", "max_price"),
        "max_price",
        {"type": "number", "exclusiveMinimum": 0},
        "Only boxes that cost at most this per hour, USD (a filter, on up and run too).",
    ),
    Key(
        ("resources", "spot_bid"),
        "spot_bid",
        {"type": "number", "exclusiveMinimum": 0},
        "Spot boxes: the most to pay per hour, USD (up, run).",
    ),
    Key(
        ("resources", "deadline"),
        "deadline",
        DURATION,
        "The job must finish within this.",
        check=checks.positive_duration,
    ),
    Key(
        ("resources", "nodes"),
        "nodes",
        {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 64}, {"const": "auto"}]},
        _NODES.help or "",
        _as_text,
    ),
    Key(
        ("resources", "throughput"),
        "throughput",
        {"type": "object", "additionalProperties": {"type": "number", "exclusiveMinimum": 0}},
        "Your measured samples/s per GPU, by GPU name.",
        _pairs,
        checks.throughput_gpus,
    ),
]

BOX_KEYS = [
    Key(
        ("box", "name"),
        "name",
        {"type": "string", "minLength": 1},
        "Box name (up, run).",
        check=checks.box_name,
    ),
    Key(
        ("box", "ttl"),
        "ttl",
        {"anyOf": [DURATION, {"const": "none"}]},
        "Box lifetime (default 12h); `none`: never expires (warned about).",
        check=checks.box_lifetime,
    ),
    Key(
        ("box", "ssh_cidr"),
        "ssh_cidrs",
        STRINGS,
        "IPv4 blocks allowed to SSH in.",
        check=checks.ssh_blocks,
    ),
    Key(("box", "allow_world_ssh"), "allow_world_ssh", {"type": "boolean"}),
    Key(
        ("box", "state"),
        "state_url",
        {"type": "string", "pattern": "^s3://"},
        "Remote state.",
        check=checks.state_url,
    ),
    Key(
        ("box", "tags"),
        "tags",
        {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": MAX_TAGS},
        "Extra tags.",
        _pairs,
        checks.box_tags,
    ),
    Key(
        ("box", "subnet_id"),
        "subnet_id",
        {"type": "string", "minLength": 1},
        check=checks.subnet_id,
    ),
    Key(("box", "ssh_alias"), "ssh_alias", {"type": "boolean"}, "Write `Host orch-NAME`."),
    Key(("box", "check"), "no_check", {"type": "boolean"}, "Check the GPUs (yes).", _negate),
    Key(("box", "check_timeout"), "check_timeout", DURATION, "How long the GPU check retries."),
    Key(("box", "via"), "via", {"enum": ["ssh", "ssm", "cloud-assistant"]}, "Check transport."),
]

RUN_KEYS = [
    Key(("run", "setup"), "setup", {"type": "string"}, "Shell line run before the command."),
    Key(
        ("run", "env"),
        "env",
        {"type": "array", "items": ENV_NAME, "maxItems": MAX_ENV},
        "Names of environment variables passed to the job (their values are read from the"
        " environment at run time, never stored).",
        check=checks.environment_names,
    ),
    Key(
        ("run", "workdir"),
        "workdir",
        {"type": "string", "minLength": 1},
        "Folder synced to the box (relative to this file's folder).",
        _relative_path,
    ),
    Key(
        ("run", "exclude"),
        "excludes",
        STRINGS,
        "rsync exclude patterns.",
        check=checks.exclude_patterns,
    ),
    Key(
        ("run", "fetch"),
        "fetch",
        {**STRINGS, "maxItems": MAX_FETCH},
        "Paths copied back at the end.",
        check=checks.fetch_paths,
    ),
    Key(("run", "keep"), "keep", {"type": "boolean"}, "Keep the box afterwards."),
    Key(
        ("run", "launcher"),
        "launcher",
        {"enum": ["auto", "torchrun", "none"]},
        "torchrun on every node, or none (ORCH_NODE_RANK, MASTER_ADDR, ... set); auto: torchrun"
        " with more than one GPU or node.",
    ),
    Key(("run", "rendezvous_timeout"), "rendezvous_timeout", DURATION, "torchrun join timeout."),
    Key(
        ("checkpoint", "dir"),
        "checkpoint_dir",
        {"type": "string", "minLength": 1},
        check=checks.checkpoint_dir,
    ),
    Key(
        ("checkpoint", "store"),
        "store",
        {"type": "string", "minLength": 1},
        "s3://bucket/p",
        check=checks.checkpoint_store,
    ),
    Key(("checkpoint", "interval"), "checkpoint_interval", DURATION),
    Key(("recovery", "spot"), "spot_recovery", {"type": "integer", "minimum": 0, "maximum": 100}),
    Key(("recovery", "fallback_on_demand"), "fallback_on_demand", {"type": "boolean"}),
    Key(("recovery", "watch_interval"), "watch_interval", DURATION),
    Key(("recovery", "ssh_lost_after"), "ssh_lost_after", DURATION),
    Key(
        ("pool", "name"),
        "pool",
        {"type": "string", "minLength": 1},
        "Run on a box leased here.",
        check=checks.pool_name,
    ),
    Key(
        ("pool", "store"),
        "pool_store",
        {"type": "string", "pattern": "^s3://"},
        check=checks.pool_store,
    ),
    Key(("pool", "wait"), "lease_wait", DURATION, "How long to wait for a free box."),
]


def _with_duration_ranges(keys: list[Key]) -> list[Key]:
    """Each duration key of an option with a range in DURATION_RANGES, checked against it."""
    return [
        replace(key, check=checks.duration_within(**DURATION_RANGES[key.param]))
        if key.param in DURATION_RANGES and key.check is None
        else key
        for key in keys
    ]


KEYS: tuple[Key, ...] = tuple(
    _with_duration_ranges([*MODEL_KEYS, *JOB_KEYS, *RESOURCE_KEYS, *BOX_KEYS, *RUN_KEYS])
)

# Not an option: the command `orch run` runs (its argv after `--` replaces it).
COMMAND_SCHEMA = {
    "anyOf": [
        {"type": "string", "minLength": 1},
        {"type": "array", "items": {"type": "string"}, "minItems": 1},
    ],
    "description": "The command `orch run` runs: a list of arguments, or a string split as a"
    " shell would (no shell runs it). Arguments after `--` replace it.",
}

# The keys that decide where a run's box comes from: the plan's and the box's.
PLAN_SECTIONS = frozenset({"model", "hf_config", "params_m", "job", "resources"})
BOX_SECTION = "box"


def schema() -> dict[str, Any]:
    """The JSON Schema of orch.yaml (draft 2020-12)."""
    sections: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {"version": {"const": 1, "description": "The file format: 1."}}
    for key in KEYS:
        entry = dict(key.schema)
        if key.description:
            entry["description"] = key.description
        if len(key.path) == 1:
            top[key.path[0]] = entry
        else:
            sections.setdefault(key.path[0], {})[key.path[1]] = entry
    sections["run"]["command"] = COMMAND_SCHEMA
    for name, properties in sections.items():
        top[name] = {"type": "object", "additionalProperties": False, "properties": properties}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "orch job file (orch.yaml)",
        "description": "A training job for `orch plan`, `orch up` and `orch run`; flags given on"
        " the command line override it.",
        "type": "object",
        "additionalProperties": False,
        "properties": top,
    }
