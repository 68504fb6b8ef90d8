"""Each config's sustainable rate: the highest arrival rate whose latency percentile stays within
a budget, by bisection on the simulated rate; and a whole space scored with it."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from perfkit.errors import UsageError
from perfkit.predict._model import BatcherConfig, Contention, Load, Prediction, ServiceModel
from perfkit.predict._sim import DEFAULT_REQUESTS, _service_array, simulate_within, unit_arrivals

BISECTION_STEPS = 8  # the bracket [1/16, 1] of the ceiling, geometric: to within 1.1%
LATTICE = 2**BISECTION_STEPS  # lattice points from the bound down to 1/16 of it (see sustainable_rate)
BOTTOM = LATTICE + 2 ** (BISECTION_STEPS + 2)  # and on down to LOWEST_RATE_FRACTION of it
LOWEST_RATE_FRACTION = 1e-4
GUESS_ABOVE = 1.02  # a like config's rate is tried this much higher first


def ceiling_rps(cfg: BatcherConfig, service: ServiceModel, contention: Contention) -> float:
    """An upper bound on the completed rate of `cfg`: every execution full (the largest batch the
    batcher sends), every instance busy, the shared device never idle; and no more than the
    request path lets through (ServiceModel.host_us)."""
    size = cfg.max_batch_size if cfg.batching else 1
    table = _service_array(service, size)[1:]
    bound = float(np.max(np.arange(1, size + 1) / table)) * contention.instance_scaling(cfg.instances)
    return min(bound, 1e6 / service.host_us) if service.host_us > 0 else bound


@dataclass(frozen=True)
class RateResult:
    """One config's predicted sustainable rate (0: even a light load misses the budget), with the
    prediction at that rate; `bounded` when it was not simulated because its ceiling was
    already below the rates kept (rate_rps then holds that bound). Under a closed loop
    (perfkit.predict._closed) rate_rps is the throughput at `concurrency`, the highest number of
    clients within the budget; None in the open loop."""

    config: BatcherConfig
    rate_rps: float
    latency_us: float
    mean_batch: float
    bounded: bool = False
    concurrency: int | None = None


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
    guess_rps: float | None = None,
    loop: str = "compiled",
) -> RateResult:
    """The highest `arrival` rate ('poisson' or 'constant') at which the simulated `percentile`
    of latency is within budget_us. guess_rps, a rate near the answer (a like config's), starts
    the search there: the same answer where holding is monotone in the rate, in fewer
    simulations. loop: the simulator's event loop (see simulate_within). Raises UsageError for a
    budget that is not positive."""
    if budget_us <= 0:
        raise UsageError(f"latency budget {budget_us} us: must be > 0", hint="give a positive budget")
    contention = contention or Contention()
    base = unit if unit is not None else unit_arrivals(arrival, requests, seed)
    floor = floor_us(cfg, service)
    if floor > budget_us:
        return RateResult(cfg, 0.0, floor, 1.0)
    cap = ceiling_rps(cfg, service, contention) * 1.02

    def within(rate: float) -> Prediction | None:
        p = simulate_within(cfg, service, Load(arrival, rate_rps=rate), contention, requests=len(base), unit=base,
                            budget_us=budget_us, percentile=percentile, loop=loop)  # fmt: skip
        ok = p is not None and p.percentile_us(percentile) <= budget_us and p.completed_rps >= 0.95 * p.offered_rps
        return p if ok else None

    # The rates tried lie on a lattice: k = 1..LATTICE is cap * 16^(-k/LATTICE) (~1.1% apart, down
    # to 1/16 of the bound), k = LATTICE..BOTTOM goes on down to LOWEST_RATE_FRACTION of it (~0.6%
    # apart); k = 0 (the bound) is taken not to hold and k = BOTTOM to hold. The answer is the
    # smallest k that holds. Without a guess: a bisection whose first try is 1/16 of the bound
    # (most configs sustain more), 9-11 tries. With a guess near the answer (a like config's):
    # from there by doubling steps until the answer is bracketed, then bisected, 2-5 tries. Both
    # find the same k wherever holding is monotone in the rate (common random numbers keep it so
    # but for the simulator's own noise near the answer).
    tried: dict[int, Prediction | None] = {}

    def holds(k: int) -> bool:
        if k >= BOTTOM:
            return True
        if k not in tried:
            tried[k] = within(_lattice_rps(cap, k))
        return tried[k] is not None

    if guess_rps is None or not 0 < guess_rps < cap:
        lo_k, hi_k = (LATTICE, 0) if holds(LATTICE) else (BOTTOM, LATTICE)
    else:
        k0 = _lattice_index(cap, guess_rps)
        step = 1
        if holds(k0):
            lo_k = k0
            while lo_k - step >= 1 and holds(lo_k - step):
                lo_k -= step
                step *= 2
            hi_k = max(0, lo_k - step)
        else:
            hi_k = k0
            while hi_k + step < BOTTOM and not holds(hi_k + step):
                hi_k += step
                step *= 2
            lo_k = min(BOTTOM, hi_k + step)
    while lo_k - hi_k > 1:
        mid = (lo_k + hi_k) // 2
        if holds(mid):
            lo_k = mid
        else:
            hi_k = mid
    best = tried.get(lo_k)
    if best is None:  # nothing tried held: the lowest rate, alone on the server
        return RateResult(cfg, _lattice_rps(cap, BOTTOM), floor, 1.0)
    return RateResult(cfg, _lattice_rps(cap, lo_k), best.percentile_us(percentile), best.mean_batch)


def _lattice_rps(cap: float, k: int) -> float:
    """The rate at lattice point k (see sustainable_rate)."""
    if k <= LATTICE:
        return float(cap * 16.0 ** (-k / LATTICE))
    return float(cap / 16 * (16 * LOWEST_RATE_FRACTION) ** ((k - LATTICE) / (BOTTOM - LATTICE)))


def _lattice_index(cap: float, rate: float) -> int:
    """The lattice point nearest a rate below the bound, within 1..BOTTOM - 1."""
    x = math.log(cap / rate)
    if x <= math.log(16.0):
        k = round(LATTICE * x / math.log(16.0))
    else:
        k = LATTICE + round((BOTTOM - LATTICE) * (x - math.log(16.0)) / -math.log(16 * LOWEST_RATE_FRACTION))
    return min(BOTTOM - 1, max(1, k))


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
    warm_start: bool = True,
    loop: str = "compiled",
    unit: np.ndarray | None = None,
) -> list[RateResult]:
    """Every config's sustainable rate, best first. `service` is one model for all, or one per
    config. With keep=k only configs whose ceiling could still reach the k-th best rate
    found so far are simulated (the others come back bounded, with their bound): the ranking of
    the best k is the same as simulating all. Configs the simulator cannot tell apart (see
    behaviour) are simulated once. warm_start: each search starts at a like config's rate (see
    sustainable_rate's guess_rps); off, each bisects from the bound. loop: see simulate_within.
    unit: the arrivals at rate 1 every config is offered scaled (a trace's, trace_unit), instead
    of `arrival`'s."""
    contention = contention or Contention()
    base = unit if unit is not None else unit_arrivals(arrival, requests, seed)
    # A config's sustainable rate as a fraction of its bound, by what it shares with others (batch
    # size, instances, preferred sizes): configs that differ only in queue delay land near each
    # other, so the last like one's fraction, a step high (a try past the answer gives up early),
    # starts the next one's search there: the same answer, in fewer simulations.
    near: dict[tuple[object, ...], float] = {}

    def figure(cfg: BatcherConfig, model: ServiceModel, bound: float) -> RateResult:
        groups = _likeness(cfg)
        frac = next((near[g] for g in groups if g in near), None) if warm_start else None
        r = sustainable_rate(
            cfg, model, budget_us, percentile=percentile, contention=contention, unit=base, arrival=arrival,
            guess_rps=None if frac is None else frac * bound * 1.02 * GUESS_ABOVE, loop=loop,
        )  # fmt: skip
        if r.rate_rps > 0:
            near.update(dict.fromkeys(groups, r.rate_rps / (bound * 1.02)))
        return r

    return score_each(configs, service, contention, figure, keep=keep)


def score_each(
    configs: Iterable[BatcherConfig],
    service: ServiceModel | Sequence[ServiceModel],
    contention: Contention,
    figure: Callable[[BatcherConfig, ServiceModel, float], RateResult],
    *,
    keep: int | None = None,
) -> list[RateResult]:
    """Every config's figure(config, its service model, its ceiling), best first, configs taken by
    ceiling (ceiling_rps) from the highest: with keep=k a config whose ceiling cannot reach the k-th
    best figure found so far comes back bounded (its ceiling as rate_rps), and configs the simulator
    cannot tell apart (behaviour) are figured once. `service`: one model for all, or one per
    config. Raises UsageError when the service models are not one per config."""
    cfgs = list(configs)
    models = list(service) if isinstance(service, Sequence) else [service] * len(cfgs)
    if len(models) != len(cfgs):
        raise UsageError(f"{len(models)} service models for {len(cfgs)} configs", hint="give one per config")
    bounds = [ceiling_rps(c, m, contention) for c, m in zip(cfgs, models, strict=True)]
    done: dict[tuple[tuple[object, ...], ServiceModel], RateResult] = {}
    rates: list[float] = []
    out: list[RateResult] = []
    for i in sorted(range(len(cfgs)), key=lambda i: -bounds[i]):
        cfg = cfgs[i]
        key = (behaviour(cfg), models[i])
        if key in done:
            out.append(dataclasses.replace(done[key], config=cfg))
            continue
        if keep is not None and len(rates) >= keep and bounds[i] <= sorted(rates, reverse=True)[keep - 1]:
            out.append(RateResult(cfg, bounds[i], float("nan"), float("nan"), bounded=True))
            continue
        r = figure(cfg, models[i], bounds[i])
        done[key] = r
        rates.append(r.rate_rps)
        out.append(r)
    out.sort(key=lambda r: (r.bounded, -r.rate_rps))
    return out


def trace_unit(timestamps_s: Sequence[float] | np.ndarray) -> np.ndarray:
    """A trace's arrival times at mean rate 1 (s, sorted, from 0): its timestamps over its span
    times its request count, so that offered at rate r (unit / r) it is the trace replayed at r /
    its own mean rate, as the tuner's trace trials replay it (the speed a level's mean rate sets).
    Raises UsageError for fewer than 2 requests or a trace of no span."""
    t = np.sort(np.asarray(timestamps_s, dtype=np.float64))
    if len(t) < 2 or t[-1] <= t[0]:
        raise UsageError(f"a trace of {len(t)} request(s) over no time", hint="give a trace of 2 or more timestamps")
    t -= t[0]
    return t * (len(t) / t[-1])


def _likeness(cfg: BatcherConfig) -> tuple[tuple[object, ...], ...]:
    """The keys of the configs whose rate starts this one's search, the likest first."""
    size = cfg.max_batch_size if cfg.batching else 1
    return ((size, cfg.instances, cfg.batching and cfg.preferred()), (size, cfg.instances), (size,))


def behaviour(cfg: BatcherConfig) -> tuple[object, ...]:
    """What of a config the simulator can tell apart: configs with the same key are simulated
    alike (no batching at any max_batch_size; preferred sizes as Triton applies them)."""
    if not cfg.batching:
        return (False, cfg.instances)
    return (True, cfg.max_batch_size, cfg.preferred(), cfg.max_queue_delay_us, cfg.instances)
