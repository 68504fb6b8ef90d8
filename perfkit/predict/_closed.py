"""Each config's figure under a closed loop: N clients, each sending its next request when its
last is answered (perf_analyzer's concurrency mode, docs/perf_analyzer.md "Concurrency Mode" in
triton-inference-server/perf_analyzer), the highest concurrency whose latency percentile stays
within a budget and the highest throughput within it, found as the measured closed-loop tune finds its
trial's figure (tuner/_find_load.py: concurrencies up to --max-concurrency; tuner/_verdict.py
judge_trial: the highest throughput among the levels within the budget); and a space scored by it.

The search walks concurrencies 1, 2, 4, ... until one misses the budget, then bisects the
concurrencies between the last that held and the first that did not: the latency of a closed
loop grows with its clients (each waits behind the others), so the concurrencies within the
budget are the ones up to the highest. The figure is the highest throughput among those tried
that held, at most what the request path lets through (ceiling_rps): the closed loop does not
queue on the path (_sim._run_closed)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from perfkit.errors import UsageError
from perfkit.predict._model import BatcherConfig, Contention, Load, Prediction, ServiceModel
from perfkit.predict._rate import RateResult, ceiling_rps, floor_us, score_each
from perfkit.predict._sim import DEFAULT_REQUESTS, simulate_within


def sustainable_concurrency(
    cfg: BatcherConfig,
    service: ServiceModel,
    budget_us: float,
    *,
    max_concurrency: int,
    percentile: float = 99.0,
    contention: Contention | None = None,
    requests: int = DEFAULT_REQUESTS,
) -> RateResult:
    """The closed-loop figure of one config: concurrency the highest within 1..max_concurrency
    whose simulated `percentile` of latency is within budget_us (its latency and mean batch
    given), rate_rps the highest throughput among the concurrencies tried that held (0 for both:
    even one client misses the budget). Raises
    UsageError for a budget that is not positive or a max_concurrency under 1."""
    if budget_us <= 0:
        raise UsageError(f"latency budget {budget_us} us: must be > 0", hint="give a positive budget")
    if max_concurrency < 1:
        raise UsageError(f"max_concurrency={max_concurrency}: must be at least 1", hint="give 1 or more clients")
    contention = contention or Contention()
    floor = floor_us(cfg, service)
    if floor > budget_us:
        return RateResult(cfg, 0.0, floor, 1.0, concurrency=0)
    held: dict[int, Prediction] = {}
    tried: set[int] = set()

    def holds(c: int) -> bool:
        if c not in tried:
            tried.add(c)
            p = simulate_within(cfg, service, Load("concurrency", concurrency=c), contention,
                                requests=max(requests, 20 * c), budget_us=budget_us, percentile=percentile)  # fmt: skip
            if p is not None and p.percentile_us(percentile) <= budget_us:
                held[c] = p
        return c in held

    lo, hi = 0, max_concurrency + 1  # lo holds (0: none yet), hi does not (past the largest)
    c = 1
    while c <= max_concurrency:
        if not holds(c):
            hi = c
            break
        lo = c
        c = max_concurrency if c < max_concurrency < 2 * c else 2 * c
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if holds(mid):
            lo = mid
        else:
            hi = mid
    if not held:
        return RateResult(cfg, 0.0, floor, 1.0, concurrency=0)
    top = max(held)
    best = max(p.completed_rps for p in held.values())
    rate = min(best, ceiling_rps(cfg, service, contention))
    return RateResult(cfg, rate, held[top].percentile_us(percentile), held[top].mean_batch, concurrency=top)


def score_space_closed(
    configs: Iterable[BatcherConfig],
    service: ServiceModel | Sequence[ServiceModel],
    budget_us: float,
    *,
    max_concurrency: int,
    percentile: float = 99.0,
    contention: Contention | None = None,
    requests: int = DEFAULT_REQUESTS,
    keep: int | None = None,
) -> list[RateResult]:
    """Every config's closed-loop figure (sustainable_concurrency), best first, as score_space
    scores the open loop: with keep=k a config whose ceiling (ceiling_rps) cannot reach the k-th
    best figure found so far comes back bounded (its bound as rate_rps), and configs the simulator
    cannot tell apart (behaviour) are simulated once."""
    contention = contention or Contention()

    def figure(cfg: BatcherConfig, model: ServiceModel, bound: float) -> RateResult:
        return sustainable_concurrency(cfg, model, budget_us, max_concurrency=max_concurrency,
                                       percentile=percentile, contention=contention, requests=requests)  # fmt: skip

    return score_each(configs, service, contention, figure, keep=keep)
