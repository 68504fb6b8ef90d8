"""The compiled HTTP/1.1 sender (perfkit/loadgen/_native.c): built by the install, chosen where it
can carry a run, and holding the same accounting as the Python sender against the real server.

Faults (resets, stalls, outages, restarts, idle reaping) are in tests/test_faults.py, which runs
every case on both senders; here: the choice of engine, drops past max outstanding, HTTP errors
with the server's message, a response perfkit cannot parse, and several payloads taken in turn.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from perfkit.loadgen import (
    Engine,
    EngineConfig,
    LoadGenerator,
    ModelIO,
    http_payload,
    make_engine,
    native_available,
    synthetic_tensors,
)
from perfkit.loadgen._native_engine import NATIVE_IMPORT_ERROR, NativeEngine
from perfkit.recorder import concat
from perfkit.records import STATUS_DROPPED, STATUS_PROTOCOL, LoadLevel, Samples, TlsSpec
from perfkit.schedule import due_times
from tests.conftest import require

SENDERS = ("native", "http1")


def _need(sender: str) -> None:
    if sender == "native":
        require("perfkit's compiled sender", native_available(), f"pip install -e . with gcc: {NATIVE_IMPORT_ERROR}")


def _payload(server, model: str) -> bytes:
    io = ModelIO.from_server(server.model_metadata(model), server.model_config(model))
    tensors = synthetic_tensors(io, mode="random", batch_size=1, shapes={}, string_length=1, seed=0)
    return http_payload(io, tensors, server.endpoints.http_url)


def _wrong_model(server, model: str) -> bytes:
    io = ModelIO.from_server(server.model_metadata(model), server.model_config(model))
    tensors = synthetic_tensors(io, mode="zero", batch_size=1, shapes={}, string_length=1, seed=0)
    wrong = ModelIO("no_such_model", "", io.max_batch_size, io.inputs, io.outputs)
    return http_payload(wrong, tensors, server.endpoints.http_url)


def _hostport(url: str) -> tuple[str, int]:
    host, port = url.rsplit(":", 1)
    return host, int(port)


def _until(gen: LoadGenerator, parts: list[Samples], done: Callable[[Samples], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        parts.append(gen.drain())
        if done(concat(parts)):
            return
        time.sleep(0.02)  # polling the engine's records between drains
    raise AssertionError(f"load did not progress: {concat(parts).status.tolist()[-20:]}")


def test_the_compiled_sender_carries_plain_http_of_one_model(monkeypatch):
    _need("native")
    cfg = EngineConfig("http", "127.0.0.1", 1, (b"x",))
    engine = make_engine(cfg)
    try:
        assert isinstance(engine, NativeEngine)
    finally:
        engine.close()
    monkeypatch.setenv("PERFKIT_SENDER", "python")
    python = make_engine(cfg)
    try:
        assert isinstance(python, Engine)
    finally:
        python.close()
    monkeypatch.delenv("PERFKIT_SENDER")
    others = [
        EngineConfig("http", "127.0.0.1", 1, (b"x",), transport="http1"),
        EngineConfig("grpc", "127.0.0.1", 1, (b"x",)),
        EngineConfig("http", "127.0.0.1", 1, (b"x",), tls=TlsSpec()),
        EngineConfig("http", "127.0.0.1", 1, (b"x",), mix_payloads=((b"x",), (b"y",)), mix_weights=(1, 1)),
    ]
    for other in others:
        engine = make_engine(other)
        try:
            assert isinstance(engine, Engine), other
        finally:
            engine.close()


@pytest.mark.parametrize("sender", SENDERS)
def test_open_loop_drops_past_max_outstanding(triton, sender):
    _need(sender)
    # sleeper takes 10 ms a batch: at 400 req/s with at most 2 in flight most requests are dropped,
    # each one recorded (unsent, with the reason), and every due time of the schedule has one record.
    host, port = _hostport(triton.endpoints.http_url)
    cfg = EngineConfig("http", host, port, (_payload(triton, "sleeper"),), transport=sender, seed=5, max_outstanding=2)
    level = LoadLevel("request_rate", 400, "poisson")
    parts: list[Samples] = []
    with LoadGenerator(cfg) as gen:
        t0 = gen.start(level)
        _until(gen, parts, lambda s: int((s.status == 0).sum()) >= 10 and int((s.status == STATUS_DROPPED).sum()) >= 10)
        parts.append(gen.stop(5.0))
    s = concat(parts)
    dropped = s.status == STATUS_DROPPED
    assert (s.sent_ns[dropped] == -1).all()
    assert "2 requests already in flight" in s.error_examples[STATUS_DROPPED]
    assert set(np.unique(s.status).tolist()) <= {0, STATUS_DROPPED}
    dues = due_times(level, seed=5)
    assert sorted(s.due_ns.tolist()) == [t0 + next(dues) for _ in range(len(s))]
    sent = s.sent_ns[~dropped]
    assert (sent >= s.due_ns[~dropped]).all() and (s.done_ns[~dropped] > sent).all()


@pytest.mark.parametrize("sender", SENDERS)
def test_payloads_are_taken_in_turn_and_errors_keep_the_servers_message(triton, sender):
    _need(sender)
    # Two payloads, one for a model the server does not have: concurrency 1 takes them in turn,
    # so the records alternate success and the server's error, whose message is kept.
    host, port = _hostport(triton.endpoints.http_url)
    payloads = (_payload(triton, "identity"), _wrong_model(triton, "identity"))
    cfg = EngineConfig("http", host, port, payloads, transport=sender)
    parts: list[Samples] = []
    with LoadGenerator(cfg) as gen:
        gen.start(LoadLevel("concurrency", 1))
        _until(gen, parts, lambda s: len(s) >= 20)
        parts.append(gen.stop(5.0))
    s = concat(parts)
    order = np.argsort(s.sent_ns)
    status = s.status[order]
    assert (status[0::2] == 0).all(), status[:10]
    errors = status[1::2]
    assert len(errors) and (errors == errors[0]).all() and 400 <= int(errors[0]) < 500
    assert "no_such_model" in s.error_examples[int(errors[0])]
    assert (s.due_ns == -1).all()


class _NoLengthServer:
    """A peer that answers every request with a status line and no Content-Length (not HTTP a
    client can frame), to show such a response ends as a protocol error, not a hang."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the client resets a connection it cannot use
            while conn.recv(65536):
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Other: 1\r\n\r\n")

    def close(self) -> None:
        self._stop = True
        self._thread.join(2)
        self.sock.close()


@pytest.fixture
def no_length_server() -> Iterator[_NoLengthServer]:
    server = _NoLengthServer()
    yield server
    server.close()


@pytest.mark.parametrize("sender", SENDERS)
def test_an_unframed_response_is_a_protocol_error(no_length_server, sender):
    _need(sender)
    cfg = EngineConfig("http", "127.0.0.1", no_length_server.port, (b"POST / HTTP/1.1\r\n\r\n",), transport=sender)
    parts: list[Samples] = []
    with LoadGenerator(cfg) as gen:
        gen.start(LoadLevel("concurrency", 2))
        _until(gen, parts, lambda s: int((s.status == STATUS_PROTOCOL).sum()) >= 4)
        parts.append(gen.stop(5.0))
    s = concat(parts)
    assert "HTTP/1.1 200 OK" in s.error_examples[STATUS_PROTOCOL]
    assert s.reconnects == 0  # perfkit closed those connections itself: not the peer's doing


@pytest.mark.parametrize("sender", SENDERS)
def test_image_sized_requests_complete(triton, sender):
    # 600 KB a request (the compiled sender splices requests this large from the payload's pages):
    # every one is answered and the server ran exactly those.
    _need(sender)
    host, port = _hostport(triton.endpoints.http_url)
    payload = _payload(triton, "image")
    assert len(payload) > 600_000
    cfg = EngineConfig("http", host, port, (payload,), transport=sender)
    before = _executed(triton, "image")
    parts: list[Samples] = []
    with LoadGenerator(cfg) as gen:
        gen.start(LoadLevel("concurrency", 3))
        _until(gen, parts, lambda s: len(s) >= 30)
        parts.append(gen.stop(5.0))
    s = concat(parts)
    assert (s.status == 0).all(), s.error_examples
    assert _executed(triton, "image") - before == len(s)


def _executed(server, model: str) -> int:
    stats = server.model_stats(model)["model_stats"][0]["inference_stats"]
    return int(stats["success"]["count"]) + int(stats["fail"]["count"])
