"""The response cache in the simulator: a hit is answered before the queue, in a measured lookup time.

Triton looks a request up in its response cache in DynamicBatchScheduler::Enqueue, before the
request is queued for the batcher or handed to an instance (triton-inference-server/core
src/dynamic_batch_scheduler.cc: CacheLookUp, then "If there was a cache hit then try sending the
cached response and release the request"; the lookup itself, src/scheduler_utils.cc
CacheLookUpUtil, hashes the request's inputs and asks the cache, src/cache_manager.cc
TritonCacheManager / TritonCache::Lookup). A miss runs as if there were no cache and its response is
inserted as it is sent (DynamicBatchScheduler::DelegateResponse: cache->Insert on the response).

The rule simulated: each request but the first is a hit with probability `hit_fraction` (the
workload's stated repeat fraction: a repeat's input was seen, its answer cached), answered
`lookup_us` after it reaches the server; every other request takes the batcher and instances.
What it leaves out: a repeat whose original is still running misses in Triton (nothing is
inserted before the original completes), so at a high rate the hit rate is a little under the
repeat fraction; and the load generator spreads its repeats evenly, which makes the misses'
stream smoother than the thinned Poisson stream simulated here (the prediction is the pessimistic
one). Calibration: `lookup_us_from` reads a level's cache_hit_count / cache_hit_duration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfkit.errors import UsageError
from perfkit.records import ServerStats


@dataclass(frozen=True)
class ResponseCache:
    """A cache on: the share of requests it answers, and a hit's time in the server (us)."""

    hit_fraction: float
    lookup_us: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.hit_fraction < 1.0:
            raise UsageError(f"cache hit_fraction={self.hit_fraction}: must be within [0, 1)", hint="give 0.5 for half")
        if self.lookup_us < 0:
            raise UsageError(f"cache lookup_us={self.lookup_us}: must be >= 0", hint="give 0 or more")


def hits(requests: int, cache: ResponseCache, seed: int = 0) -> np.ndarray:
    """Which requests (in arrival order) the cache answers: a seeded Bernoulli draw, never the first."""
    mask = np.random.default_rng([seed, 0xCAC4E]).random(requests) < cache.hit_fraction
    if requests:
        mask[0] = False  # nothing is cached before the first answer
    return mask


def lookup_us_from(stats: ServerStats) -> float | None:
    """A hit's mean time in the server (cache_hit_duration / cache_hit_count); None without hits."""
    return stats.cache_hit_avg_us if stats.cache_hit_count > 0 else None
