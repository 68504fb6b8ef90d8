"""What the predicted search of one model predicts under the trial's load (TrialLoadSettings): the
figure a measured trial reads, predicted for each config, so that configs are ranked and checked
by the figure they will be measured by.

- open loop (load "rate"): the highest sustainable arrival rate of the trial's process, poisson or
  constant (predict.score_space);
- closed loop (load "concurrency", perf_analyzer's concurrency mode): the throughput at the highest
  concurrency within the budget, up to --max-concurrency (predict.score_space_closed), as the
  measured trial's figure is its best level's throughput (tuner/_verdict.py judge_trial);
- a trace (load "trace"): the highest sustainable mean rate of the trace's own arrival times
  replayed faster or slower (predict.trace_unit: offered at a mean rate r, the trace at speed r / its
  recorded mean rate, as each trace trial replays it, tuner/_find_load.py TrialLoadSettings.spec).
  A session's turns waiting for the one before (measure/_replay.py) are not simulated: where they
  matter, the trials' checks against the predictions say so and the measured search goes on."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from perfkit import predict
from perfkit.errors import UsageError
from perfkit.measure import trace_timestamps_ms
from perfkit.records import Calibration
from perfkit.tuner._find_load import TrialLoadSettings
from perfkit.tuner._search._predict_check import simulated_latency_us

if TYPE_CHECKING:
    from perfkit.tuner._trial import TrialRunner


def check_model_load(trial_load: TrialLoadSettings) -> None:
    """Raises UsageError for a load one model's prediction does not model: a trace replayed with
    no --trace file to read its arrivals from."""
    if trial_load.load_mode == "trace" and not trial_load.trace:
        raise UsageError("--load trace without --trace: no arrivals to predict", hint="give --trace FILE")


@functools.cache
def _trace_unit(path: str) -> np.ndarray:
    """A trace file's arrivals at mean rate 1 (predict.trace_unit), read once."""
    return predict.trace_unit(np.asarray(trace_timestamps_ms(Path(path)), dtype=np.float64) / 1e3)


def _unit(trial_load: TrialLoadSettings) -> np.ndarray | None:
    """The arrivals at rate 1 the trials replay scaled (a trace's), None for an arrival process."""
    if trial_load.load_mode != "trace":
        return None
    assert trial_load.trace is not None  # check_model_load refused a trace load without one
    return _trace_unit(str(trial_load.trace))


def score_configs(
    t: TrialRunner,
    cfgs: Sequence[predict.BatcherConfig],
    service: predict.ServiceModel,
    contention: predict.Contention,
    *,
    requests: int,
    keep: int | None,
    budget_us: float | None = None,
) -> list[predict.RateResult]:
    """Every config's predicted figure under the trial's load, best first (see the module), each
    held to `budget_us` (the end-to-end budget the simulator holds it to: Predictor.simulated_budget_us;
    None: the tune's own)."""
    b = t.s.budget
    budget_us = b.latency_budget_us if budget_us is None else budget_us
    if not t.trial_load.open_loop:
        clients = t.trial_load.max_concurrency
        return predict.score_space_closed(cfgs, service, budget_us, max_concurrency=clients,
                                          percentile=b.percentile, contention=contention, requests=requests,
                                          keep=keep)  # fmt: skip
    unit = _unit(t.trial_load)
    return predict.score_space(cfgs, service, budget_us, percentile=b.percentile, contention=contention,
                               arrival=t.trial_load.distribution, requests=len(unit) if unit is not None else requests,
                               keep=keep, unit=unit)  # fmt: skip


def score_config(
    t: TrialRunner,
    cfg: predict.BatcherConfig,
    service: predict.ServiceModel,
    contention: predict.Contention,
    *,
    requests: int,
    budget_us: float | None = None,
) -> predict.RateResult:
    """One config's predicted figure under the trial's load (your config's, simulated anyway)."""
    return score_configs(t, [cfg], service, contention, requests=requests, keep=None, budget_us=budget_us)[0]


def latency_at_figure(
    t: TrialRunner, cal: Calibration, cfg: predict.BatcherConfig, rate_rps: float, *, requests: int
) -> float | None:
    """The simulator's budget statistic for a config offered the rate a trial sustained (the
    check of a trial whose rate is off, tuner/_search/_predict_check.py); None in a closed loop,
    whose trials are checked by their throughput alone: its clients, not a rate, set the load."""
    if not t.trial_load.open_loop:
        return None
    unit = _unit(t.trial_load)
    if unit is not None:  # the trace at the mean rate measured
        if rate_rps <= 0 or float(t.s.budget.percentile) not in (50.0, 90.0, 95.0, 99.0):
            return None
        load = predict.Load("trace", arrivals_s=tuple((unit / rate_rps).tolist()))
        p = predict.simulate(cfg, predict.service_model(cal), load, predict.contention(cal), requests=len(unit))
        return p.percentile_us(t.s.budget.percentile)
    return simulated_latency_us(cal, cfg, rate_rps, percentile=t.s.budget.percentile,
                                arrival=t.trial_load.distribution, requests=requests)  # fmt: skip
