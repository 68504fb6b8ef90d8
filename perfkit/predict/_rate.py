"""Each config's sustainable rate: the highest arrival rate whose latency percentile stays within
a budget, by bisection on the simulated rate; and a whole space scored with it."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from perfkit.errors import UsageError
from perfkit.predict._model import BatcherConfig, Contention, Load, Prediction, ServiceModel
from perfkit.predict._sim import DEFAULT_REQUESTS, simulate_within, unit_arrivals

BISECTION_STEPS = 8  # the bracket [1/16, 1] of the capacity bound, geometric: to within 1.1%
LOWEST_RATE_FRACTION = 1e-4


def capacity_rps(cfg: BatcherConfig, service: ServiceModel, contention: Contention) -> float:
    """An upper bound on the completed rate of `cfg`: every execution full (the largest batch the
    batcher sends), every instance busy, the shared device never idle."""
    size = cfg.max_batch_size if cfg.batching else 1
    best = 0.0
    for n in range(1, size + 1):
        s = service.service_us(n) / 1e6
        best = max(best, n / s * contention.instance_scaling(cfg.instances))
    return best


@dataclass(frozen=True)
class RateResult:
    """One config's predicted sustainable rate (0: even a light load misses the budget), with the
    prediction at that rate; `bounded` when it was not simulated because its capacity bound was
    already below the rates kept (rate_rps then holds that bound)."""

    config: BatcherConfig
    rate_rps: float
    latency_us: float
    mean_batch: float
    bounded: bool = False


def sustainable_rate(
    cfg: BatcherConfig,
    service: ServiceModel,
    budget_us: float,
    *,
    percentile: float = 99.0,
    contention: Contention | None = None,
    arrival: str = "poisson",
    requests: int = DEFAULT_REQUESTS,
    seed: int = 0,
    unit: np.ndarray | None = None,
) -> RateResult:
    """The highest `arrival` rate ('poisson' or 'constant') at which the simulated `percentile`
    of latency is within budget_us. Raises UsageError for a budget that is not positive."""
    if budget_us <= 0:
        raise UsageError(f"latency budget {budget_us} us: must be > 0", hint="give a positive budget")
    contention = contention or Contention()
    base = unit if unit is not None else unit_arrivals(arrival, requests, seed)
    floor = floor_us(cfg, service)
    if floor > budget_us:
        return RateResult(cfg, 0.0, floor, 1.0)
    cap = capacity_rps(cfg, service, contention) * 1.02
    lo_lat, lo_batch = floor, 1.0

    def within(rate: float) -> Prediction | None:
        p = simulate_within(cfg, service, Load(arrival, rate_rps=rate), contention, requests=len(base), unit=base,
                            budget_us=budget_us, percentile=percentile)  # fmt: skip
        ok = p is not None and p.percentile_us(percentile) <= budget_us and p.completed_rps >= 0.95 * p.offered_rps
        return p if ok else None

    # Most configs sustain a good part of their bound: try 1/16 of it first, and bisect (geometric)
    # the upper bracket to ~1% in 8 steps; below that, the lower bracket down to 1e-4 of it.
    split = cap / 16
    first = within(split)
    if first is not None:
        lo, hi, steps = split, cap, BISECTION_STEPS
        lo_lat, lo_batch = first.percentile_us(percentile), first.mean_batch
    else:
        lo, hi, steps = cap * LOWEST_RATE_FRACTION, split, BISECTION_STEPS + 2
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        p = within(mid)
        if p is not None:
            lo, lo_lat, lo_batch = mid, p.percentile_us(percentile), p.mean_batch
        else:
            hi = mid
    return RateResult(cfg, lo, lo_lat, lo_batch)


def floor_us(cfg: BatcherConfig, service: ServiceModel) -> float:
    """The latency of a request alone on the server: the queue delay when the batcher waits for a
    preferred size above 1, its execution, and the overhead."""
    wait = cfg.max_queue_delay_us if cfg.batching and cfg.preferred()[0] > 1 else 0.0
    return wait + service.service_us(1) + service.overhead_us


def score_space(
    configs: Iterable[BatcherConfig],
    service: ServiceModel | Sequence[ServiceModel],
    budget_us: float,
    *,
    percentile: float = 99.0,
    contention: Contention | None = None,
    arrival: str = "poisson",
    requests: int = DEFAULT_REQUESTS,
    keep: int | None = None,
    seed: int = 0,
) -> list[RateResult]:
    """Every config's sustainable rate, best first. `service` is one model for all, or one per
    config. With keep=k only configs whose capacity bound could still reach the k-th best rate
    found so far are simulated (the others come back bounded, with their bound): the ranking of
    the best k is the same as simulating all. Duplicate configs are simulated once."""
    cfgs = list(configs)
    models = list(service) if isinstance(service, Sequence) else [service] * len(cfgs)
    if len(models) != len(cfgs):
        raise UsageError(f"{len(models)} service models for {len(cfgs)} configs", hint="give one per config")
    contention = contention or Contention()
    base = unit_arrivals(arrival, requests, seed)
    bounds = [capacity_rps(c, m, contention) for c, m in zip(cfgs, models, strict=True)]
    order = sorted(range(len(cfgs)), key=lambda i: -bounds[i])
    done: dict[tuple[BatcherConfig, ServiceModel], RateResult] = {}
    rates: list[float] = []
    out: list[RateResult] = []
    for i in order:
        key = (cfgs[i], models[i])
        if key in done:
            out.append(done[key])
            continue
        if keep is not None and len(rates) >= keep and bounds[i] <= sorted(rates, reverse=True)[keep - 1]:
            out.append(RateResult(cfgs[i], bounds[i], float("nan"), float("nan"), bounded=True))
            continue
        r = sustainable_rate(
            cfgs[i], models[i], budget_us, percentile=percentile, contention=contention, unit=base, arrival=arrival
        )
        done[key] = r
        rates.append(r.rate_rps)
        out.append(r)
    out.sort(key=lambda r: (r.bounded, -r.rate_rps))
    return out
