"""What the predicted search of one model predicts under the trial's load (TrialLoadSettings): the
figure a measured trial reads, predicted for each config, so that configs are ranked and checked
by the figure they will be measured by.

- open loop (load "rate"): the highest sustainable arrival rate of the trial's process, poisson or
  constant (predict.score_space);
- closed loop (load "concurrency", perf_analyzer's concurrency mode): the throughput at the highest
  concurrency within the budget, up to --max-concurrency (predict.score_space_closed), as the
  measured trial's figure is its best level's throughput (tuner/_verdict.py judge_trial);
- a trace (load "trace"): the highest sustainable mean rate of the trace replayed faster or slower
  (tuner/_search/_predict_trace.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from perfkit import predict
from perfkit.errors import UsageError
from perfkit.records import Calibration
from perfkit.tuner._find_load import TrialLoadSettings
from perfkit.tuner._search._predict_check import simulated_latency_us

if TYPE_CHECKING:
    from perfkit.tuner._trial import TrialRunner


def check_model_load(trial_load: TrialLoadSettings) -> None:
    """Raises UsageError for a load one model's prediction does not model (a trace)."""
    if trial_load.load_mode == "trace":
        raise UsageError(
            "--search predict predicts open-loop arrival rates and closed-loop clients, not a trace",
            hint="drop --load trace, or use --search measure",
        )


def score_configs(
    t: TrialRunner,
    cfgs: Sequence[predict.BatcherConfig],
    service: predict.ServiceModel,
    contention: predict.Contention,
    *,
    requests: int,
    keep: int | None,
) -> list[predict.RateResult]:
    """Every config's predicted figure under the trial's load, best first (see the module)."""
    b = t.s.budget
    if not t.trial_load.open_loop:
        clients = t.trial_load.max_concurrency
        return predict.score_space_closed(cfgs, service, b.latency_budget_us, max_concurrency=clients,
                                          percentile=b.percentile, contention=contention, requests=requests,
                                          keep=keep)  # fmt: skip
    return predict.score_space(cfgs, service, b.latency_budget_us, percentile=b.percentile, contention=contention,
                               arrival=t.trial_load.distribution, requests=requests, keep=keep)  # fmt: skip


def score_config(
    t: TrialRunner,
    cfg: predict.BatcherConfig,
    service: predict.ServiceModel,
    contention: predict.Contention,
    *,
    requests: int,
) -> predict.RateResult:
    """One config's predicted figure under the trial's load (your config's, simulated anyway)."""
    return score_configs(t, [cfg], service, contention, requests=requests, keep=None)[0]


def latency_at_figure(
    t: TrialRunner, cal: Calibration, cfg: predict.BatcherConfig, rate_rps: float, *, requests: int
) -> float | None:
    """The simulator's budget statistic for a config offered the rate a trial sustained (the
    check of a trial whose rate is off, tuner/_search/_predict_check.py); None in a closed loop,
    whose trials are checked by their throughput alone: its clients, not a rate, set the load."""
    if not t.trial_load.open_loop:
        return None
    return simulated_latency_us(cal, cfg, rate_rps, percentile=t.s.budget.percentile,
                                arrival=t.trial_load.distribution, requests=requests)  # fmt: skip
