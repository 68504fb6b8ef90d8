"""The batcher simulator under a queue policy (perfkit.predict._simqueue) against closed forms.

A bounded queue with max_batch_size 1 and one instance is an M/D/1/K queue (Poisson arrivals,
deterministic service D, at most K requests in the system) with K = max_queue_size + 1: the queue
holds every request not yet executing (no payload waits ahead under a policy, _simqueue rule 1) and
one executes. Its exact figures come from the chain embedded at departures (the M/G/1/K analysis,
Gross & Harris, Fundamentals of Queueing Theory, section 5.1.9):

- a_j = e^{-rho} rho^j / j!: the chance of j arrivals during one service (rho = lambda D);
- the number left behind by a departure, 0..K-1, moves from i to min(max(i-1, 0) + A, K-1);
- with pi its stationary law, the time-average law is p_j = pi_j / (pi_0 + rho) for j < K and
  p_K = 1 - 1 / (pi_0 + rho); Poisson arrivals see it (PASTA), so the blocking probability is p_K;
- the mean wait in queue of an admitted request is L / (lambda (1 - p_K)) - D (Little's law), with
  L = sum_j j p_j.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfkit.errors import UsageError
from perfkit.predict import BatcherConfig, Contention, Load, ServiceModel, simulate

SERVICE_US = 10_000.0
REQUESTS = 60_000


def md1k(rho: float, k: int) -> tuple[float, float]:
    """(blocking probability, mean wait in queue / D) of M/D/1/K, from the embedded chain."""
    a = [math.exp(-rho) * rho**j / math.factorial(j) for j in range(k + 1)]
    chain = np.zeros((k, k))
    for i in range(k):
        base = max(i - 1, 0)
        for j in range(base, k - 1):
            chain[i, j] = a[j - base]
        chain[i, k - 1] = 1.0 - chain[i, : k - 1].sum()
    # pi = pi P with sum(pi) = 1: the left null vector of P - I, normalised
    system = np.vstack([chain.T - np.eye(k), np.ones(k)])
    pi = np.linalg.lstsq(system, np.r_[np.zeros(k), 1.0], rcond=None)[0]
    p = np.r_[pi / (pi[0] + rho), 1.0 - 1.0 / (pi[0] + rho)]
    blocking = float(p[k])
    in_system = float(np.dot(np.arange(k + 1), p))
    wait = in_system / (rho * (1 - blocking)) - 1.0  # in units of D (lambda = rho / D)
    return blocking, wait


def _bounded(max_queue_size: int, **kw: object) -> BatcherConfig:
    return BatcherConfig(max_batch_size=1, dynamic_batching=True, max_queue_size=max_queue_size, **kw)  # type: ignore[arg-type]  # the test's keyword table


@pytest.mark.parametrize(("rho", "queue"), [(0.8, 2), (1.2, 3), (2.0, 5)])
def test_a_bounded_queue_matches_md1k_blocking_and_mean_wait(rho: float, queue: int):
    blocking, wait_d = md1k(rho, queue + 1)
    p = simulate(
        _bounded(queue), ServiceModel(SERVICE_US, 0.0), Load("poisson", rate_rps=rho / (SERVICE_US / 1e6)),
        requests=REQUESTS, seed=3,
    )  # fmt: skip
    # Within a few standard errors of REQUESTS correlated draws (the chain mixes in a few services).
    assert p.rejected_fraction == pytest.approx(blocking, abs=0.012)
    assert p.mean_wait_us / SERVICE_US == pytest.approx(wait_d, rel=0.05, abs=0.02)
    # Nothing admitted waits longer than the queue ahead of it: at most `queue` services, then its own.
    assert p.p99_us <= (queue + 1) * SERVICE_US * (1 + 1e-9)


def test_the_closed_form_itself_agrees_with_its_limits():
    # K = 1 (no queue): M/D/1/1 blocks with probability rho / (1 + rho) (Erlang's loss formula for
    # one server: the blocking depends on the service time's mean only).
    assert md1k(0.5, 1)[0] == pytest.approx(0.5 / 1.5)
    # A long queue at light load: the M/D/1 mean wait rho D / (2 (1 - rho)) (Pollaczek-Khinchine).
    assert md1k(0.5, 40)[1] == pytest.approx(0.5 / (2 * 0.5), rel=1e-6)


def test_unbounded_policy_free_config_never_rejects():
    p = simulate(BatcherConfig(max_batch_size=1, dynamic_batching=True), ServiceModel(SERVICE_US, 0.0),
                 Load("poisson", rate_rps=80.0), requests=5_000)  # fmt: skip
    assert p.rejected_fraction == 0.0


def test_a_reject_timeout_bounds_every_served_wait_and_delay_rejects_none():
    service = ServiceModel(SERVICE_US, 0.0)
    over = Load("poisson", rate_rps=150.0)  # 1.5x what one instance serves
    timeout_us = 25_000.0
    reject = simulate(_bounded(0, queue_timeout_us=timeout_us), service, over, requests=20_000, seed=1)
    # A request still queued at its deadline is rejected: a served one waited at most the timeout.
    assert reject.rejected_fraction > 0.2
    assert reject.p99_us <= timeout_us + SERVICE_US + 1e-6
    delay = simulate(_bounded(0, queue_timeout_us=timeout_us, timeout_action="delay"), service, over,
                     requests=20_000, seed=1)  # fmt: skip
    assert delay.rejected_fraction == 0.0
    # DELAY serves the requests still in time first: most meet the timeout, the late ones wait longest.
    assert delay.p50_us <= timeout_us + SERVICE_US < delay.p99_us


def test_a_queue_policy_in_the_closed_loop_is_refused_clearly():
    with pytest.raises(UsageError, match="open loop only"):
        simulate(_bounded(4), ServiceModel(SERVICE_US, 0.0), Load("concurrency", concurrency=8), Contention())
