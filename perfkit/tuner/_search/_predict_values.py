"""The predicted search's scores with one service curve per value of the knobs that change the
execution (precision, instance kind: records Calibration.values): each config simulated with the
service model and contention of the value it is at (BatcherConfig.variant)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from perfkit import predict
from perfkit.records import Calibration
from perfkit.tuner._search._predict_load import score_config, score_configs

if TYPE_CHECKING:
    from perfkit.tuner._trial import TrialRunner


def curve_models(
    cal: Calibration, cfg: predict.BatcherConfig
) -> tuple[predict.ServiceModel, predict.Contention] | None:
    """The service model and contention a config runs: its value's curve's; None where the
    calibration holds no curve for its value."""
    curve = cal.curve(cfg.variant)
    if curve is None:
        return None
    return predict.service_model(curve), predict.contention(curve)


def score_by_value(
    t: TrialRunner,
    cal: Calibration,
    cfgs: Sequence[predict.BatcherConfig],
    *,
    requests: int,
    keep: int | None,
    budget_us: float,
) -> list[predict.RateResult]:
    """Every config's predicted figure under the trial's load, best first (those bounded below the
    kept ones last), as tuner/_search/_predict_load.py scores them, each value's configs with that
    value's curve: one scoring a value (the contention is a value's own). Each value keeps its best
    `keep` simulated (None: all), so the best `keep` of all are simulated too (a config bounded below
    its value's k-th best is below the k-th best of all). A config whose value holds no curve is
    left out."""
    groups: dict[str, list[predict.BatcherConfig]] = {}
    for c in cfgs:
        groups.setdefault(c.variant, []).append(c)
    out: list[predict.RateResult] = []
    for group in groups.values():
        models = curve_models(cal, group[0])
        if models is None:
            continue
        service, contention = models
        out += score_configs(t, group, service, contention, requests=requests, keep=keep, budget_us=budget_us)
    out.sort(key=lambda r: (r.bounded, -r.rate_rps))
    return out


def sustainable_by_value(
    t: TrialRunner, cal: Calibration, cfg: predict.BatcherConfig, *, requests: int, budget_us: float
) -> predict.RateResult | None:
    """One config's predicted figure under the trial's load with its value's curve; None where its
    value holds no curve."""
    models = curve_models(cal, cfg)
    if models is None:
        return None
    service, contention = models
    return score_config(t, cfg, service, contention, requests=requests, budget_us=budget_us)
