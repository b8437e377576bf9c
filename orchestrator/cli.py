"""Entry point: `orch ARGS`, with every expected failure as one line on stderr and a status.

`orch plan` and `orch estimate` on a plain command line run without importing click, about a
fifth of their run time (issue 10: start-up at most 3x bare Python): their options are data
(commands/option_spec.py) that commands/quick_parse.py reads. Everything else, --help and
every command line that parser declines included, goes to the click group in
orchestrator/click_group.py.
"""

from __future__ import annotations

import importlib
import os
import sys

from orchestrator.commands.quick_parse import parse_plain
from orchestrator.commands.registry import COMMANDS, JOB_FILE, JOB_FILE_COMMANDS, QUICK_COMMANDS
from orchestrator.errors import EXIT_FAILURE, EXIT_INTERRUPTED, OrchError

# Commands that only compute and print. Once their output is flushed nothing is left to do, so
# the process ends without the interpreter's teardown, which frees every object one by one:
# 10-20 ms, a sixth of `orch plan`'s run time.
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
    args = list(sys.argv[1:] if argv is None else argv)
    from orchestrator.textui import tolerate_narrow_encodings

    tolerate_narrow_encodings()  # an ASCII stdout gets "?" for what it cannot encode
    try:
        status = run_quick(args)
        if status is None:
            from orchestrator.click_group import run_click

            status = run_click(args)
    except OrchError as exc:
        _say(f"orch: error: {exc.one_line()}")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _say("orch: interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as exc:  # e.g. stdout on a full disk: one line, not a traceback
        _say(f"orch: error: {exc.strerror or exc}")
        sys.exit(EXIT_FAILURE)
    if status:
        sys.exit(status)


def run_quick(args: list[str]) -> int | None:
    """Run a QUICK_COMMANDS command without click; None when `args` need click (another
    command, --help, anything the quick parser declines)."""
    if not args or args[0] not in QUICK_COMMANDS:
        return None
    if args[0] in JOB_FILE_COMMANDS and os.path.exists(JOB_FILE):
        return None  # ./orch.yaml gives defaults: click's path reads it (orchestrator/jobfile)
    module_name, attribute, _ = COMMANDS[args[0]]
    command = getattr(importlib.import_module(module_name), attribute)
    parsed = parse_plain(command.options, args[1:])
    if parsed is None:
        return None
    command.run(parsed.given, **parsed.values)
    return 0


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


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
