"""The batcher simulator against closed forms: M/D/1 (Pollaczek-Khinchine and the known-truth
fixture's sustainable rate), M/D/c (an independent recursion on the same arrivals, exact, and
Cosmetatos' approximation on a long run), deterministic arrivals through the dynamic batcher
(exact latencies), closed loops and the instance-contention model. No server."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfkit.errors import UsageError
from perfkit.predict import (
    BatcherConfig,
    Contention,
    Load,
    ServiceModel,
    ceiling_rps,
    score_space,
    simulate,
    sustainable_rate,
    unit_arrivals,
)
from tests.support.queueing import sustainable_rate_rps

D_US = 10_000.0  # the queue fixture's service time (fixtures/models/queue: service_ms 10)
NO_BATCHING = BatcherConfig()


def _latencies_us(cfg: BatcherConfig, service: ServiceModel, arrivals_s: list[float]) -> np.ndarray:
    """Every request's latency (no overhead): the batches the simulator ran, spread over their
    requests. simulate() keeps percentiles only; exact checks need each request."""
    from perfkit.predict._sim import _run_open

    sizes, ends = _run_open(arrivals_s, cfg, service, Contention())
    return (np.repeat(ends, sizes) - np.asarray(arrivals_s)) * 1e6


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_md1_mean_wait_matches_pollaczek_khinchine(rho: float):
    # Wq = rho * D / (2 (1 - rho)). 100k requests: the batch-means standard error of the mean wait
    # is about 1.5% at rho 0.5 and 3% at rho 0.8; tolerance 3 standard errors.
    rate = rho / (D_US / 1e6)
    p = simulate(NO_BATCHING, ServiceModel(D_US, 0.0), Load("poisson", rate_rps=rate), requests=100_000, seed=1)
    pk_us = rho * D_US / (2 * (1 - rho))
    assert p.mean_wait_us == pytest.approx(pk_us, rel=0.05 if rho == 0.5 else 0.09)
    assert p.completed_rps == pytest.approx(rate, rel=0.03)
    assert p.mean_batch == 1.0


def test_md1_sustainable_rate_matches_the_known_truth_fixtures_truth():
    # fixtures/models/queue is an M/D/1 queue; tests/server/tuner/test_tune_open_loop.py holds the measured
    # search to sustainable_rate_rps("M/D/1", ...) (Erlang's waiting-time distribution). Over six
    # seeds, 50k simulated requests put the rate within 2.5% of it (20k: 4%, 4k: 9%): tolerance 5%.
    truth = sustainable_rate_rps("M/D/1", D_US / 1e3, 100.0)
    got = sustainable_rate(NO_BATCHING, ServiceModel(D_US, 0.0), 100_000.0, requests=50_000, seed=2)
    assert got.rate_rps == pytest.approx(truth, rel=0.05)
    assert got.latency_us <= 100_000.0
    # A budget below one service time holds no rate at all.
    assert sustainable_rate(NO_BATCHING, ServiceModel(D_US, 0.0), 9_000.0).rate_rps == 0.0


def _kiefer_wolfowitz_waits(arrivals_s: np.ndarray, service_s: float, servers: int) -> np.ndarray:
    """FIFO G/D/c waiting times by the Kiefer-Wolfowitz workload recursion: a method unrelated to
    the simulator's event loop (no instances, no events: one sorted workload vector)."""
    work = np.zeros(servers)
    waits = np.empty(len(arrivals_s))
    for i in range(len(arrivals_s)):
        waits[i] = work[0]
        work[0] += service_s
        gap = arrivals_s[i + 1] - arrivals_s[i] if i + 1 < len(arrivals_s) else 0.0
        work = np.sort(np.maximum(work - gap, 0.0))
    return waits


def _erlang_c_wait_s(rate: float, service_s: float, c: int) -> float:
    a = rate * service_s
    rho = a / c
    tail = a**c / math.factorial(c) / (1 - rho)
    p_wait = tail / (sum(a**k / math.factorial(k) for k in range(c)) + tail)
    return p_wait / (c / service_s - rate)


def test_mdc_waits_equal_an_independent_recursion_on_the_same_arrivals():
    c, rho, n = 3, 0.85, 20_000
    service_s = D_US / 1e6
    arrivals = unit_arrivals("poisson", n, seed=3) / (rho * c / service_s)
    waits = _kiefer_wolfowitz_waits(arrivals, service_s, c)
    lat = _latencies_us(BatcherConfig(instances=c), ServiceModel(D_US, 0.0), arrivals.tolist())
    # FIFO with deterministic service: both methods give every request the same wait (to rounding).
    np.testing.assert_allclose(lat, (waits + service_s) * 1e6, atol=1e-3)


def test_mdc_mean_wait_matches_cosmetatos_approximation():
    # Cosmetatos (1976): Wq(M/D/c) ~ Wq(M/M/c)/2 * (1 + (1-rho)(c-1)(sqrt(4+5c)-2)/(16 rho c)),
    # within about 2% of the exact figure for c <= 5 at moderate load; 200k simulated requests at
    # rho 0.7 carry about 2% of their own: tolerance 6%.
    c, rho = 3, 0.7
    service_s = D_US / 1e6
    rate = rho * c / service_s
    p = simulate(BatcherConfig(instances=c), ServiceModel(D_US, 0.0), Load("poisson", rate_rps=rate),
                 requests=200_000, seed=4)  # fmt: skip
    mmc = _erlang_c_wait_s(rate, service_s, c)
    cosmetatos = 0.5 * mmc * (1 + (1 - rho) * (c - 1) * (math.sqrt(4 + 5 * c) - 2) / (16 * rho * c))
    assert p.mean_wait_us == pytest.approx(cosmetatos * 1e6, rel=0.06)


def test_a_full_preferred_batch_is_sent_when_its_last_request_arrives():
    # Arrivals every 1 ms, max_batch_size 4 (the preferred size by default), a long queue delay:
    # the batch leaves when its 4th request arrives, runs 2 + 0.5*4 = 4 ms, and the instance is free
    # exactly when the next batch's 4th request arrives. Latencies: 3+4, 2+4, 1+4, 0+4 ms.
    cfg = BatcherConfig(max_batch_size=4, dynamic_batching=True, max_queue_delay_us=50_000)
    lat = _latencies_us(cfg, ServiceModel(2_000, 500), [i * 1e-3 for i in range(400)])
    np.testing.assert_allclose(lat, np.tile([7_000, 6_000, 5_000, 4_000], 100), atol=1e-3)


def test_a_lone_request_waits_the_queue_delay_then_runs_alone():
    cfg = BatcherConfig(max_batch_size=8, dynamic_batching=True, max_queue_delay_us=5_000)
    lat = _latencies_us(cfg, ServiceModel(2_000, 500), [i * 0.02 for i in range(50)])
    np.testing.assert_allclose(lat, 5_000 + 2_500, atol=1e-3)
    # No queue delay: sent at once.
    lat0 = _latencies_us(BatcherConfig(8, True, (), 0.0), ServiceModel(2_000, 500), [i * 0.02 for i in range(50)])
    np.testing.assert_allclose(lat0, 2_500, atol=1e-3)


def test_a_smaller_preferred_size_is_sent_before_the_delay_runs_out():
    # Preferred 2 of max 8: every 2nd arrival closes a batch of 2 (1 + 0.1*2 = 1.2 ms).
    cfg = BatcherConfig(8, True, (2,), 100_000)
    lat = _latencies_us(cfg, ServiceModel(1_000, 100), [i * 2e-3 for i in range(100)])
    np.testing.assert_allclose(lat, np.tile([2_000 + 1_200, 1_200], 50), atol=1e-3)


def test_a_burst_is_cut_at_the_preferred_size_and_the_next_payload_formed_ahead():
    # 10 requests at once; preferred 4, max 8, delay 3 ms, 1 ms per item. The first batch is the
    # preferred 4 (0-4 ms). While it runs the batcher forms the next preferred 4 ahead (a payload
    # slot is free: RateLimiter::PayloadSlotAvailable) and then waits with an empty queue; the last
    # 2 do not wake it (2 < next_preferred_batch_size_ 4, DynamicBatchScheduler::Enqueue). At 4 ms
    # the instance takes the waiting 4 (4-8 ms) and the batcher, woken, sends the 2 left, past
    # their delay, as a payload of their own (8-10 ms). Reading the queue only when the instance is
    # free would have sent the last 6 together (4-10 ms).
    cfg = BatcherConfig(8, True, (4,), 3_000)
    p = simulate(cfg, ServiceModel(0, 1_000), Load("trace", arrivals_s=(0.0,) * 10))
    lat = _latencies_us(cfg, ServiceModel(0, 1_000), [0.0] * 10)
    np.testing.assert_allclose(lat, [4_000] * 4 + [8_000] * 4 + [10_000] * 2, atol=1e-3)
    assert p.mean_batch == pytest.approx(10 / 3)


def test_a_waiting_payload_stops_growing_with_a_queue_delay_and_keeps_growing_without():
    # One instance, max_batch_size 8, 10 ms an execution at any size. The first request runs alone;
    # while it runs, one request arrives at 1 ms and four at 2.0-2.3 ms.
    svc = ServiceModel(10_000, 0)
    arrivals = [0.0, 1e-3, 2e-3, 2.1e-3, 2.2e-3, 2.3e-3]
    from perfkit.predict._sim import _run_open

    # Queue delay 0.5 ms: the request at 1 ms waits its delay and is formed into a payload alone
    # at 1.5 ms (a payload slot is free); the batcher had set next_preferred_batch_size_ to 8 while
    # it waited, so the four later arrivals do not wake it and wait for the payload after it.
    # Batches 1, 1, 4 (reading the queue only when the instance is free would give 1, 5).
    sizes, _ = _run_open(arrivals, BatcherConfig(8, True, (), 500), svc, Contention())
    assert sizes.tolist() == [1, 1, 4]
    # No queue delay: next_preferred_batch_size_ stays 0, every arrival wakes the batcher and joins
    # the waiting payload, which is not a preferred size. Batches 1, 5.
    sizes0, _ = _run_open(arrivals, BatcherConfig(8, True, (), 0.0), svc, Contention())
    assert sizes0.tolist() == [1, 5]


def test_without_dynamic_batching_each_request_is_its_own_execution():
    cfg = BatcherConfig(max_batch_size=8, dynamic_batching=False, instances=1)
    p = simulate(cfg, ServiceModel(1_000, 1_000), Load("constant", rate_rps=100), requests=500)
    assert p.mean_batch == 1.0 and p.p99_us == pytest.approx(2_000)


@pytest.mark.parametrize("clients", [1, 4])
def test_closed_loop_throughput_and_latency_are_exact(clients: int):
    # No batching, one instance, D = 10 ms, no overhead: N clients keep the instance busy, each
    # request waits for the N - 1 ahead of it: latency N*D, throughput 1/D.
    p = simulate(NO_BATCHING, ServiceModel(D_US, 0.0), Load("concurrency", concurrency=clients), requests=2_000)
    assert p.completed_rps == pytest.approx(100.0, rel=1e-3)
    assert p.p50_us == pytest.approx(clients * D_US, rel=1e-6) and p.p99_us == pytest.approx(clients * D_US, rel=1e-6)


@pytest.mark.parametrize("clients", [1, 4, 8])
def test_closed_loop_clients_answered_together_travel_as_one_batch_behind_a_queue_delay(clients: int):
    # Batching with a 5 ms queue delay, max_batch_size 8: the N clients answered together arrive
    # together; fewer than 8 wait out the delay of the first (no arrival makes the preferred 8,
    # DynamicBatchScheduler::Enqueue), 8 go at once. Latency (D if N < 8) + s(N) + overhead,
    # N / that req/s, every batch N.
    svc = ServiceModel(30_000, 300, overhead_us=500)  # the hungry fixture's fp32 figures
    b = simulate(BatcherConfig(8, True, (), 5_000), svc, Load("concurrency", concurrency=clients), requests=2_000)
    cycle_us = (5_000 if clients < 8 else 0) + 30_000 + 300 * clients + 500
    assert b.mean_batch == pytest.approx(clients) and b.p99_us == pytest.approx(cycle_us, rel=1e-6)
    assert b.p50_us == pytest.approx(cycle_us, rel=1e-6)
    assert b.completed_rps == pytest.approx(clients / (cycle_us / 1e6), rel=1e-3)


def test_a_closed_loop_without_queue_delay_splits_into_the_first_request_and_the_rest():
    # No queue delay, one instance: of N clients sending together the first is handed out alone
    # to the idle instance (Triton's rule, as in the open loop) and the other N - 1 are formed into
    # a payload while it runs. Each group comes back while the other runs, so batches of 1 and
    # N - 1 alternate: mean batch N/2, every request s(1) + s(N-1), N / (s(1) + s(N-1)) req/s.
    svc = ServiceModel(30_000, 300, overhead_us=500)
    b = simulate(BatcherConfig(8, True), svc, Load("concurrency", concurrency=4), requests=2_000)
    cycle_us = (30_000 + 300) + (30_000 + 300 * 3)
    assert b.mean_batch == pytest.approx(2.0)
    assert b.p50_us == pytest.approx(cycle_us, rel=1e-6) and b.p99_us == pytest.approx(cycle_us, rel=1e-6)
    assert b.completed_rps == pytest.approx(4 / (cycle_us / 1e6), rel=1e-3)


def test_a_closed_loop_batches_as_the_open_loop_does_on_the_arrivals_it_made():
    # The closed loop's arrivals, given to the rules as read (_reference.py), make the same batches:
    # one batcher model, whatever the load. And each request past the first N arrives an overhead
    # after some batch ended (its client's last answer).
    from perfkit.predict._sim import _run_closed, _run_open_reference

    svc = ServiceModel(2_000, 400, overhead_us=700)
    for cfg in (BatcherConfig(8, True, (4,), 1_500, instances=2), BatcherConfig(16, True, (), 0.0, instances=3),
                BatcherConfig(instances=2)):  # fmt: skip
        closed = _run_closed(12, 3_000, cfg, svc, Contention(0.3))
        assert closed is not None
        arr, sizes, ends = closed
        ref = _run_open_reference(arr.tolist(), cfg, svc, Contention(0.3))
        assert ref is not None
        assert sizes.tolist() == list(ref[0]) and ends.tolist() == pytest.approx(list(ref[1]), abs=1e-12)
        answered = np.sort(np.repeat(ends, sizes)) + 700e-6
        assert np.all(np.diff(arr) >= 0) and np.all(arr[:12] == 0.0)
        assert np.isin(np.round(arr[12:], 12), np.round(answered, 12)).all()


def test_instances_on_a_shared_device_take_turns():
    svc = ServiceModel(D_US, 0.0)
    load = Load("concurrency", concurrency=16)
    one = simulate(BatcherConfig(instances=1), svc, load, requests=4_000).completed_rps
    independent = simulate(BatcherConfig(instances=4), svc, load, requests=4_000).completed_rps
    shared = simulate(BatcherConfig(instances=4), svc, load, Contention(1.0), requests=4_000).completed_rps
    half = simulate(BatcherConfig(instances=4), svc, load, Contention(0.5), requests=4_000).completed_rps
    assert independent == pytest.approx(4 * one, rel=1e-3)
    assert shared == pytest.approx(one, rel=1e-3)
    assert half == pytest.approx(2 * one, rel=1e-3)  # min(c, 1/f) = 2
    assert ceiling_rps(BatcherConfig(instances=4), svc, Contention(0.5)) == pytest.approx(200.0)


def test_batching_raises_the_sustainable_rate_of_a_batch_hungry_model():
    svc = ServiceModel(16_500, 165, overhead_us=500)  # the hungry fixture at fp16
    rates = {
        b: sustainable_rate(BatcherConfig(b, True, (), 0.0), svc, 50_000.0, requests=3_000).rate_rps for b in (1, 8, 32)
    }
    assert rates[1] < rates[8] < rates[32]
    # A batch of b every s(b) at most: never past the capacity bound.
    for b, r in rates.items():
        assert r <= ceiling_rps(BatcherConfig(b, True), svc, Contention())


def test_scoring_keeps_the_best_k_and_bounds_the_rest():
    svc = ServiceModel(16_500, 165, overhead_us=500)
    space = [BatcherConfig(b, True, (), d, c) for b in (1, 4, 16, 64) for d in (0.0, 2_000.0, 10_000.0) for c in (1, 2)]
    full = score_space(space, svc, 60_000.0, contention=Contention(1.0), requests=2_000)
    kept = score_space(space, svc, 60_000.0, contention=Contention(1.0), requests=2_000, keep=3)
    assert [r.config for r in full[:3]] == [r.config for r in kept[:3]]
    assert all(not r.bounded for r in full) and any(r.bounded for r in kept)
    assert all(r.rate_rps >= kept[2].rate_rps for r in kept[:3])
    assert [r.rate_rps for r in full] == sorted((r.rate_rps for r in full), reverse=True)


def test_bad_inputs_are_one_line_usage_errors():
    with pytest.raises(UsageError, match="shared_fraction"):
        Contention(1.5)
    with pytest.raises(UsageError, match="preferred_batch_sizes"):
        BatcherConfig(4, True, (8,))
    with pytest.raises(UsageError, match="load kind"):
        Load("bursty", rate_rps=1)
    with pytest.raises(UsageError, match="budget"):
        sustainable_rate(NO_BATCHING, ServiceModel(D_US, 0.0), 0.0)


def test_the_simulator_is_deterministic_for_a_seed():
    load = Load("poisson", rate_rps=70)
    a = simulate(NO_BATCHING, ServiceModel(D_US, 0.0), load, requests=3_000, seed=9)
    b = simulate(NO_BATCHING, ServiceModel(D_US, 0.0), load, requests=3_000, seed=9)
    assert a == b


def test_the_request_path_is_lindleys_recursion_on_the_arrivals():
    from perfkit.predict._sim import through_request_path

    due = np.sort(np.random.default_rng(3).uniform(0, 0.05, 500))
    host_s = 150e-6
    want, last = [], -math.inf
    for t in due:  # one request at a time, host_s each: it leaves when the one before it is through
        last = max(float(t), last + host_s)
        want.append(last)
    got = through_request_path(due, host_s)
    assert np.allclose(got, want, rtol=0, atol=1e-12)
    assert (got >= due).all() and (np.diff(got) >= host_s - 1e-12).all()
    assert through_request_path(due, 0.0) is due


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_a_request_path_that_holds_the_rate_queues_as_md1(rho: float):
    # Execution 1 us, the path 1 ms a request: the path is an M/D/1 queue ahead of an idle
    # instance, so the mean latency is the execution plus Pollaczek-Khinchine's wait on the path.
    host_us = 1_000.0
    rate = rho / (host_us / 1e6)
    svc = ServiceModel(1.0, 0.0, host_us=host_us)
    p = simulate(NO_BATCHING, svc, Load("poisson", rate_rps=rate), requests=100_000, seed=1)
    pk_us = rho * host_us / (2 * (1 - rho))
    assert p.mean_us - 1.0 == pytest.approx(pk_us, rel=0.05 if rho == 0.5 else 0.09)
    # Without the path the same load barely waits at all.
    alone = simulate(NO_BATCHING, ServiceModel(1.0, 0.0), Load("poisson", rate_rps=rate), requests=100_000, seed=1)
    assert alone.mean_us < 1.1


def test_no_config_is_predicted_past_what_the_request_path_lets_through():
    # A cheap batching model (8 ms for 128) sustains thousands of req/s on its instance; a path of
    # 250 us a request caps every config at 4,000 req/s, and the bisection stays under it.
    fast = ServiceModel(500.0, 60.0)
    held = ServiceModel(500.0, 60.0, host_us=250.0)
    cfg = BatcherConfig(128, True, (), 1_000.0, 1)
    assert ceiling_rps(cfg, fast, Contention()) > 10_000
    assert ceiling_rps(cfg, held, Contention()) == pytest.approx(4_000.0)
    free = sustainable_rate(cfg, fast, 20_000.0, requests=20_000)
    capped = sustainable_rate(cfg, held, 20_000.0, requests=20_000)
    assert free.rate_rps > 8_000
    assert 3_200 < capped.rate_rps < 4_000
    with pytest.raises(UsageError, match="host_us"):
        ServiceModel(1.0, 0.0, host_us=-1.0)
