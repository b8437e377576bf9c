"""The click side of the job file: `-f FILE` on plan, up and run, found before parsing.

`JobFileCommand.make_context` reads the command line once with click's own parser (which
options were typed), loads the job file (`-f FILE`, else ./orch.yaml when it exists) and
hands its values to click as the command's `default_map`: every value then goes through the
option's own type, range and checks, and a flag on the command line overrides the file.
Keys that would contradict the command line's choice are left out: with `--plan` the file's
model, job and resources; with `--box` or `--pool` also its box (and pool) settings; with any
model source on the command line the file's model source; with the job's length in one form on
the command line (--samples, or --epochs/--dataset-size) the file's other form. What the
file's values break together with the typed ones (a checkpoint folder without a store, ...) is
refused there, naming the file's line (jobfile/pairs.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from orchestrator.jobfile import JOB_FILE
from orchestrator.jobfile.pairs import MODEL_SOURCES, check_pairs

F = TypeVar("F", bound=Callable[..., Any])

META = "orch.job_file"
# The job's length, in one of two forms: --samples, or --epochs with --dataset-size.
LENGTH_FORMS = (("samples",), ("epochs", "dataset_size"))


FILE_FLAGS = ("-f", "--file", "job_file")
FILE_SETTINGS: dict[str, Any] = {
    "type": click.Path(dir_okay=False),
    "expose_value": False,  # read before parsing, by JobFileCommand
    "metavar": "FILE",
    "help": f"Job file (default: ./{JOB_FILE} when present); flags override it.",
}


def job_file_param() -> click.Option:
    return click.Option(list(FILE_FLAGS), **FILE_SETTINGS)


def job_file_option(func: F) -> F:
    """`-f FILE` on a decorated click command (use with cls=JobFileCommand)."""
    return click.option(*FILE_FLAGS, **FILE_SETTINGS)(func)


class JobFileCommand(click.Command):
    """A command whose option defaults come from the job file, when there is one."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        loaded = None
        # Resilient parsing is shell completion: it needs no values (and must not fail on
        # a job file with an error, or one naming a variable this shell has not set).
        if "default_map" not in extra and not extra.get("resilient_parsing"):
            loaded = self._load(info_name, args, parent)
            if loaded is not None:
                extra["default_map"] = loaded["defaults"]
        ctx = super().make_context(info_name, args, parent, **extra)
        if loaded is not None:
            ctx.meta[META] = loaded
        return ctx

    def _load(
        self, info_name: str | None, args: list[str], parent: click.Context | None
    ) -> dict[str, Any] | None:
        typed = self._typed(info_name, args, parent)
        if typed is None or typed.get("help"):
            return None  # click reports the command line's own errors; --help needs no file
        path = typed.get("job_file")
        if path is None:
            if not os.path.isfile(JOB_FILE):
                return None
            path = JOB_FILE
        from orchestrator.jobfile.load import read_job_file

        job = read_job_file(str(path))
        defaults, settings = command_defaults(job, self.name or "", self._params(), typed)
        return {"job": job, "defaults": defaults, "settings": settings}

    def _typed(
        self, info_name: str | None, args: list[str], parent: click.Context | None
    ) -> dict[str, Any] | None:
        """The options typed on the command line, by parameter name (values unconverted)."""
        # The command's own settings: `run` stops at its first argument (CMD's words are not
        # options of orch).
        probe = click.Context(self, info_name=info_name, parent=parent, **self.context_settings)
        try:
            opts, _, _ = self.make_parser(probe).parse_args(args=list(args))
        except click.ClickException:
            return None
        return {name: value for name, value in opts.items() if value is not None}

    def _params(self) -> set[str]:
        return {p.name for p in self.params if p.name and isinstance(p, click.Option)}


def command_defaults(
    job: Any, command: str, params: set[str], typed_values: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(default_map, other settings) for `command` from the job file, given the options
    typed on the command line (by parameter, as typed). Settings: the file's `max_price`
    filter on up/run (where --max-price is not the filter) and `command` (run's argv).
    UsageError at the file's line where its values break a rule alone (SSH reach) or with the
    typed ones (jobfile/pairs.py)."""
    from orchestrator.jobfile.layout import BOX_SECTION, PLAN_SECTIONS
    from orchestrator.jobfile.load import option_value

    typed = set(typed_values)
    dropped = _dropped_sections(job, command, typed, PLAN_SECTIONS, BOX_SECTION)
    replaced = _replaced_by_command_line(typed)
    defaults: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    for param, (key, value) in job.values.items():
        section = key.path[0]
        # A spot bid goes with the box (kept with --plan), though it sits under resources.
        if param == "spot_bid" and "plan_path" in typed and BOX_SECTION not in dropped:
            section = BOX_SECTION
        if section in dropped or param in replaced:
            continue
        if param == "max_price" and command != "plan":
            settings["max_price"] = value  # up's --max-price is its old spot-bid spelling
            continue
        if param not in params:
            continue  # a key for another command (plan has no run.setup)
        defaults[param] = option_value(job, key, value)
    if command == "run" and "command" in job.data.get("run", {}):
        settings["command"] = job.command()
    check_ssh_reach(job, defaults, typed)
    check_pairs(job, defaults, typed_values)
    return defaults, settings


def check_ssh_reach(job: Any, defaults: dict[str, Any], typed: set[str]) -> None:
    """The file's ssh_cidr blocks judged together, as provision/inputs.py's normalise_cidrs
    judges --ssh-cidr (more than a /8 needs allow_world_ssh), once the command line is known:
    --allow-world-ssh typed allows them, --ssh-cidr typed replaces them. The error names the
    file's line, not a flag the user did not type (each block was checked at loading)."""
    if "ssh_cidrs" not in defaults or typed & {"ssh_cidrs", "allow_world_ssh"}:
        return
    if defaults.get("allow_world_ssh"):
        return
    from orchestrator.errors import UsageError
    from orchestrator.jobfile.checks import without_flag
    from orchestrator.provision.inputs import normalise_cidrs

    try:
        normalise_cidrs(list(defaults["ssh_cidrs"]), False)
    except UsageError as exc:
        raise job.error(("box", "ssh_cidr"), without_flag(exc, "--ssh-cidr")) from None


def _replaced_by_command_line(typed: set[str]) -> set[str]:
    """The file's keys that a choice typed on the command line replaces rather than conflicts
    with: its model source for any typed one, its length in one form for the other form."""
    replaced = set(MODEL_SOURCES) if typed & set(MODEL_SOURCES) else set()
    for form in LENGTH_FORMS:
        if typed & set(form):
            replaced |= {param for other in LENGTH_FORMS if other != form for param in other}
    return replaced


def _dropped_sections(
    job: Any, command: str, typed: set[str], plan_sections: frozenset[str], box: str
) -> set[str]:
    """The file's sections the command line's choice of box makes moot."""
    plan_keys = set(plan_sections) - {"resources"}
    if "plan_path" in typed:
        return plan_keys | {"resources", "pool"} if command == "run" else plan_keys | {"resources"}
    if command != "run":
        return set()
    if "box_name" in typed:
        return plan_keys | {"resources", box, "pool"}
    if "pool" in typed:
        return plan_keys | {"resources", box}
    model_typed = bool(typed & set(MODEL_SOURCES))
    if "pool" in job.data and not model_typed:
        return plan_keys | {"resources", box}  # the file's pool provides the box
    return {"pool"}


def loaded_job_file() -> dict[str, Any] | None:
    """What the running command took from a job file: {"job", "defaults", "settings"}."""
    ctx = click.get_current_context(silent=True)
    return None if ctx is None else ctx.meta.get(META)


def file_setting(name: str) -> Any:
    loaded = loaded_job_file()
    return None if loaded is None else loaded["settings"].get(name)
