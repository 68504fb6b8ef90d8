"""A pipeline's steps simulated together: each step's queue and instances fed by the departures of
the steps before it, and the end-to-end latency percentile taken over each request's own summed
path (not a sum of per-step percentiles).

How Triton moves a request through an ensemble (triton-inference-server/core,
src/ensemble_scheduler/ensemble_scheduler.cc): EnsembleContext::ResponseComplete hands each step's
response to UpdateEnsembleState, which marks that step's output tensors ready and, through
GetNextSteps, schedules every step whose inputs are now all ready (ScheduleSteps enqueues it on that
model's own scheduler at once). So a step receives a request the moment the last step it reads
from answers that request, in whatever order the answers come; steps on parallel branches run at
the same time, and the request is answered once every step is done (EnsembleContext::FinishEnsemble
when no step is in flight). Each step's own queue and instances follow the batcher rules of
perfkit.predict._sim (cited there), applied to the arrivals it is given.

A BLS model and the models its code calls are a pipeline given a fan-out (`fanout`: each called
model's calls per request): step 0 is the BLS model, held while its calls run one after
another (perfkit.predict._bls, its own event loop).

A step's service model holds no per-request overhead here: what a request spends outside the
instances (network, HTTP/gRPC, the ensemble's forwarding) is one figure for the whole pipeline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from perfkit.errors import UsageError
from perfkit.predict import _bls
from perfkit.predict._model import BatcherConfig, Contention, Prediction, ServiceModel
from perfkit.predict._rate import ceiling_rps
from perfkit.predict._sim import WARMUP_FRACTION, departures, unit_arrivals

PIPELINE_REQUESTS = 4_000  # per simulated run; the p99 then rests on the slowest 36 of 3,600 kept
BISECTION_STEPS = 9  # the bracket [1/32, 1.02] of the slowest step's ceiling: to within ~2%


@dataclass(frozen=True)
class PipelineStep:
    """One step: its batcher config, its calibrated service and contention models, and the steps
    whose outputs it reads (indices into the pipeline; None: the step before it, () for the first)."""

    name: str
    config: BatcherConfig
    service: ServiceModel
    contention: Contention = field(default_factory=Contention)
    after: tuple[int, ...] | None = None


@dataclass(frozen=True)
class StepFigures:
    """One step's simulated figures at a load: mean queue wait and execution per request, mean
    batch executed, its ceiling and the fraction of it the load used."""

    name: str
    mean_wait_us: float
    mean_exec_us: float
    mean_batch: float
    ceiling_rps: float
    utilization: float

    @property
    def mean_in_step_us(self) -> float:
        """Queue wait plus execution: what Triton's per-model stats call queue + compute."""
        return self.mean_wait_us + self.mean_exec_us


@dataclass(frozen=True)
class PipelinePrediction:
    """The end-to-end prediction (latency of each request from its due time to its last step's
    answer, plus the overhead) and each step's figures."""

    end_to_end: Prediction
    steps: tuple[StepFigures, ...]

    def bottleneck(self) -> StepFigures:
        """The step running closest to its ceiling."""
        return max(self.steps, key=lambda s: s.utilization)


@dataclass(frozen=True)
class PipelineRate:
    """A set of step configs' sustainable rate end to end (0: even a light load misses the budget),
    the latency percentile there, the slowest step by its ceiling, and the prediction at that rate
    (None when the rate is 0); `bounded` when not simulated (rate_rps then holds the bound)."""

    configs: tuple[BatcherConfig, ...]
    rate_rps: float
    latency_us: float
    bottleneck: str
    prediction: PipelinePrediction | None = None
    bounded: bool = False


def _parents(steps: Sequence[PipelineStep]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = []
    for i, s in enumerate(steps):
        after = s.after if s.after is not None else ((i - 1,) if i > 0 else ())
        if any(not 0 <= j < i for j in after):
            raise UsageError(
                f"pipeline step {s.name!r} reads from steps {list(after)}: each must come before it",
                hint="list the steps in an order where every step follows those it reads from",
            )
        out.append(after)
    return out


def step_departures(
    arrivals_s: np.ndarray, cfg: BatcherConfig, service: ServiceModel, contention: Contention
) -> tuple[np.ndarray, np.ndarray]:
    """Each request's answer time (s) at one step given its arrival times there (any order), and
    the size of the batch it ran in: perfkit.predict._sim.departures (its rules, its compiled loop)."""
    return departures(cfg, service, arrivals_s, contention)


def _run(
    steps: Sequence[PipelineStep], due: np.ndarray, overhead_s: float, give_up: tuple[float, float] | None
) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] | None:
    """Every request through every step: (answer times, per step (arrivals, answers, batch sizes)).
    give_up = (latency bound s, kept requests allowed past it): None once more kept requests than
    that are already past it after some step (later steps only add)."""
    parents = _parents(steps)
    skip = int(len(due) * WARMUP_FRACTION)
    per: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    done = due.copy()
    for s, after in zip(steps, parents, strict=True):
        arrive = due if not after else np.max(np.vstack([per[j][1] for j in after]), axis=0)
        end, size = departures(s.config, s.service, arrive, s.contention)
        per.append((arrive, end, size))
        done = np.maximum(done, end)
        if give_up is not None and np.count_nonzero(done[skip:] - due[skip:] + overhead_s > give_up[0]) > give_up[1]:
            return None
    return done, per


def simulate_pipeline(
    steps: Sequence[PipelineStep],
    rate_rps: float,
    *,
    overhead_us: float = 0.0,
    arrival: str = "poisson",
    requests: int = PIPELINE_REQUESTS,
    seed: int = 0,
    unit: np.ndarray | None = None,
    fanout: Sequence[int] | None = None,
) -> PipelinePrediction:
    """Run `requests` requests arriving at rate_rps ('poisson' or 'constant') through the steps;
    latency is counted per request from its due time to its last answer, plus overhead_us, over
    the requests after the first WARMUP_FRACTION; `fanout`: step 0 is a BLS model calling the others
    that many times a request (perfkit.predict._bls). Raises UsageError for an empty pipeline, a rate
    that is not positive, a step that reads from a later one or a fan-out that is not one whole
    number per called model."""
    p = _simulate(steps, rate_rps, overhead_us, arrival, requests, seed, unit, None, fanout)
    assert p is not None  # no budget given: never cut short
    return p


def _simulate(
    steps: Sequence[PipelineStep],
    rate_rps: float,
    overhead_us: float,
    arrival: str,
    requests: int,
    seed: int,
    unit: np.ndarray | None,
    budget: tuple[float, float] | None,
    fanout: Sequence[int] | None = None,
) -> PipelinePrediction | None:
    if not steps:
        raise UsageError("a pipeline of no steps", hint="give at least one step")
    if rate_rps <= 0:
        raise UsageError(f"pipeline rate_rps={rate_rps}: must be > 0", hint="give a positive rate")
    base = unit if unit is not None else unit_arrivals(arrival, requests, seed)
    due = np.asarray(base, dtype=float) / rate_rps
    overhead_s = overhead_us / 1e6
    give_up = None
    if budget is not None:
        kept = len(due) - int(len(due) * WARMUP_FRACTION)
        give_up = (budget[0] / 1e6, kept * (1 - budget[1] / 100.0))
    if fanout is None:
        run = _run(steps, due, overhead_s, give_up)
    else:
        run = _bls.run_bls(steps, fanout, due, overhead_s, give_up)
    if run is None:
        return None
    done, per = run
    skip = int(len(due) * WARMUP_FRACTION)
    latency = (done - due + overhead_s)[skip:]
    p50, p90, p95, p99 = np.percentile(latency, [50, 90, 95, 99])
    first, last = float(done[skip:].min()), float(done[skip:].max())
    span = last - first
    offered = (len(latency) - 1) / (due[-1] - due[skip]) if due[-1] > due[skip] else math.inf
    figures = []
    waits = np.zeros(len(latency))
    for i, (s, (arrive, end, size), cap) in enumerate(zip(steps, per, ceilings(steps, fanout), strict=True)):
        if len(size) == 0:  # a model a BLS model never calls
            figures.append(StepFigures(s.name, 0.0, 0.0, 0.0, cap, 0.0))
            continue
        if fanout is not None and i == 0:
            # The BLS model: queued from its due time to the start of its execution (`arrive` holds
            # that start), which holds the instance until its last call's answer, as Triton counts it.
            wait, exec_s = (arrive - due)[skip:], (end - arrive)[skip:]
        else:
            table = np.array([0.0] + [s.service.service_us(k) / 1e6 for k in range(1, int(size.max()) + 1)])
            # a BLS model's calls are kept call by call, request by request: a request's waits summed
            calls = len(size) // len(due)
            kept = (end - arrive - table[size.astype(int)]).reshape(len(due), calls)[skip:]
            wait, exec_s = kept.ravel(), table[size.astype(int)].reshape(len(due), calls)[skip:].ravel()
        waits += wait.reshape(len(latency), -1).sum(axis=1)
        figures.append(
            StepFigures(
                s.name,
                float(wait.mean()) * 1e6,
                float(exec_s.mean()) * 1e6,
                float(len(size) / np.sum(1.0 / size)),  # executions: each batch of m counted once
                cap,
                min(1.0, rate_rps / cap) if cap > 0 else 1.0,
            )
        )
    e2e = Prediction(
        p50_us=float(p50) * 1e6,
        p90_us=float(p90) * 1e6,
        p95_us=float(p95) * 1e6,
        p99_us=float(p99) * 1e6,
        mean_us=float(latency.mean()) * 1e6,
        mean_wait_us=float(waits.mean()) * 1e6,
        completed_rps=int(np.count_nonzero(done[skip:] > first)) / span if span > 0 else 0.0,
        offered_rps=offered,
        mean_batch=figures[0].mean_batch,
        requests=len(latency),
    )
    return PipelinePrediction(e2e, tuple(figures))


def ceilings(steps: Sequence[PipelineStep], fanout: Sequence[int] | None = None) -> list[float]:
    """Each step's ceiling in the pipeline's requests per second (a BLS pipeline's: _bls.ceilings_rps)."""
    if fanout is not None:
        return _bls.ceilings_rps(steps, fanout)
    return [ceiling_rps(s.config, s.service, s.contention) for s in steps]


def floor_us(steps: Sequence[PipelineStep], overhead_us: float = 0.0, fanout: Sequence[int] | None = None) -> float:
    """A request alone in the pipeline: along its longest path, each step's queue delay where its
    batcher waits for a preferred size above 1, plus its execution of one; plus the overhead (a
    BLS pipeline's: _bls.floor_us)."""
    if fanout is not None:
        return _bls.floor_us(steps, fanout, overhead_us)
    parents = _parents(steps)
    reach: list[float] = []
    for s, after in zip(steps, parents, strict=True):
        cfg = s.config
        wait = cfg.max_queue_delay_us if cfg.batching and cfg.preferred()[0] > 1 else 0.0
        reach.append(max((reach[j] for j in after), default=0.0) + wait + s.service.service_us(1))
    return max(reach) + overhead_us


def slowest_step(steps: Sequence[PipelineStep], fanout: Sequence[int] | None = None) -> int:
    """The index of the step with the lowest ceiling (the pipeline's bound)."""
    return int(np.argmin(ceilings(steps, fanout)))


def pipeline_rate(
    steps: Sequence[PipelineStep],
    budget_us: float,
    *,
    percentile: float = 99.0,
    overhead_us: float = 0.0,
    arrival: str = "poisson",
    requests: int = PIPELINE_REQUESTS,
    seed: int = 0,
    unit: np.ndarray | None = None,
    fanout: Sequence[int] | None = None,
) -> PipelineRate:
    """The highest rate at which the simulated end-to-end `percentile` is within budget_us and the
    pipeline keeps up (completes 95% of what is offered), by geometric bisection under the slowest
    step's ceiling (`fanout`: a BLS pipeline, see simulate_pipeline). Raises UsageError for a budget
    that is not positive (and as simulate_pipeline)."""
    if budget_us <= 0:
        raise UsageError(f"latency budget {budget_us} us: must be > 0", hint="give a positive budget")
    if not steps:
        raise UsageError("a pipeline of no steps", hint="give at least one step")
    base = unit if unit is not None else unit_arrivals(arrival, requests, seed)
    configs = tuple(s.config for s in steps)
    caps = ceilings(steps, fanout)
    slow = int(np.argmin(caps))
    name = steps[slow].name
    floor = floor_us(steps, overhead_us, fanout)
    if floor > budget_us:
        return PipelineRate(configs, 0.0, floor, name)
    cap = caps[slow] * 1.02

    def within(rate: float) -> PipelinePrediction | None:
        p = _simulate(steps, rate, overhead_us, arrival, len(base), seed, base, (budget_us, percentile), fanout)
        if p is None or p.end_to_end.percentile_us(percentile) > budget_us:
            return None
        return p if p.end_to_end.completed_rps >= 0.95 * p.end_to_end.offered_rps else None

    lo, hi = cap / 32, cap
    best = within(lo)
    if best is None:
        lo, hi = cap * 1e-4, cap / 32
    for _ in range(BISECTION_STEPS):
        mid = math.sqrt(lo * hi)
        p = within(mid)
        if p is not None:
            lo, best = mid, p
        else:
            hi = mid
    if best is None:
        return PipelineRate(configs, 0.0, floor, name)
    return PipelineRate(configs, lo, best.end_to_end.percentile_us(percentile), best.bottleneck().name, best)


def score_pipelines(
    candidates: Sequence[Sequence[PipelineStep]],
    budget_us: float,
    *,
    percentile: float = 99.0,
    overhead_us: float = 0.0,
    arrival: str = "poisson",
    requests: int = PIPELINE_REQUESTS,
    keep: int | None = None,
    seed: int = 0,
    fanout: Sequence[int] | None = None,
) -> list[PipelineRate]:
    """Each candidate set of step configs' sustainable rate, best first. With keep=k a candidate
    whose slowest step's ceiling cannot reach the k-th best rate found so far is not simulated
    (it comes back bounded, with that bound): the best k are the same as simulating all. `fanout`:
    BLS pipelines (see simulate_pipeline)."""
    base = unit_arrivals(arrival, requests, seed)
    bounds = [min(ceilings(steps, fanout)) for steps in candidates]
    order = sorted(range(len(candidates)), key=lambda i: -bounds[i])
    rates: list[float] = []
    out: list[PipelineRate] = []
    for i in order:
        steps = candidates[i]
        if keep is not None and len(rates) >= keep and bounds[i] <= sorted(rates, reverse=True)[keep - 1]:
            name = steps[slowest_step(steps, fanout)].name
            out.append(PipelineRate(tuple(s.config for s in steps), bounds[i], math.nan, name, bounded=True))
            continue
        r = pipeline_rate(
            steps,
            budget_us,
            percentile=percentile,
            overhead_us=overhead_us,
            arrival=arrival,
            seed=seed,
            unit=base,
            fanout=fanout,
        )
        rates.append(r.rate_rps)
        out.append(r)
    out.sort(key=lambda r: (r.bounded, -r.rate_rps))
    return out
