"""The distributed merge, without Ray: workers' digests merged equal one recorder over the same samples."""

from __future__ import annotations

import numpy as np
import pytest

from perfkit.distributed import (
    MergedWindows,
    level_digest,
    measure_offset,
    merge_counts,
    merge_summaries,
    window_digest,
)
from perfkit.recorder import LevelRecorder, summarize
from perfkit.records import STATUS_DROPPED, STATUS_OK, Samples

START_NS = 1_000_000_000
WINDOW_NS = 500_000_000
WINDOWS = 4


def _samples(n: int, *, open_loop: bool, seed: int) -> Samples:
    rng = np.random.default_rng(seed)
    due = np.sort(rng.integers(START_NS - 200_000_000, START_NS + WINDOWS * WINDOW_NS, n)).astype(np.int64)
    sent = due + rng.integers(0, 3_000_000, n)  # some sends late (> 1 ms)
    done = sent + rng.lognormal(13, 0.6, n).astype(np.int64)  # ~0.4 ms median, long tail
    status = np.where(rng.random(n) < 0.02, 503, STATUS_OK).astype(np.int32)
    status[rng.random(n) < 0.01] = STATUS_DROPPED
    sent[status == STATUS_DROPPED] = -1
    if not open_loop:
        due[:] = -1
    return Samples(due, sent, done, status, {503: "overloaded"})


def _recorder(closed: bool) -> LevelRecorder:
    return LevelRecorder(start_ns=START_NS, window_ns=WINDOW_NS, closed_loop=closed, batch_size=2)


def _split(s: Samples, parts: int) -> list[Samples]:
    idx = np.arange(len(s))
    return [
        Samples(
            s.due_ns[idx % parts == i],
            s.sent_ns[idx % parts == i],
            s.done_ns[idx % parts == i],
            s.status[idx % parts == i],
            s.error_examples,
        )  # fmt: skip
        for i in range(parts)
    ]


@pytest.mark.parametrize("closed", [True, False], ids=["closed", "open"])
@pytest.mark.parametrize("workers", [2, 3])
def test_merged_digests_equal_one_recorder(closed: bool, workers: int):
    samples = _samples(20_000, open_loop=not closed, seed=workers)
    one = _recorder(closed)
    one.add(samples)
    recs = []
    for part in _split(samples, workers):
        r = _recorder(closed)
        r.add(part)
        recs.append(r)
    end_ns = START_NS + WINDOWS * WINDOW_NS

    merged = MergedWindows()
    for k in range(1, WINDOWS + 1):
        merged.add([window_digest(r, k) for r in recs])
    digests = [level_digest(r, end_ns) for r in recs]

    # counts: exactly
    want = one.counts(end_ns)
    got = merge_counts([d.counts for d in digests], [d.lateness_hist for d in digests])
    for name in ("request_count", "inference_count", "error_count", "late_count", "dropped_count"):
        assert getattr(got, name) == getattr(want, name), name
    assert got.errors == want.errors
    assert got.sent_rps == pytest.approx(want.sent_rps, rel=1e-12)
    assert got.throughput_infer_per_s == pytest.approx(want.throughput_infer_per_s, rel=1e-12)
    if not closed:
        assert got.send_lateness_p99_us == pytest.approx(want.send_lateness_p99_us, rel=2e-3)

    # latency summaries: counts/min/max/mean/sd exactly, percentiles equal the one histogram's
    kinds = ["service"] if closed else ["service", "corrected"]
    for kind in kinds:
        single = summarize(kind, one.latencies_us(end_ns, kind))  # type: ignore[arg-type]  # kind iterates over the two LatencyKind values
        parts = [d.service if kind == "service" else d.corrected for d in digests]
        m = merge_summaries(kind, [p for p in parts if p is not None])  # type: ignore[arg-type]  # kind iterates over the two LatencyKind values
        assert m.count == single.count
        assert (m.min_us, m.max_us) == (single.min_us, single.max_us)
        assert m.mean_us == pytest.approx(single.mean_us, rel=1e-9)
        assert m.std_us == pytest.approx(single.std_us, rel=1e-6)
        for p in ("p50_us", "p90_us", "p95_us", "p99_us", "p999_us"):
            assert getattr(m, p) == getattr(single, p), p  # same buckets: identical
        assert m.thin == single.thin

    # windows: counts exactly, percentiles within the histogram's precision (3 digits)
    for a, b in zip(merged.windows, one.windows(WINDOWS)):
        assert (a.completed, a.inferences, a.errors) == (b.completed, b.inferences, b.errors)
        assert a.infer_per_s == pytest.approx(b.infer_per_s)
        assert a.mean_us == pytest.approx(b.mean_us, rel=1e-9)
        assert a.p50_us == pytest.approx(b.p50_us, rel=2e-3, abs=1)
        assert a.p99_us == pytest.approx(b.p99_us, rel=1e-2, abs=1)

    # precision: the same rule from histograms and moments as from raw samples
    for pct in (None, 99.0):
        want_p = one.precision(one.windows(WINDOWS), end_ns, pct)
        got_p = merged.precision(pct, closed)
        # closed loop: the count-noise floor uses the latencies completed inside the windows
        assert got_p.throughput_rel == pytest.approx(want_p.throughput_rel, rel=1e-3)
        assert want_p.latency_rel is not None and got_p.latency_rel is not None
        assert got_p.latency_rel == pytest.approx(want_p.latency_rel, rel=0.05)


def test_digest_size_is_bounded_by_windows_not_requests():
    sizes = []
    for n in (50_000, 500_000):
        r = _recorder(False)
        r.add(_samples(n, open_loop=True, seed=1))
        d = [window_digest(r, k) for k in range(1, WINDOWS + 1)]
        sizes.append(sum(len(x.service_hist) + len(x.level_hist) for x in d))
    # 10x the requests: well under 2x the bytes (only newly filled buckets), and far under
    # the 28 bytes per request that raw samples would cost
    assert sizes[1] < 2 * sizes[0]
    assert sizes[1] < 500_000 * 28 / 100


def test_clock_offset_keeps_the_fastest_round_trip():
    # A fake coordinator clock and a worker 5 ms ahead; legs of unequal length except one.
    now = [0]
    legs = iter([(900, 100), (50, 50), (300, 700)])
    state: dict[str, int] = {}

    def clock() -> int:
        return now[0]

    def remote() -> int:
        out_leg, back_leg = next(legs)
        now[0] += out_leg
        state["read"] = now[0] + 5_000_000
        now[0] += back_leg
        return state["read"]

    off = measure_offset(remote, round_trips=3, clock=clock)
    assert off.offset_ns == 5_000_000  # the symmetric 100 ns round trip
    assert off.uncertainty_ns == 50
    assert off.to_worker(1_000) == 5_001_000
    with pytest.raises(ValueError):
        measure_offset(remote, round_trips=0)
