"""Ports nothing listens on, named by a node itself: the rendezvous of the all_reduce check
(check/allreduce.py) and of `orch run`'s torchrun (run/on_cluster.py) on node 0.

The node's kernel picks each port (bind to port 0: the ephemeral range,
/proc/sys/net/ipv4/ip_local_port_range), with every socket held until all are named, so the
ports differ from each other and from whatever listens there now. A fixed port or one derived
from the run id collides with anything else on the node that chose it (another run's store,
a job left behind), and the loser's torchrun fails to bind its store.
"""

from __future__ import annotations

from orchestrator.check.transport import SshTransport, Unreachable

MIN_PORT = 1024  # below: privileged, never the kernel's choice for an ephemeral bind
MAX_COUNT = 4

_PROBE = (
    "python3 -c 'import socket, sys; s = [socket.socket() for _ in range(int(sys.argv[1]))]; "
    '[x.bind(("", 0)) for x in s]; print(*(x.getsockname()[1] for x in s))\' {count}'
)


def free_ports(transport: SshTransport, count: int, timeout: float) -> tuple[int, ...] | None:
    """`count` distinct free ports on the node behind `transport`, or None when it cannot say
    (no python3, no answer, an answer that is not `count` distinct ports)."""
    if not 1 <= count <= MAX_COUNT:
        raise ValueError(f"ask for 1 to {MAX_COUNT} ports, not {count}")
    try:
        result = transport.run(_PROBE.format(count=count), timeout=min(timeout, 60.0))
    except Unreachable:
        return None
    return parse_ports(result.stdout, count) if result.exit_code == 0 else None


def parse_ports(text: str, count: int) -> tuple[int, ...] | None:
    """The probe's answer, checked: `count` distinct whole numbers from MIN_PORT to 65535."""
    words = text.split()
    if len(words) != count or not all(w.isdigit() and len(w) <= 5 for w in words):
        return None
    ports = tuple(int(w) for w in words)
    if len(set(ports)) != count or not all(MIN_PORT <= p <= 65535 for p in ports):
        return None
    return ports
