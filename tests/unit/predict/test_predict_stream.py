"""The stream model (perfkit/predict/_stream.py) against closed forms: one instance held for a
fixed stream time under Poisson arrivals is an M/D/1 queue, so a stream's TTFT is Erlang's M/D/1
waiting time plus the first response's time; the rate at which TTFT p99 stays within a budget is
the rate at which that waiting time's p99 stays within the budget less the first response; under
constant arrivals below capacity nobody waits. No server."""

from __future__ import annotations

import math

import pytest

from perfkit.errors import UsageError
from perfkit.predict import BatcherConfig, Load, sustainable_rate
from perfkit.predict._stream import (
    StreamModel,
    end_to_end_budget_us,
    simulate_stream,
    stream_service,
)
from tests.support.queueing import md1_wait_cdf

# first response after 8 ms, then 3 more every 4 ms: the instance is held for 20 ms a stream
STREAM = StreamModel(first_us=8_000.0, interval_us=4_000.0, responses=4, first_overhead_us=300.0,
                     itl_p_us=((50.0, 4_000.0), (99.0, 4_300.0)))  # fmt: skip
SERVICE = stream_service(STREAM, overhead_us=500.0)
ONE = BatcherConfig()


def _md1_wait_quantile_s(rate_rps: float, service_s: float, q: float) -> float:
    """The q-quantile of the M/D/1 waiting time, by bisection on Erlang's distribution."""
    if md1_wait_cdf(0.0, rate_rps, service_s) >= q:
        return 0.0
    lo, hi = 0.0, 30 * service_s
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if md1_wait_cdf(mid, rate_rps, service_s) >= q else (mid, hi)
    return hi


def test_the_stream_holds_its_instance_for_the_first_response_and_every_interval():
    assert STREAM.stream_us == pytest.approx(8_000 + 3 * 4_000)
    assert SERVICE.service_us(1) == STREAM.stream_us and SERVICE.overhead_us == 500.0
    assert STREAM.itl_us(99.0) == 4_300.0 and STREAM.itl_us(90.0) == 4_000.0  # the mean where not kept


@pytest.mark.parametrize("rho", [0.5, 0.75])
def test_ttft_under_poisson_arrivals_is_md1_waiting_plus_the_first_response(rho: float):
    # 200k streams: the simulated p90 / p99 of the wait sit within a few percent of Erlang's.
    d_s = STREAM.stream_us / 1e6
    rate = rho / d_s
    p = simulate_stream(ONE, STREAM, SERVICE, Load("poisson", rate_rps=rate), requests=200_000, seed=3)
    first_us = STREAM.first_us + STREAM.first_overhead_us
    for pct in (90.0, 99.0):
        want_us = _md1_wait_quantile_s(rate, d_s, pct / 100) * 1e6 + first_us
        assert p.percentile_us("ttft", pct) == pytest.approx(want_us, rel=0.05)
        # end to end: the same wait plus the whole stream and its overhead
        want_end_us = want_us - first_us + STREAM.stream_us + SERVICE.overhead_us
        assert p.percentile_us("latency", pct) == pytest.approx(want_end_us, rel=0.05)
    # P-K: the mean wait rho D / (2 (1 - rho))
    assert p.mean_wait_us == pytest.approx(rho * STREAM.stream_us / (2 * (1 - rho)), rel=0.06)
    assert p.completed_rps == pytest.approx(rate, rel=0.03)
    # ITL is the instance's own pace while held: the load does not move it
    assert p.percentile_us("itl", 99.0) == 4_300.0


def test_constant_arrivals_below_capacity_wait_for_nothing():
    p = simulate_stream(ONE, STREAM, SERVICE, Load("constant", rate_rps=40.0), requests=2_000)
    assert p.percentile_us("ttft", 99.0) == pytest.approx(STREAM.first_us + STREAM.first_overhead_us)
    assert p.percentile_us("latency", 50.0) == pytest.approx(STREAM.stream_us + SERVICE.overhead_us)


def test_the_rate_within_a_ttft_budget_is_where_md1_waiting_p99_fits_under_it():
    budget_us = 60_000.0
    d_s = STREAM.stream_us / 1e6
    room_s = (budget_us - STREAM.first_us - STREAM.first_overhead_us) / 1e6
    lo, hi = 0.0, 1 / d_s
    for _ in range(60):  # Erlang's truth: the highest rate whose wait p99 is within the room left
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if md1_wait_cdf(room_s, mid, d_s) >= 0.99 else (lo, mid)
    end_budget = end_to_end_budget_us(STREAM, SERVICE, "ttft", budget_us, 99.0)
    got = sustainable_rate(ONE, SERVICE, end_budget, requests=50_000, seed=2)
    assert got.rate_rps == pytest.approx(lo, rel=0.05)
    # at that rate the simulated TTFT p99 is within the budget, and the translated budget is exact
    p = simulate_stream(ONE, STREAM, SERVICE, Load("poisson", rate_rps=got.rate_rps), requests=50_000, seed=2)
    assert p.percentile_us("ttft", 99.0) <= budget_us
    assert p.percentile_us("latency", 99.0) - p.percentile_us("ttft", 99.0) == pytest.approx(end_budget - budget_us)


def test_more_instances_hold_more_streams_within_a_ttft_budget():
    end_budget = end_to_end_budget_us(STREAM, SERVICE, "ttft", 40_000.0, 99.0)
    rates = [sustainable_rate(BatcherConfig(instances=c), SERVICE, end_budget).rate_rps for c in (1, 2, 3)]
    assert rates[0] < rates[1] < rates[2]
    assert rates[2] < 3 / (STREAM.stream_us / 1e6)  # never past every instance streaming all the time


def test_an_itl_budget_holds_at_every_rate_the_stream_keeps_up_with_or_at_none():
    assert end_to_end_budget_us(STREAM, SERVICE, "itl", 5_000.0, 99.0) == math.inf
    assert end_to_end_budget_us(STREAM, SERVICE, "itl", 4_200.0, 99.0) == 0.0  # p99 4.3 ms: no rate holds
    assert end_to_end_budget_us(STREAM, SERVICE, "latency", 70_000.0, 99.0) == 70_000.0
    got = sustainable_rate(ONE, SERVICE, math.inf)
    assert 0.8 / (STREAM.stream_us / 1e6) < got.rate_rps <= 1.02 / (STREAM.stream_us / 1e6)


def test_bad_inputs_are_one_line_usage_errors():
    with pytest.raises(UsageError, match="responses"):
        StreamModel(first_us=1.0, interval_us=1.0, responses=0)
    with pytest.raises(UsageError, match="batches streams"):
        simulate_stream(BatcherConfig(max_batch_size=8, dynamic_batching=True), STREAM, SERVICE, Load("poisson", 1.0))
    with pytest.raises(UsageError, match="open-loop"):
        simulate_stream(ONE, STREAM, SERVICE, Load("concurrency", concurrency=2))
    with pytest.raises(UsageError, match="unknown"):
        end_to_end_budget_us(STREAM, SERVICE, "tpot", 1.0, 99.0)
