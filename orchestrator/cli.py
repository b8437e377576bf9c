"""Entry point: `orch ARGS`, with every expected failure as one line on stderr and a status.

Every command line goes to the click group in orchestrator/click_group.py, which imports a
sub-command's module only when that command runs (commands/registry.py).
"""

from __future__ import annotations

import atexit
import gc
import sys

from orchestrator.errors import EXIT_FAILURE, EXIT_INTERRUPTED, OrchError


def entry() -> None:
    """The `orch` executable (and `python -m orchestrator`).

    The cyclic garbage collector stays off while the command's modules load: they make tens of
    thousands of long-lived objects (classes, functions, catalog records) and no garbage worth
    a collection. Once the command is loaded, click_group.LazyGroup freezes them
    (`gc.freeze()`: later collections skip them) and turns the collector on. At exit they are
    frozen again, so the interpreter's final collection does not walk them one last time.
    Together about 15 ms of `orch plan`'s 110 (benchmarks/startup.py)."""
    gc.disable()
    atexit.register(gc.freeze)  # registered first, so it runs after every other exit handler
    main(collector_paused=True)


def main(argv: list[str] | None = None, collector_paused: bool = False) -> None:
    """Run the CLI; every expected failure becomes one line on stderr and an exit code
    (SystemExit: callers in the same process, such as tests, carry on). `collector_paused`:
    the garbage collector is off for start-up (`entry`), and the command turns it back on."""
    args = list(sys.argv[1:] if argv is None else argv)
    from orchestrator.textui import tolerate_narrow_encodings

    tolerate_narrow_encodings()  # an ASCII stdout gets "?" for what it cannot encode
    try:
        from orchestrator.click_group import run_click

        status = run_click(args, collector_paused)
        sys.stdout.flush()  # a failed write (a full disk, a closed pipe) is reported here
    except OrchError as exc:  # its text may carry a cloud's or a box's words: escaped
        from orchestrator.check.untrusted import printable

        _say(f"orch: error: {printable(exc.one_line(), limit=None)}")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _say("orch: interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        _quiet_stdout()
        sys.exit(0)
    except OSError as exc:  # e.g. stdout on a full disk: one line, not a traceback
        _say(f"orch: error: {exc.strerror or exc}")
        sys.exit(EXIT_FAILURE)
    if status:
        sys.exit(status)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _quiet_stdout() -> None:
    """The reader left (`| head`): what is still buffered for stdout goes nowhere, so that the
    interpreter's final flush does not print a second error."""
    import contextlib
    import os

    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
