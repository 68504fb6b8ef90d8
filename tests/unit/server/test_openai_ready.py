"""Whether an OpenAI-compatible server is up, as the level loop asks it (perfkit/server/openai.py): a
server that serves one request at a time may leave its /v1/models probe waiting behind the generation
in flight; a port that takes the connection and answers late is busy, one that refuses it is gone."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from perfkit.server.openai import OpenAIServer


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a server busy with the request before)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    sock.close()


def test_a_server_that_takes_the_probe_and_answers_late_is_busy_not_gone(silent_port: int):
    assert OpenAIServer("127.0.0.1", silent_port).is_ready() is True


def test_a_port_that_refuses_the_connection_is_gone():
    with socket.socket() as s:  # a port just freed: nothing listens on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert OpenAIServer("127.0.0.1", port).is_ready() is False
