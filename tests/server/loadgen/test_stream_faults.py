"""The accounting invariant for streamed requests, held under faults injected by a TCP proxy.

The streaming transports keep their records in the same ledger as the unary ones, so the
same checks as tests/server/loadgen/test_faults.py hold for requests on a stream:
  - open loop: the records' due times are exactly the schedule's first K due times;
  - the server's own statistics reconcile: completed <= executed <= completed + failed;
  - nothing is left unfinished, and the load recovers after the fault;
and, for streams: a broken stream is replaced and counted as a reconnect (the requests
after it complete, rather than failing for the rest of the level), and every completed
request carries its response.

The model is the (non-decoupled) identity fixture, on ModelStreamInfer and on
generate_stream: Triton 2.51 (this test environment's server) segfaults when gRPC streams
are cut again and again while a decoupled model is still sending responses on them, which
would take the session's shared server down with it.

"native-grpc" runs a case on the compiled sender's stream (perfkit/loadgen/_native_h2_stream.c,
the default for gRPC streams), "grpc" on the Python one (`_stream_h2`, PERFKIT_SENDER=python).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from unittest import mock

import numpy as np
import pytest

from perfkit.loadgen import ModelIO, StreamConfig, grpc_payload, native_available, sse_payload, synthetic_tensors
from perfkit.loadgen._native_engine import NATIVE_IMPORT_ERROR
from perfkit.records import LoadLevel
from tests.conftest import require
from tests.server.loadgen.test_faults import LEVELS, Run, _check, drive_through_fault, first_close
from tests.support.faultproxy import FaultProxy

MODEL = "identity"
RESPONSES = 1  # per request: identity answers once, then the (empty) final response
STREAM_TRANSPORTS = ("native-grpc", "grpc", "grpc.aio", "sse")


def _payload(server, transport: str, host: str) -> tuple[bytes, ...]:
    io = ModelIO.from_server(server.model_metadata(MODEL), server.model_config(MODEL))
    tensors = synthetic_tensors(io, mode="random", batch_size=1, shapes={}, string_length=1, seed=0)
    if transport == "sse":
        return (sse_payload(io, tensors, host),)
    return (grpc_payload(io, tensors),)


def _upstream(server, transport: str) -> tuple[str, int]:
    transport = transport.removeprefix("native-")
    url = server.endpoints.http_url if transport == "sse" else server.endpoints.grpc_url
    host, port = url.rsplit(":", 1)
    return host, int(port)


def _run(
    server,
    transport: str,
    level: LoadLevel,
    proxy: FaultProxy,
    fault: Callable[[FaultProxy], None],
    before_fault: int = 20,
    after_fault: int = 20,
) -> Run:
    payloads = _payload(server, transport, f"127.0.0.1:{proxy.port}")
    cfg = StreamConfig("127.0.0.1", proxy.port, payloads, transport=transport.removeprefix("native-"), seed=7)
    if transport.startswith("native"):
        require("perfkit's compiled sender", native_available(), f"pip install -e . with gcc: {NATIVE_IMPORT_ERROR}")
        sender = {k: v for k, v in os.environ.items() if k != "PERFKIT_SENDER"}
    else:
        sender = {**os.environ, "PERFKIT_SENDER": "python"}
    with mock.patch.dict(os.environ, sender, clear=True):
        return drive_through_fault(cfg, server, MODEL, level, proxy, fault, before_fault, after_fault)


def _check_stream(run: Run) -> None:
    _check(run)
    s = run.samples
    ok = s.status == 0
    # A completed request got its response, whatever happened to the stream around it.
    assert all(len(s.response_ns[i]) == RESPONSES for i in np.flatnonzero(ok))


@pytest.mark.parametrize("transport", STREAM_TRANSPORTS)
@pytest.mark.parametrize("mode", list(LEVELS))
def test_stream_closed_after_n_requests_is_replaced(triton, transport, mode):
    with FaultProxy(_upstream(triton, transport), close_after=7, h2=transport != "sse") as proxy:
        run = _run(triton, transport, LEVELS[mode], proxy, first_close)
    _check_stream(run)
    assert proxy.closed_by_fault > 0
    # every broken stream (connection) was replaced and the load went on over the new one
    assert run.samples.reconnects > 0


@pytest.mark.parametrize("transport", ("native-grpc", "grpc", "grpc.aio"))
@pytest.mark.parametrize("mode", list(LEVELS))
def test_stream_random_resets(triton, transport, mode):
    with FaultProxy(_upstream(triton, transport), reset_probability=0.05, h2=True, seed=3) as proxy:
        run = _run(triton, transport, LEVELS[mode], proxy, lambda p: None, after_fault=60)
    _check_stream(run)
    assert proxy.resets > 0
    assert run.failed > 0
    assert run.samples.reconnects > 0


@pytest.mark.parametrize("transport", ("native-grpc", "grpc", "sse"))
def test_stream_server_away_and_back(triton, transport):
    # All connections drop and new ones are refused for 0.5 s, then the server is back.
    def outage(p: FaultProxy) -> None:
        p.outage()
        time.sleep(0.5)  # the length of the outage itself, not a synchronisation
        p.restore()

    with FaultProxy(_upstream(triton, transport), h2=transport != "sse") as proxy:
        run = _run(triton, transport, LEVELS["closed"], proxy, outage)
    _check_stream(run)
    assert run.samples.reconnects > 0
