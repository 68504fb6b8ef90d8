"""A trace's arrivals predicted (predict.trace_unit with sustainable_rate / score_space): the
trace replayed faster or slower, as the tuner's trace trials replay it, against closed forms on a
bursty trace that no Poisson process resembles. No server."""

from __future__ import annotations

import numpy as np
import pytest

from perfkit.errors import UsageError
from perfkit.predict import BatcherConfig, Load, ServiceModel, score_space, simulate, sustainable_rate, trace_unit

D_US = 10_000.0


def _bursts(k: int, period_s: float, n: int) -> list[float]:
    """n bursts of k requests at once, period_s apart (s)."""
    return [i * period_s for i in range(n) for _ in range(k)]


def test_the_unit_trace_has_mean_rate_one_as_the_trace_mean_rate_counts_it():
    stamps = [0.5, 0.7, 1.5, 2.5, 4.5]  # requests over their span: 5 / 4 s as recorded
    unit = trace_unit(stamps)
    assert unit[0] == 0.0 and len(unit) / unit[-1] == pytest.approx(1.0)
    # offered at 2.5 req/s (twice its own 1.25): the trace at speed 2, its gaps halved
    np.testing.assert_allclose(unit / 2.5, (np.array(stamps) - 0.5) / 2)
    with pytest.raises(UsageError, match="over no time"):
        trace_unit([1.0, 1.0])


def test_a_bursty_trace_holds_until_its_bursts_overlap_and_never_past_a_budget_under_its_burst():
    # Bursts of 4 at once, one instance of 10 ms, no batching: a burst's last request waits for the
    # three before it, 40 ms, at any speed where bursts do not overlap (period >= 40 ms, a mean rate
    # of 4 / 40 ms = 100 req/s, the instance's ceiling); past that the backlog grows.
    unit = trace_unit(_bursts(4, 0.1, 500))
    svc = ServiceModel(D_US, 0.0)
    held = sustainable_rate(BatcherConfig(), svc, 45e3, unit=unit)
    assert held.rate_rps == pytest.approx(100.0, rel=0.03) and held.latency_us == pytest.approx(40e3, rel=1e-6)
    at = simulate(BatcherConfig(), svc, Load("trace", arrivals_s=tuple(unit / 80.0)), requests=len(unit))
    assert at.p99_us == pytest.approx(40e3, rel=1e-6) and at.p50_us == pytest.approx(25e3, rel=1e-6)
    # Within 35 ms nothing holds at any speed (every burst's p99 is 40 ms), where Poisson arrivals
    # at the same mean rate hold a good part of the instance's ceiling.
    never = sustainable_rate(BatcherConfig(), svc, 35e3, unit=unit)
    poisson = sustainable_rate(BatcherConfig(), svc, 35e3, requests=len(unit))
    assert never.rate_rps < 0.1 and poisson.rate_rps > 30.0
    # A batcher (max_batch_size 4, no queue delay, 10 ms + 1 ms per item): the idle instance takes a
    # burst's first request alone (11 ms) and the other three as one batch behind it (13 ms), the last
    # answered at 24 ms; as the bursts close up, batches fill, up to back-to-back full batches, the
    # instance's ceiling of 4 / 14 ms = 286 req/s, still within 35 ms.
    slow = simulate(BatcherConfig(4, True), ServiceModel(D_US, 1_000.0), Load("trace", arrivals_s=tuple(unit / 80.0)),
                    requests=len(unit))  # fmt: skip
    assert slow.mean_batch == pytest.approx(2.0) and slow.p99_us == pytest.approx(24e3, rel=1e-6)
    batched = score_space([BatcherConfig(), BatcherConfig(4, True)], ServiceModel(D_US, 1_000.0), 35e3, unit=unit)
    assert batched[0].config.max_batch_size == 4
    assert batched[0].rate_rps == pytest.approx(4 / 14e-3, rel=0.03)
