"""How long `orch pool reconcile` spends probing ready boxes that do not answer over SSH.

Reconcile probes each ready box with `ssh BOX true` (orchestrator/pool/health.py: 20 s a try,
tried again for 20 s). The probes run at once, up to 8 together; this prints the time of N
probes one after another (as reconcile did before) against the same N probes at once, with the
real OpenSSH client against loopback stand-ins of a box that does not answer:

- `silent`: a listener that accepts the connection and never sends the SSH banner (a hung
  sshd, a box whose kernel still answers);
- `refused`: a closed port (the box is up, its sshd is not).

    .venv/bin/python benchmarks/pool_probes.py [--boxes 3] [--kind silent|refused]

Needs only `ssh`. Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.check.transport import SshTransport  # noqa: E402
from orchestrator.pool import health  # noqa: E402


@contextmanager
def unanswering_port(kind: str) -> Iterator[int]:
    """A loopback port where an SSH client gets no answer: `silent` or `refused`."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    if kind == "refused":
        listener.close()  # nothing listens there now
        yield port
        return
    listener.listen(64)  # the kernel completes each handshake; nobody ever reads or writes
    try:
        yield port
    finally:
        listener.close()


def transports(port: int, count: int, folder: Path) -> dict[str, SshTransport]:
    config = folder / "ssh_config"
    config.write_text("")  # none of this user's own Host blocks
    key = folder / "id_ed25519"
    key.write_text("")
    key.chmod(0o600)
    return {
        f"box-{n}": SshTransport(
            host="127.0.0.1",
            user="ubuntu",
            key_path=key,
            known_hosts_path=folder / "known_hosts",
            ssh_config=str(config),
            port=port,
        )
        for n in range(count)
    }


def timed(work) -> tuple[float, object]:  # noqa: ANN001 - a callable
    start = time.monotonic()
    result = work()
    return time.monotonic() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boxes", type=int, default=3, help="boxes that do not answer (1-8)")
    parser.add_argument("--kind", choices=("silent", "refused"), default="silent")
    args = parser.parse_args()
    if not 1 <= args.boxes <= health.PROBES_AT_ONCE:
        parser.error(f"--boxes must be 1 to {health.PROBES_AT_ONCE}")
    if shutil.which("ssh") is None:
        raise SystemExit("needs the OpenSSH client (ssh)")
    with tempfile.TemporaryDirectory() as folder, unanswering_port(args.kind) as port:
        boxes = transports(port, args.boxes, Path(folder))
        serial_s, serial = timed(lambda: [health.probe(t) for t in boxes.values()])
        at_once_s, at_once = timed(lambda: health.probe_all(boxes))
    if not all(serial) or len(at_once) != args.boxes:  # type: ignore[arg-type]
        raise SystemExit(f"a probe answered: {serial} {at_once}")
    print(f"{args.boxes} ready boxes that do not answer ({args.kind}); probe: ssh true, "
          f"{health.PROBE_TIMEOUT_S} s a try, retried for {health.PROBE_TIMEOUT_S} s; "
          f"nproc {os.cpu_count()}")  # fmt: skip
    print(f"  one after another   {serial_s:7.1f} s")
    print(f"  at once (reconcile) {at_once_s:7.1f} s   ({serial_s / at_once_s:.1f}x faster)")
    print(f"  one box's reason: {next(iter(at_once.values()))}")  # type: ignore[union-attr]


if __name__ == "__main__":
    main()
