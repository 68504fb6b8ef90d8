"""Queueing models with a known answer: the arrival rate at which a percentile of the response
time (waiting + service) reaches a budget, for Poisson arrivals to one server with deterministic
service (M/D/1) or exponential service (M/M/1). Pure functions: the truth the known-truth
fixture (fixtures/models/queue) is checked against."""

from __future__ import annotations

import math

from perfkit.errors import UsageError

MAX_TERMS = 30  # the alternating sum loses precision past about 30 service times


def md1_wait_cdf(t_s: float, rate_rps: float, service_s: float) -> float:
    """P(W <= t) for the M/D/1 waiting time (Erlang 1909): (1 - rho) * sum over k = 0..floor(t/D)
    of (lambda (kD - t))^k / k! * exp(-lambda (kD - t)). Exact; the alternating sum is accurate
    for t/D up to MAX_TERMS (UsageError past it)."""
    if t_s < 0:
        return 0.0
    if t_s > MAX_TERMS * service_s:
        raise UsageError(
            f"M/D/1 waiting time at {t_s / service_s:.0f} service times: the formula holds up to {MAX_TERMS}",
            hint="use a budget of at most 30 service times",
        )
    rho = rate_rps * service_s
    if rho >= 1:
        return 0.0
    total = 0.0
    for k in range(int(math.floor(t_s / service_s)) + 1):
        x = rate_rps * (k * service_s - t_s)  # <= 0
        total += x**k / math.factorial(k) * math.exp(-x)
    return min(1.0, max(0.0, (1 - rho) * total))


def mm1_response_quantile_s(rate_rps: float, service_s: float, percentile: float) -> float:
    """The percentile of the M/M/1 response time: exponential with rate mu - lambda."""
    mu = 1.0 / service_s
    if rate_rps >= mu:
        return math.inf
    return -math.log(1 - percentile / 100.0) / (mu - rate_rps)


def sustainable_rate_rps(model: str, service_ms: float, budget_ms: float, percentile: float = 99.0) -> float:
    """The highest Poisson arrival rate at which the percentile of the response time is within
    budget_ms, for one server of mean service time service_ms: model 'M/D/1' or 'M/M/1'. 0 when
    even an empty queue misses the budget. Raises UsageError for an unknown model."""
    d_s, b_s, q = service_ms / 1e3, budget_ms / 1e3, percentile / 100.0
    if model == "M/M/1":
        return max(0.0, 1.0 / d_s + math.log(1 - q) / b_s)
    if model != "M/D/1":
        raise UsageError(f"queueing model {model!r} unknown", hint="use M/D/1 or M/M/1")
    if b_s < d_s:
        return 0.0
    lo, hi = 0.0, 1.0 / d_s
    for _ in range(60):
        mid = (lo + hi) / 2
        if md1_wait_cdf(b_s - d_s, mid, d_s) >= q:
            lo = mid
        else:
            hi = mid
    return lo
