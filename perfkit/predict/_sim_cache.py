"""The simulator with the response cache on (the rule, its citations and what it leaves out:
predict/_cache.py): the same event loop as predict/_sim.py, run on the requests the cache misses."""

from __future__ import annotations

import numpy as np

from perfkit.errors import UsageError
from perfkit.predict._cache import ResponseCache, hits
from perfkit.predict._model import BatcherConfig, Contention, Load, Prediction, ServiceModel
from perfkit.predict._sim import (
    DEFAULT_REQUESTS,
    _run_open,
    _service_array,
    prediction_of,
    through_request_path,
    unit_arrivals,
)


def simulate_cached(
    cfg: BatcherConfig,
    service: ServiceModel,
    load: Load,
    contention: Contention | None = None,
    *,
    cache: ResponseCache,
    requests: int = DEFAULT_REQUESTS,
    seed: int = 0,
    unit: np.ndarray | None = None,
    budget_us: float | None = None,
    percentile: float = 99.0,
) -> Prediction | None:
    """simulate_within with the response cache on: its hits (_cache.hits) answered lookup_us after
    they pass the request path, the misses run through the batcher and instances as the whole stream
    would be. None where the percentile is past budget_us. Raises UsageError for a closed-loop or
    trace load (the cache is simulated under open-loop arrivals)."""
    if load.kind not in ("poisson", "constant"):
        raise UsageError(f"the response cache is simulated under open-loop arrivals, not a {load.kind} load")
    base = unit if unit is not None else unit_arrivals(load.kind, requests, seed)
    due = base / load.rate_rps
    served = through_request_path(due, service.host_us / 1e6)
    hit = hits(len(due), cache, seed)
    miss = ~hit
    run = _run_open(served[miss], cfg, service, contention or Contention())
    assert run is not None  # no give-up bound: never cut short
    sizes = np.asarray(run[0], dtype=np.int64)
    done = np.empty(len(due), dtype=np.float64)
    done[miss] = np.repeat(np.asarray(run[1]), sizes)
    done[hit] = served[hit] + cache.lookup_us / 1e6
    exec_s = np.zeros(len(due), dtype=np.float64)
    exec_s[miss] = np.repeat(_service_array(service, int(sizes.max(initial=1)))[sizes], sizes)
    exec_s[hit] = cache.lookup_us / 1e6
    p = prediction_of(due, done, sizes, service, exec_s)
    if budget_us is not None and p.percentile_us(percentile) > budget_us:
        return None
    return p
