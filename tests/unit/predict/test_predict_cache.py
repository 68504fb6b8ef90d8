"""The response cache in the simulator against the closed form: a Poisson stream thinned by the
hit rate leaves a Poisson stream of misses, so one instance of deterministic service is M/D/1 at
the misses' rate, and the hits take the lookup time."""

from __future__ import annotations

import numpy as np
import pytest

from perfkit.errors import UsageError
from perfkit.predict import (
    BatcherConfig,
    Load,
    ResponseCache,
    ServiceModel,
    lookup_us_from,
    simulate,
    simulate_cached,
)
from perfkit.predict._cache import hits
from perfkit.records import ServerStats

S_US = 10_000.0  # one request an execution, 10 ms
LOOKUP_US = 100.0


def _md1_mean_us(rate_rps: float) -> float:
    """M/D/1's mean time in system (Pollaczek-Khinchine): S + rho S / (2 (1 - rho))."""
    rho = rate_rps * S_US / 1e6
    return S_US + rho * S_US / (2 * (1 - rho))


@pytest.mark.parametrize(("rate_rps", "hit"), [(150.0, 0.5), (80.0, 0.25), (300.0, 0.8)])
def test_the_mean_latency_is_the_thinned_streams_md1_and_the_hits_lookup(rate_rps: float, hit: float) -> None:
    service = ServiceModel(fixed_us=S_US, per_item_us=0.0)
    p = simulate_cached(
        BatcherConfig(), service, Load("poisson", rate_rps=rate_rps), cache=ResponseCache(hit, LOOKUP_US),
        requests=200_000, seed=3,
    )  # fmt: skip
    assert p is not None
    expected = hit * LOOKUP_US + (1 - hit) * _md1_mean_us(rate_rps * (1 - hit))
    assert p.mean_us == pytest.approx(expected, rel=0.05)
    assert p.completed_rps == pytest.approx(rate_rps, rel=0.03)  # every request answered: the queue holds


def test_half_the_requests_hitting_doubles_what_one_instance_sustains() -> None:
    service = ServiceModel(fixed_us=S_US, per_item_us=0.0)
    load = Load("poisson", rate_rps=150.0)  # 1.5x one instance's 100 req/s
    without = simulate(BatcherConfig(), service, load, requests=20_000, seed=1)
    cached = simulate_cached(BatcherConfig(), service, load, cache=ResponseCache(0.5, LOOKUP_US), requests=20_000)
    assert cached is not None
    assert without.p99_us > 1e6  # a backlog: seconds
    assert cached.p99_us < 100_000


def test_hits_are_the_stated_share_and_never_the_first_request() -> None:
    mask = hits(100_000, ResponseCache(0.3), seed=5)
    assert not mask[0]
    assert mask.mean() == pytest.approx(0.3, abs=0.01)
    assert np.array_equal(mask, hits(100_000, ResponseCache(0.3), seed=5))


def test_a_budget_past_the_percentile_gives_none_and_closed_loops_are_refused() -> None:
    service = ServiceModel(fixed_us=S_US, per_item_us=0.0)
    cache = ResponseCache(0.5, LOOKUP_US)
    assert simulate_cached(BatcherConfig(), service, Load("poisson", rate_rps=190.0), cache=cache,
                           budget_us=20_000) is None  # fmt: skip
    with pytest.raises(UsageError, match="open-loop"):
        simulate_cached(BatcherConfig(), service, Load("concurrency", concurrency=2), cache=cache)
    with pytest.raises(UsageError):
        ResponseCache(1.0)


def test_calibration_reads_a_hits_time_from_the_model_statistics() -> None:
    stats = ServerStats("m", 100, 50, 50, 0, 0, 0, 0, 0, cache_hit_count=50, cache_hit_avg_us=42.0)
    assert lookup_us_from(stats) == 42.0
    assert lookup_us_from(ServerStats("m", 100, 100, 100, 0, 0, 0, 0, 0)) is None
