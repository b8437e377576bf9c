"""Loopback ports for the suite's servers, safe when pytest-xdist workers pick them at once.

A port picked free and closed can be taken by anything else before the server binds it: then
the server fails to start, or (worse) a health check is answered by another worker's server.
So a server started on a picked port is checked to be the one listening there
(`listens`), and started again on another port when it is not; and a port that must refuse
connections ("nobody there") stays bound, without listening, for as long as it is used
(`refused_port`), so nobody else can bind it meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column (include/net/tcp_states.h)
LOOPBACK_HEX = "0100007F"  # 127.0.0.1 as /proc/net/tcp writes it (little-endian hex)


def free_port() -> int:
    """A loopback port nothing is bound to now (the kernel's choice); see `listens`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port where every connection is refused while the block runs: it is bound
    but never listens. Without SO_REUSEADDR on it no other socket can bind the port (Linux
    refuses a second bind unless both sockets set SO_REUSEADDR, socket(7))."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` holds the socket listening on 127.0.0.1:`port` (proc(5):
    /proc/net/tcp names the listening socket's inode; /proc/PID/fd links to it)."""
    wanted = f"{LOOPBACK_HEX}:{port:04X}"
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == wanted and fields[3] == LISTEN:
            inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return False
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        names = os.listdir(fd_dir)
    except OSError:  # the process is gone
        return False
    for name in names:
        with contextlib.suppress(OSError):
            if os.readlink(fd_dir / name) in inodes:
                return True
    return False
