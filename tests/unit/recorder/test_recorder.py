"""Timing maths on synthetic samples and a fake clock: no server, no sleeping."""

from __future__ import annotations

import numpy as np
import pytest

from perfkit.recorder import LevelRecorder, concat, histogram_of, merge_histograms, summarize, thin_percentiles
from perfkit.records import STATUS_DROPPED, STATUS_OK, Samples
from perfkit.schedule import constant_due_ns, intervals_due_ns, poisson_due_ns, split_concurrency

MS = 1_000_000


def _open_loop_samples(stall_from_ms: float | None = None, stall_ms: float = 0.0) -> Samples:
    """100 req/s for 10 s, 1 ms service time; optionally the *sender* stalls (coordinated omission)."""
    due = np.arange(1000, dtype=np.int64) * 10 * MS
    sent = due.copy()
    if stall_from_ms is not None:
        s0, s1 = int(stall_from_ms * MS), int((stall_from_ms + stall_ms) * MS)
        stalled = (due >= s0) & (due < s1)
        sent[stalled] = s1  # everything due during the stall goes out when it ends
    done = sent + 1 * MS
    return Samples(due, sent, done, np.zeros(due.size, dtype=np.int32))


def test_stall_raises_corrected_percentiles_not_service_ones():
    calm = LevelRecorder(start_ns=0, window_ns=1000 * MS, closed_loop=False, batch_size=1)
    calm.add(_open_loop_samples())
    stalled = LevelRecorder(start_ns=0, window_ns=1000 * MS, closed_loop=False, batch_size=1)
    stalled.add(_open_loop_samples(stall_from_ms=5000, stall_ms=500))
    end = 10_000 * MS
    for rec in (calm, stalled):
        service = summarize("service", rec.latencies_us(end, "service"))
        assert service.p99_us == pytest.approx(1000, rel=0.01)  # the service time never changes
    calm_c = summarize("corrected", calm.latencies_us(end, "corrected"))
    stall_c = summarize("corrected", stalled.latencies_us(end, "corrected"))
    assert calm_c.p99_us == pytest.approx(1000, rel=0.01)
    # 50 of 1000 requests waited up to 500 ms: p99 lands deep inside the stall
    assert stall_c.p99_us > 300_000
    assert stall_c.max_us == pytest.approx(501_000, rel=0.01)


def test_late_sends_are_counted_and_lateness_reported():
    rec = LevelRecorder(start_ns=0, window_ns=1000 * MS, closed_loop=False, batch_size=1)
    rec.add(_open_loop_samples(stall_from_ms=5000, stall_ms=500))
    counts = rec.counts(10_000 * MS)
    assert counts.late_count == 50  # due in [5000, 5500) ms, each sent at 5500 ms
    assert counts.send_lateness_p99_us is not None and counts.send_lateness_p99_us > 400_000
    assert counts.sent_rps == pytest.approx(100, rel=0.01)


def test_windows_count_completions_by_completion_time_and_batch():
    due = np.full(6, -1, dtype=np.int64)
    sent = np.array([0, 100, 900, 1500, 1900, 2500], dtype=np.int64) * MS
    done = np.array([50, 150, 1050, 1550, 1950, 2550], dtype=np.int64) * MS  # sent at 900, done in window 2
    rec = LevelRecorder(start_ns=0, window_ns=1000 * MS, closed_loop=True, batch_size=4)
    rec.add(Samples(due, sent, done, np.zeros(6, dtype=np.int32)))
    w = rec.windows(2)
    assert [x.completed for x in w] == [2, 3]
    assert w[1].infer_per_s == pytest.approx(12.0)
    assert rec.counts(2000 * MS).request_count == 5  # sent in the period; the 2500 ms one is outside


def test_errors_are_counted_by_kind_never_dropped():
    due = np.arange(4, dtype=np.int64) * MS
    sent = np.array([0, MS, -1, 3 * MS], dtype=np.int64)
    done = due + MS
    status = np.array([STATUS_OK, 503, STATUS_DROPPED, 503], dtype=np.int32)
    rec = LevelRecorder(start_ns=0, window_ns=10 * MS, closed_loop=False, batch_size=1)
    rec.add(Samples(due, sent, done, status))
    counts = rec.counts(10 * MS)
    assert counts.errors == {"dropped": 1, "http_503": 2}
    assert counts.error_count == 3 and counts.dropped_count == 1


def test_worker_histograms_merge_exactly_to_one_process():
    rng = np.random.default_rng(7)
    lat = rng.lognormal(mean=7, sigma=1.0, size=20_000)
    one = histogram_of(lat)
    parts = [summarize("service", chunk).histogram for chunk in np.array_split(lat, 3)]
    merged = merge_histograms(parts)
    assert merged.get_total_count() == one.get_total_count() == 20_000
    for p in (50, 90, 95, 99, 99.9, 100):
        assert merged.get_value_at_percentile(p) == one.get_value_at_percentile(p)
    # samples concatenated from workers equal the single-process samples, so windows agree too
    a = Samples(np.arange(3), np.arange(3), np.arange(3) + 5, np.zeros(3, dtype=np.int32))
    b = Samples(np.arange(3, 5), np.arange(3, 5), np.arange(3, 5) + 5, np.zeros(2, dtype=np.int32))
    assert concat([a, b]).done_ns.tolist() == [5, 6, 7, 8, 9]


def test_percentiles_are_exact_to_three_digits_and_thin_ones_flagged():
    values = np.arange(1, 1001, dtype=float) * 10  # 10 us .. 10 ms uniformly
    s = summarize("service", values)
    assert s.p50_us == pytest.approx(5000, rel=1e-3)
    assert s.p99_us == pytest.approx(9900, rel=1e-3)
    assert s.count == 1000 and s.min_us == 10 and s.max_us == 10000
    assert s.thin == ("p999",)  # 1000 samples support p99 (10 beyond it), not p99.9
    assert thin_percentiles(100) == ("p95", "p99", "p999")


def test_pacers_are_pure_functions_of_the_index():
    it = constant_due_ns(200)
    assert [next(it) for _ in range(4)] == [0, 5 * MS, 10 * MS, 15 * MS]
    # two workers interleave to exactly the one-worker schedule
    w0, w1 = constant_due_ns(200, worker=0, workers=2), constant_due_ns(200, worker=1, workers=2)
    assert sorted([next(w0) for _ in range(3)] + [next(w1) for _ in range(3)]) == [i * 5 * MS for i in range(6)]
    gaps = intervals_due_ns([1000, 3000])
    assert [next(gaps) for _ in range(4)] == [1000, 4000, 5000, 8000]
    p = poisson_due_ns(1000, seed=1)
    due = np.array([next(p) for _ in range(20000)])
    assert np.all(np.diff(due) >= 0)
    assert 20000 / (due[-1] / 1e9) == pytest.approx(1000, rel=0.03)
    assert split_concurrency(5, 2) == [3, 2] and split_concurrency(1, 4) == [1]
