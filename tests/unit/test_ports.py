"""tests/ports.py: which process listens on a port, and a port held refusing connections.

The suite's servers start on picked ports in two workers at once; these helpers are what
keeps one worker from taking, or talking to, another's server.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys

import pytest

from tests.ports import free_port, listens, refused_port

LISTEN_THEN_WAIT = (
    "import socket, sys; s = socket.create_server(('127.0.0.1', 0)); "
    "print(s.getsockname()[1], flush=True); sys.stdin.read()"
)


def test_listens_names_the_process_that_holds_the_listening_socket():
    child = subprocess.Popen(
        [sys.executable, "-c", LISTEN_THEN_WAIT],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        assert listens(child.pid, port)
        assert not listens(os.getpid(), port)  # someone else's server on that port
        assert not listens(child.pid, free_port())  # nothing listens there
    finally:
        child.communicate("")
    assert not listens(child.pid, port)  # gone


def test_a_refused_port_refuses_connections_and_cannot_be_taken_meanwhile():
    with refused_port() as port:
        with socket.socket() as client, pytest.raises(ConnectionRefusedError):
            client.connect(("127.0.0.1", port))
        with socket.socket() as rival:
            rival.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do
            with pytest.raises(OSError) as taken:
                rival.bind(("127.0.0.1", port))
            assert taken.value.errno == errno.EADDRINUSE
