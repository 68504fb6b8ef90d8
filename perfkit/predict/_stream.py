"""A decoupled (streaming) model's stream under load: each request's responses come from one
execution that holds its instance until the last one is sent, so the batcher simulator runs each
request for its whole stream (ServiceModel: the stream's time), and the stream's own figures follow
from when that execution starts:

- TTFT = the wait for an instance + the first response's time from the execution's start
  (+ what the first response spends outside the instance);
- ITL = the interval between consecutive responses, the instance's own pace while it is held (no
  other request runs on it meanwhile), so it does not move with the load;
- the end-to-end latency = the wait + the whole stream (+ the overhead).

Triton holds a decoupled model's instance for as long as its execute runs; a backend that sends
responses after execute returned (from threads of its own) is not held, and is not this model
(the tuner's calibration tells the two apart, tuner/_search/_stream_calibrate.py). Batched streams
are not modelled: each stream is its own execution (max_batch_size 0, or no dynamic batching)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from perfkit.errors import UsageError
from perfkit.predict._model import BatcherConfig, Contention, Load, ServiceModel
from perfkit.predict._sim import DEFAULT_REQUESTS, WARMUP_FRACTION, _percentiles, departures, unit_arrivals
from perfkit.records import BUDGET_METRICS

# An ITL within its budget leaves the open loop's own limit: a rate the simulated stream keeps up with
# (perfkit.predict.sustainable_rate's completed share). No end-to-end latency bounds it.
UNBOUNDED_US = math.inf


@dataclass(frozen=True)
class StreamModel:
    """One request's stream on its instance: the first response first_us after the execution
    starts, then responses - 1 more, interval_us apart on average (itl_p_us: the calibrated
    intervals' percentiles, (percentile, us), which the load does not move); first_overhead_us:
    what the first response spends outside the instance (the request path to the instance and the
    response's way back), on its TTFT."""

    first_us: float
    interval_us: float
    responses: float
    first_overhead_us: float = 0.0
    itl_p_us: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        if self.first_us < 0 or self.interval_us < 0 or self.responses < 1:
            raise UsageError(
                f"stream model first_us={self.first_us}, interval_us={self.interval_us}, responses={self.responses}:"
                " times must be >= 0 and responses >= 1",
                hint="calibrate on a stream that sent at least one response",
            )

    @property
    def stream_us(self) -> float:
        """How long an execution holds its instance: the first response, then the intervals."""
        return self.first_us + (self.responses - 1) * self.interval_us

    def itl_us(self, percentile: float) -> float:
        """The interval at a percentile: the calibrated one where kept, else the mean interval."""
        return dict(self.itl_p_us).get(float(percentile), self.interval_us)


def check_unbatched(cfg: BatcherConfig) -> None:
    """Raises UsageError for a config that batches streams (their stream times are not modelled)."""
    if cfg.batching:
        raise UsageError(
            f"a stream model runs each stream as its own execution; max_batch_size {cfg.max_batch_size} with dynamic"
            " batching batches streams",
            hint="predict a config without dynamic batching, or measure it",
        )


def end_to_end_budget_us(stream: StreamModel, service: ServiceModel, metric: str, budget_us: float,
                         percentile: float) -> float:  # fmt: skip
    """The end-to-end latency budget equivalent to a budget on `metric` at `percentile`, for the
    simulator's rate search over whole streams (service: the stream's service model). Each
    request's TTFT and end-to-end latency differ by the same time (the rest of its stream, less
    the first response's overhead, plus the end's), so TTFT's percentile is within budget_us
    exactly when the latency's is within budget_us + that difference. An ITL budget does not move
    with the load: within it, the rate is bounded only by what the stream keeps up with
    (UNBOUNDED_US); past it at every rate (0: no rate holds)."""
    if metric == "latency":
        return budget_us
    if metric == "ttft":
        return budget_us + (service.service_us(1) + service.overhead_us) - (stream.first_us + stream.first_overhead_us)
    if metric == "itl":
        return UNBOUNDED_US if stream.itl_us(percentile) <= budget_us else 0.0
    raise UsageError(f"stream budget metric {metric!r} unknown", hint=f"use one of {', '.join(BUDGET_METRICS)}")


@dataclass(frozen=True)
class StreamPrediction:
    """What one simulated run of streams predicts, each statistic at the percentiles kept (50,
    90, 95, 99): TTFT and end-to-end latency from each request's due time, ITL from the model."""

    ttft_us: tuple[float, float, float, float]
    latency_us: tuple[float, float, float, float]
    itl_us: tuple[float, float, float, float]
    mean_wait_us: float
    completed_rps: float
    offered_rps: float
    requests: int

    def percentile_us(self, metric: str, percentile: float) -> float:
        """A statistic ('latency', 'ttft', 'itl') at one of the percentiles kept."""
        kept = {50.0: 0, 90.0: 1, 95.0: 2, 99.0: 3}
        if float(percentile) not in kept:
            raise UsageError(f"percentile {percentile} not kept", hint="use 50, 90, 95 or 99")
        if metric not in BUDGET_METRICS:
            raise UsageError(f"stream metric {metric!r} unknown", hint=f"use one of {', '.join(BUDGET_METRICS)}")
        figures = {"latency": self.latency_us, "ttft": self.ttft_us, "itl": self.itl_us}[metric]
        return figures[kept[float(percentile)]]


def stream_service(stream: StreamModel, overhead_us: float) -> ServiceModel:
    """The batcher simulator's service model of a stream: each execution holds its instance for the
    whole stream; overhead_us is what the request spends outside the instance, end to end."""
    return ServiceModel(stream.stream_us, 0.0, overhead_us=overhead_us)


def simulate_stream(
    cfg: BatcherConfig,
    stream: StreamModel,
    service: ServiceModel,
    load: Load,
    contention: Contention | None = None,
    *,
    requests: int = DEFAULT_REQUESTS,
    seed: int = 0,
) -> StreamPrediction:
    """Run `requests` streams of an open-loop `load` ('poisson' or 'constant') through `cfg`'s
    instances, each holding its instance for service.service_us(1) (the whole stream); each
    request's TTFT is its wait for an instance plus the first response's time (and overhead),
    counted over the requests after the first WARMUP_FRACTION. Raises UsageError for a batching
    config or a load that is not an open-loop rate."""
    check_unbatched(cfg)
    if load.kind not in ("poisson", "constant"):
        raise UsageError(f"stream load {load.kind!r}: an open-loop rate only", hint="use poisson or constant")
    due = unit_arrivals(load.kind, requests, seed) / load.rate_rps
    answer, _batch = departures(cfg, service, due, contention or Contention())
    started = answer - service.service_us(1) / 1e6
    skip = int(len(due) * WARMUP_FRACTION)
    wait = (started - due)[skip:]
    ttft = wait + (stream.first_us + stream.first_overhead_us) / 1e6
    latency = answer[skip:] - due[skip:] + service.overhead_us / 1e6
    done = answer[skip:]
    span = float(done.max() - done.min())
    offered = (len(wait) - 1) / float(due[-1] - due[skip]) if due[-1] > due[skip] else math.inf
    return StreamPrediction(
        ttft_us=_us(ttft),
        latency_us=_us(latency),
        itl_us=(stream.itl_us(50.0), stream.itl_us(90.0), stream.itl_us(95.0), stream.itl_us(99.0)),
        mean_wait_us=float(np.mean(wait)) * 1e6,
        completed_rps=(len(done) - 1) / span if span > 0 else 0.0,
        offered_rps=offered,
        requests=len(wait),
    )


def _us(x: np.ndarray) -> tuple[float, float, float, float]:
    p50, p90, p95, p99 = (float(v) * 1e6 for v in _percentiles(x))
    return p50, p90, p95, p99
