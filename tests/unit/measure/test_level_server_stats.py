"""A level's server statistics hold every request the level counts, on a fake timeline (no server).

The load runs while the fake server's counters are read, and each read takes time, as an HTTP
request does; the server counts a request shortly after answering it (Triton reports a request's
statistics once its response is sent), and late while its reporting thread is held up around the
level's end. The level must read the counters before its first request and after its last is counted.
"""

from __future__ import annotations

import numpy as np
import pytest

from perfkit.measure import _level
from perfkit.records import LoadLevel, ProfileSpec, Samples
from tests.support.stand_in_server import StandInServer

MS = 1_000_000
SEND_EVERY_NS = MS // 2  # closed loop at 2000 requests/s
LATENCY_NS = 1 * MS
READ_NS = 5 * MS  # how long one read of the server's counters takes
COUNTED_AFTER_NS = MS // 2  # a request is in the counters this long after its response...
# ...except while the server's reporting thread is held up, around the level's end (the level starts
# after a 50 ms warm-up and ends after three 100 ms windows)
HELD_UP_NS = (330 * MS, 400 * MS)  # from the load's start
SPEC = dict(measurement_interval_ms=100, min_windows=3, max_trials=3, warmup_s=0.05, tail_percentiles=())


class Clock:
    def __init__(self) -> None:
        self.now_ns = 10_000 * MS

    def sleep_until(self, t_ns: int) -> None:
        self.now_ns = max(self.now_ns, t_ns)


class Gen:
    """Sends every SEND_EVERY_NS from start until stop; each request is answered LATENCY_NS after it is sent."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.t0 = 0
        self.sent: list[int] = []
        self.handed = 0
        self.stopped_ns: int | None = None

    def start(self, level: LoadLevel) -> int:
        self.t0 = self.clock.now_ns
        return self.t0

    def send_until_now(self) -> None:
        until = self.clock.now_ns if self.stopped_ns is None else self.stopped_ns
        t = self.sent[-1] + SEND_EVERY_NS if self.sent else self.t0
        while t < until:
            self.sent.append(t)
            t += SEND_EVERY_NS

    def _hand_over(self, until_ns: int) -> Samples:
        self.send_until_now()
        done = [t for t in self.sent[self.handed :] if t + LATENCY_NS <= until_ns]
        self.handed += len(done)
        sent = np.array(done, np.int64)
        return Samples(np.full(len(sent), -1, np.int64), sent, sent + LATENCY_NS, np.zeros(len(sent), np.int32))

    def drain(self) -> Samples:
        return self._hand_over(self.clock.now_ns)

    def stop(self, drain_timeout_s: float = 30.0) -> Samples:
        self.send_until_now()
        self.stopped_ns = self.clock.now_ns
        self.clock.now_ns += LATENCY_NS  # the requests in flight are answered
        return self._hand_over(self.clock.now_ns)


class CountingServer(StandInServer):
    """Counts the generator's requests on the fake timeline, each once it is in the counters; one
    that keeps no statistics answers zero counts."""

    def __init__(self, clock: Clock, gen: Gen, keeps_stats: bool = True) -> None:
        super().__init__()
        self.clock, self.gen, self.counts_requests = clock, gen, keeps_stats
        self.reads = 0

    def counted_at(self, sent_ns: int) -> int:
        answered = sent_ns + LATENCY_NS
        held_from, held_to = (self.gen.t0 + t for t in HELD_UP_NS)
        return max(answered + COUNTED_AFTER_NS, held_to if held_from <= answered < held_to else 0)

    def model_stats(self, name: str = "") -> dict:
        self.reads += 1
        self.clock.now_ns += READ_NS  # the load runs on while the counters are read, at the end of the request
        self.gen.send_until_now()
        n = sum(1 for t in self.gen.sent if self.counted_at(t) <= self.clock.now_ns) if self.counts_requests else 0
        return {"model_stats": [{"name": name, "inference_stats": {"success": {"count": n, "ns": n * LATENCY_NS}}}]}


def _measure(monkeypatch: pytest.MonkeyPatch, keeps_stats: bool = True):
    clock = Clock()
    gen = Gen(clock)
    server = CountingServer(clock, gen, keeps_stats)
    monkeypatch.setattr(_level, "sleep_until", clock.sleep_until)
    monkeypatch.setattr(_level, "perf_counter_ns", lambda: clock.now_ns)
    level = LoadLevel("concurrency", 1)
    spec = ProfileSpec(model="m", levels=(level,), **SPEC)  # type: ignore[arg-type]  # test kwargs
    result = _level.measure_level(server, gen, spec, level, ["m"], None).result  # type: ignore[arg-type]  # a stand-in generator
    return result, server


def test_the_server_statistics_of_a_level_count_every_request_it_counts(monkeypatch):
    result, server = _measure(monkeypatch)
    assert result.request_count >= 590 and result.server is not None
    # the requests answered while the first read was under way, and those counted late at the end, are in
    assert result.server.request_count >= result.request_count
    # and little else: the warm-up's last requests, and the level's answered during the read after it
    assert result.server.request_count - result.request_count <= 2 * READ_NS // SEND_EVERY_NS


def test_a_server_that_keeps_no_statistics_is_read_once_after_the_level(monkeypatch):
    result, server = _measure(monkeypatch, keeps_stats=False)
    assert result.server is not None and result.server.request_count == 0
    assert server.reads == 2
