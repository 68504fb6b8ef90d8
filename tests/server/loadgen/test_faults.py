"""The load generator's accounting invariant, held under faults injected by a TCP proxy.

Every request the schedule makes due yields exactly one record: completed, failed (by
kind), dropped, or unfinished. Each case runs a level through `faultproxy.FaultProxy` in
front of the real server, injects a fault, and checks:
  - open loop: the records' due times are exactly the schedule's first K due times
    (nothing silently lost, nothing counted twice);
  - the server's own statistics reconcile: completed <= executed <= completed + failed;
  - nothing is left unfinished (no level hangs past its drain) and the load recovers
    after the fault (requests complete after it).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from time import perf_counter_ns

import numpy as np
import pytest

from perfkit.loadgen import (
    EngineConfig,
    LoadGenerator,
    ModelIO,
    StreamConfig,
    grpc_payload,
    http_payload,
    synthetic_tensors,
)
from perfkit.recorder import concat
from perfkit.records import (
    GRPC_STATUS_BASE,
    STATUS_CONNECTION_CLOSED,
    STATUS_CONNECTION_REFUSED,
    STATUS_DROPPED,
    STATUS_UNFINISHED,
    LoadLevel,
    Samples,
)
from perfkit.schedule import due_times
from perfkit.server import LocalLaunch, launch_local
from tests.conftest import copy_models, wait_until
from tests.support.faultproxy import FaultProxy

MODEL = "identity"
# senders: the compiled one ("native": HTTP/1.1, "native-grpc": gRPC) and the Python ones
TRANSPORTS = ("native", "http1", "native-grpc", "h2", "grpc-aio")
HTTP1 = ("native", "http1")
H2 = ("native-grpc", "h2")  # hand-written HTTP/2
# Longer than any stall injected (2 s) by a margin a loaded machine needs (the suite runs these beside
# other workers): a request still owed after it is a hang. stop() returns as soon as all are in.
DRAIN_S = 15.0
HAND_WRITTEN = HTTP1 + H2


def _executed(http_url: str, model: str = MODEL, at_least: int = 0, timeout_s: float = 30.0) -> int:
    """Requests the server executed (success + fail), from its own statistics: once the count reaches
    `at_least` (what the client saw complete: Triton counts a request after sending its response, and
    under load that lags by more than any fixed pause), then once two reads agree; as it reads at the
    timeout if it never gets there (the invariant's assertion then says by how much)."""
    deadline = time.monotonic() + timeout_s
    last = -1
    while True:
        with urllib.request.urlopen(f"http://{http_url}/v2/models/{model}/stats", timeout=5) as resp:
            stats = json.load(resp)["model_stats"][0]["inference_stats"]
        count = int(stats["success"]["count"]) + int(stats["fail"]["count"])
        if (count >= at_least and count == last) or time.monotonic() >= deadline:
            return count
        last = count
        time.sleep(0.05)  # polling the server's counter: it has no event to wait on


def _payload(server, protocol: str) -> tuple[bytes, ...]:
    io = ModelIO.from_server(server.model_metadata(MODEL), server.model_config(MODEL))
    tensors = synthetic_tensors(io, mode="random", batch_size=1, shapes={}, string_length=1, seed=0)
    if protocol == "http":
        return (http_payload(io, tensors, server.endpoints.http_url),)
    return (grpc_payload(io, tensors),)


def _protocol(transport: str) -> str:
    return "http" if transport in HTTP1 else "grpc"


def _config(transport: str, port: int, payloads: tuple[bytes, ...], seed: int = 0) -> EngineConfig:
    """The EngineConfig that runs `transport` (one of TRANSPORTS) against 127.0.0.1:port."""
    kind = transport.removesuffix("-grpc")  # "native-grpc": the compiled sender, gRPC
    return EngineConfig(_protocol(transport), "127.0.0.1", port, payloads, transport=kind, seed=seed)


def _upstream(server, transport: str) -> tuple[str, int]:
    url = server.endpoints.http_url if transport in HTTP1 else server.endpoints.grpc_url
    host, port = url.rsplit(":", 1)
    return host, int(port)


@dataclass
class Run:
    samples: Samples
    t0_ns: int
    fault_ns: int
    level: LoadLevel
    executed: int
    parts: list[Samples] = field(default_factory=list)

    def count(self, mask: np.ndarray) -> int:
        return int(mask.sum())

    @property
    def completed(self) -> int:
        return self.count(self.samples.status == 0)

    @property
    def failed(self) -> int:
        st = self.samples.status
        return self.count((st != 0) & (st != STATUS_DROPPED) & (st != STATUS_UNFINISHED))

    @property
    def unfinished(self) -> int:
        return self.count(self.samples.status == STATUS_UNFINISHED)


def _collect(gen: LoadGenerator, parts: list[Samples], until: Callable[[Samples], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        parts.append(gen.drain())
        if until(concat(parts)):
            return
        time.sleep(0.02)
    raise AssertionError(f"load did not progress: {concat(parts).status.tolist()[-20:]}")


def _run(
    server,
    transport: str,
    level: LoadLevel,
    proxy: FaultProxy,
    fault: Callable[[FaultProxy], None],
    before_fault: int = 20,
    after_fault: int = 20,
) -> Run:
    cfg = _config(transport, proxy.port, _payload(server, _protocol(transport)), seed=7)
    return drive_through_fault(cfg, server, MODEL, level, proxy, fault, before_fault, after_fault)


def drive_through_fault(
    cfg: EngineConfig | StreamConfig,
    server,
    model: str,
    level: LoadLevel,
    proxy: FaultProxy,
    fault: Callable[[FaultProxy], None],
    before_fault: int,
    after_fault: int,
) -> Run:
    """Load until `before_fault` requests completed, inject the fault, load until `after_fault`
    more completed after it, stop; with the server's own count of what it executed."""
    executed_before = _executed(server.endpoints.http_url, model)
    parts: list[Samples] = []
    with LoadGenerator(cfg) as gen:
        t0 = gen.start(level)
        _collect(gen, parts, lambda s: int((s.status == 0).sum()) >= before_fault)
        fault_ns = perf_counter_ns()
        fault(proxy)
        _collect(gen, parts, lambda s: int(((s.status == 0) & (s.done_ns > fault_ns)).sum()) >= after_fault)
        parts.append(gen.stop(DRAIN_S))
    samples = concat(parts)
    completed = int((samples.status == 0).sum())
    executed = _executed(server.endpoints.http_url, model, at_least=executed_before + completed) - executed_before
    return Run(samples, t0, fault_ns, level, executed, parts)


def _check(run: Run) -> None:
    s = run.samples
    known = {0, STATUS_CONNECTION_CLOSED, STATUS_CONNECTION_REFUSED, STATUS_DROPPED, STATUS_UNFINISHED}
    unknown = {int(v) for v in np.unique(s.status)} - known
    assert all(v >= GRPC_STATUS_BASE or 400 <= v < 600 for v in unknown), unknown
    if run.level.mode != "concurrency":
        # Every due time of the schedule up to the last one sent has exactly one record.
        dues = due_times(run.level, seed=7)
        expected = [run.t0_ns + next(dues) for _ in range(len(s))]
        assert sorted(s.due_ns.tolist()) == expected
    else:
        assert (s.due_ns == -1).all()
    assert run.unfinished == 0, s.error_examples  # nothing hung past the drain
    # The server's own count: everything perfkit saw complete ran there; nothing ran
    # there that perfkit neither saw complete nor recorded as failed.
    assert run.completed <= run.executed <= run.completed + run.failed, (run.completed, run.executed, run.failed)
    for status in {int(v) for v in np.unique(s.status)} - {0}:
        assert s.error_examples.get(status), f"no message kept for status {status}"


LEVELS = {
    "closed": LoadLevel("concurrency", 2),
    "open": LoadLevel("request_rate", 150, "poisson"),
}


def _cases() -> Iterator[tuple[str, str]]:
    for transport in TRANSPORTS:
        for mode in LEVELS:
            yield transport, mode


def first_close(proxy: FaultProxy) -> None:
    """The "fault" of a close_after proxy: its first close. How many connections the load spreads over
    depends on the latency (an open loop on a loaded machine has more requests in flight, each HTTP/1.1
    or SSE one on a connection of its own), so the first close is waited for, and the requests counted
    after it then complete over the replacements."""
    wait_until(lambda: proxy.closed_by_fault > 0, "the proxy's first close", timeout_s=60)


@pytest.mark.parametrize(("transport", "mode"), list(_cases()))
def test_close_after_n_requests(triton, transport, mode):
    with FaultProxy(_upstream(triton, transport), close_after=7, h2=transport not in HTTP1) as proxy:
        run = _run(triton, transport, LEVELS[mode], proxy, first_close)
    _check(run)
    assert proxy.closed_by_fault > 0
    if transport in HAND_WRITTEN:
        assert run.samples.reconnects > 0  # every connection died and was replaced


IDLE_REAPED_FLAKY = pytest.mark.flaky(
    reason="grpc-aio: under the parallel run one request in nine read 'Connection reset by peer': the proxy reaped"
    " the channel's connection as grpc-aio sent on it, the 150 ms margin not enough when the event loop is starved."
    " Fix: the proxy reaps only a connection idle in both directions past the margin measured from its last byte"
    " sent or received (not from the last request), or the grpc-aio sender resends a request the transport reports"
    " unsent (UNAVAILABLE before any byte acknowledged)"
)


@pytest.mark.parametrize(
    "transport", [pytest.param(t, marks=IDLE_REAPED_FLAKY) if t == "grpc-aio" else t for t in TRANSPORTS]
)
def test_idle_connections_reaped_by_a_proxy(triton, transport):
    # The Kubernetes / load-balancer case: connections idle 100 ms are closed; at 4 req/s every
    # request finds its connection gone. Each must still be sent and recorded. The 150 ms between a
    # reaping and the next request is the margin a loaded machine needs: a reaping that lands as a
    # request is sent loses it on any client (the request's bytes may have reached a closing socket),
    # which is not the case this test is about; the proxy never reaps a connection with bytes waiting.
    level = LoadLevel("request_rate", 4, "constant")
    with FaultProxy(_upstream(triton, transport), idle_close_s=0.1, h2=transport not in HTTP1) as proxy:
        run = _run(triton, transport, level, proxy, lambda p: None, before_fault=4, after_fault=4)
    _check(run)
    assert proxy.closed_by_fault > 0
    assert run.completed == len(run.samples)  # a closed idle connection is not a failed request


@pytest.mark.parametrize(("transport", "mode"), list(_cases()))
def test_random_resets(triton, transport, mode):
    with FaultProxy(_upstream(triton, transport), reset_probability=0.05, h2=transport not in HTTP1, seed=3) as proxy:
        run = _run(triton, transport, LEVELS[mode], proxy, lambda p: None, after_fault=60)
    _check(run)
    assert proxy.resets > 0
    assert run.failed > 0


@pytest.mark.parametrize(("transport", "mode"), list(_cases()))
def test_two_second_stall(triton, transport, mode):
    with FaultProxy(_upstream(triton, transport), h2=transport not in HTTP1) as proxy:
        run = _run(triton, transport, LEVELS[mode], proxy, lambda p: p.stall(2.0))
    _check(run)
    s = run.samples
    # Requests sent before the stall ended completed after it: nothing was given up on.
    assert ((s.status == 0) & (s.done_ns - run.fault_ns > 1.9e9)).any()


@pytest.mark.parametrize(("transport", "mode"), [(t, m) for t, m in _cases() if t not in HTTP1])
def test_goaway(triton, transport, mode):
    with FaultProxy(_upstream(triton, transport), h2=True) as proxy:
        run = _run(triton, transport, LEVELS[mode], proxy, lambda p: p.goaway())
    _check(run)
    assert proxy.goaways > 0
    if transport in H2:
        assert run.samples.reconnects > 0  # the connections that went away were replaced
        assert run.failed == 0  # GOAWAY(last stream = all): every request in flight finishes


@pytest.mark.parametrize(("transport", "mode"), list(_cases()))
def test_server_away_and_back(triton, transport, mode):
    # All connections drop and new ones are refused for 0.5 s, then the server is back.
    def outage(p: FaultProxy) -> None:
        p.outage()
        time.sleep(0.5)  # the length of the outage itself, not a synchronisation
        p.restore()

    with FaultProxy(_upstream(triton, transport), h2=transport not in HTTP1) as proxy:
        run = _run(triton, transport, LEVELS[mode], proxy, outage)
    _check(run)
    if transport in HAND_WRITTEN:
        assert run.samples.reconnects > 0


@pytest.mark.usefixtures("tritonserver")
@pytest.mark.parametrize("transport", HAND_WRITTEN)
def test_server_restarted_mid_level(tmp_path, transport):
    # A real restart: the server process stops, a new one starts on other ports, the
    # proxy points at it. The requests both servers executed reconcile with the records.
    repo = copy_models(tmp_path, [MODEL])
    first = launch_local(LocalLaunch(repo, models=(MODEL,)))
    second = None
    executed_first = 0
    try:
        with FaultProxy(_upstream(first, transport), h2=transport in H2) as proxy:
            cfg = _config(transport, proxy.port, _payload(first, _protocol(transport)))
            parts: list[Samples] = []
            with LoadGenerator(cfg) as gen:
                gen.start(LEVELS["closed"])
                _collect(gen, parts, lambda s: int((s.status == 0).sum()) >= 20)
                proxy.outage()
                executed_first = _executed(first.endpoints.http_url)
                first.stop()
                second = launch_local(LocalLaunch(repo, models=(MODEL,)))
                restart_ns = perf_counter_ns()
                proxy.restore(_upstream(second, transport))
                _collect(gen, parts, lambda s: int(((s.status == 0) & (s.done_ns > restart_ns)).sum()) >= 20)
                parts.append(gen.stop(DRAIN_S))
            executed = executed_first + _executed(second.endpoints.http_url)
    finally:
        first.stop()
        if second is not None:
            second.stop()
    s = concat(parts)
    completed = int((s.status == 0).sum())
    failed = int(((s.status != 0) & (s.status != STATUS_UNFINISHED)).sum())
    assert int((s.status == STATUS_UNFINISHED).sum()) == 0
    assert completed <= executed <= completed + failed
    assert s.reconnects > 0
    assert (s.status == STATUS_CONNECTION_REFUSED).any() or (s.status == STATUS_CONNECTION_CLOSED).any()


@pytest.mark.parametrize("transport", H2)
def test_grpc_error_messages_survive_every_drain(triton, transport):
    # The server's message must be kept in every window, not only the first one.
    io = ModelIO.from_server(triton.model_metadata(MODEL), triton.model_config(MODEL))
    tensors = synthetic_tensors(io, mode="zero", batch_size=1, shapes={}, string_length=1, seed=0)
    wrong = ModelIO("no_such_model", "", io.max_batch_size, io.inputs, io.outputs)
    host, port = _upstream(triton, "h2")
    cfg = EngineConfig("grpc", host, port, (grpc_payload(wrong, tensors),), transport=transport.removesuffix("-grpc"))
    with LoadGenerator(cfg) as gen:
        gen.start(LoadLevel("concurrency", 2))
        batches: list[Samples] = []
        for _ in range(3):
            part: list[Samples] = []
            _collect(gen, part, lambda s: len(s) >= 5)
            batches.append(concat(part))
        batches.append(gen.stop(DRAIN_S))
    for batch in batches:
        for status in {int(v) for v in np.unique(batch.status)}:
            assert "no_such_model" in batch.error_examples[status]
