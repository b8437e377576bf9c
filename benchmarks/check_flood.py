"""How long `orch check --json` takes, and how much it prints, when a box floods it.

The box is the real sshd on loopback of tests/e2e/sshbox.py, whose fake nvidia-smi prints 50 MB
of well-formed CSV rows (an A10G row repeated). Before the 1 MiB read cap this took 20.8 s under
`--timeout 20` and printed 157 MB of JSON (issue 9, item 14). Run:

    .venv/bin/python benchmarks/check_flood.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e import sshbox  # noqa: E402
from tests.e2e.test_check_ssh import make_candidate, save_box  # noqa: E402

ROW = b"0, NVIDIA A10G, 23028, 515.105.01, 0, 00000000:00:1E.0, GPU-9a9a6c50\n"


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["ORCH_HOME"] = str(Path(scratch) / "home")
        box = sshbox.make_sshbox(Path(scratch) / "sshd")
        try:
            box.serve_raw(ROW * (50_000_000 // len(ROW)))
            save_box(box, "flood", make_candidate("A10G", 1, 24))
            argv = [sys.executable, "-m", "orchestrator", "check", "flood", "--json"]
            argv += ["--timeout", "20", "--ssh-config", str(box.ssh_config)]
            started = time.monotonic()
            result = subprocess.run(argv, capture_output=True, cwd=ROOT, env=os.environ.copy())
            elapsed = time.monotonic() - started
        finally:
            box.stop()
    print(f"box output: 50.0 MB of CSV; exit {result.returncode}")
    print(f"orch check --json: {elapsed:.2f} s, {len(result.stdout)} bytes of JSON")


if __name__ == "__main__":
    main()
