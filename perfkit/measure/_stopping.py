"""When a level stops: at its precision, or short of it on a time budget, a precision out of its
reach, or a drift.

Every level loop (measure_level here, the distributed coordinator's) asks one LevelStop after each
window; what it decides is said in the level's note (one line) and, for a drift, in LevelResult.drift.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from perfkit.changepoints import DRIFT_MIN_WINDOWS, describe_drift, latency_metric, window_drift
from perfkit.measure._window_stability import WindowStability
from perfkit.recorder import MAX_LAG1, t95
from perfkit.records import Drift, LevelResult, Precision, ProfileSpec, Window

_log = logging.getLogger(__name__)

DEFAULT_BUDGET_TRIALS = 10  # perf_analyzer's default --max-trials: its worst case per level
# A level whose precision, shrinking as 1/sqrt(windows) from here, would need more than this many
# times its budget of windows ends now: more windows in the time given cannot make it precise
# (the factor leaves room for the error of a precision estimated from a few windows)
FUTILITY_FACTOR = 1.5
FUTILITY_MIN_WINDOWS = 5  # a precision (and the autocorrelation in it) estimated from fewer is too rough to give up on


def _small_sample_factor(k: int) -> float:
    """How much wider a k-window interval is than the same data's would be at many windows, from the
    interval's construction alone (recorder.mean_ci_rel, with no autocorrelation seen): its t quantile
    at the few effective windows, and the small-sample bias term 1/k of the AR(1) inflation. More
    windows shed this factor as well as the 1/sqrt(n), so a projection that kept it would give up on
    levels that were on their way (at 5 windows it is about 2.3x the half-width)."""
    rho = min(1.0 / k, MAX_LAG1)
    inflation = (1 + rho) / (1 - rho)
    n_eff = max(k / inflation, 2.0)
    return t95(n_eff - 1) * math.sqrt(inflation) / t95(1e6)


def _windows_needed(k: int, precision: Precision, tgt_tput: float | None, tgt_lat: float | None) -> int | None:
    """About how many windows the precision asked would take if it keeps shrinking as 1/sqrt(n)
    once the small-sample widening of a k-window interval is gone (the larger of throughput's and
    latency's; a target None is not asked or already met)."""
    shed = _small_sample_factor(k)
    needed = []
    for rel, tgt in ((precision.throughput_rel, tgt_tput), (precision.latency_rel, tgt_lat)):
        if tgt is not None and rel is not None and rel > tgt > 0:
            needed.append(max(k + 1, math.ceil(k * (rel / shed / tgt) ** 2)))
    return max(needed) if needed else None


def budget_windows_of(spec: ProfileSpec) -> int:
    """How many windows the level's time budget holds (max_trials when there is none)."""
    if spec.level_budget_s == 0:
        return spec.max_trials
    if spec.level_budget_s is None:
        return DEFAULT_BUDGET_TRIALS
    return max(1, int(spec.level_budget_s * 1000.0 / spec.measurement_interval_ms + 1e-9))


def with_drift(result: LevelResult, drift: Drift, *, early: bool) -> LevelResult:
    """The level marked as ended by drift, with the one line saying so in its note (and logged)."""
    p = result.precision
    line = (
        f"{'ended early, ' if early else ''}the windows drifted: {describe_drift(drift, len(result.windows))}; "
        f"precision reached ±{_pct(p.latency_rel)} latency, ±{_pct(p.throughput_rel)} throughput"
    )
    _log.warning("%s: %s", result.load.label, line)
    return dataclasses.replace(result, drift=drift, note=(line + "; " + result.note).strip("; "))


def _pct(rel: float | None) -> str:
    return "?" if rel is None else f"{rel:.1%}"


def out_of_reach(
    k: int, precision: Precision, tgt_tput: float | None, tgt_lat: float | None, budget_windows: int
) -> int | None:
    """The windows the precision asked would take, when that is past FUTILITY_FACTOR x the budget; else None."""
    needed = _windows_needed(k, precision, tgt_tput, tgt_lat)
    return needed if needed is not None and needed > FUTILITY_FACTOR * budget_windows else None


def with_futility(result: LevelResult, needed: int, budget_windows: int) -> LevelResult:
    """The level with the one line saying its precision was out of reach in its budget (and logged)."""
    p = result.precision
    line = (
        f"ended early: the precision asked would take about {needed} windows, past the level's budget of "
        f"{budget_windows}; precision reached ±{_pct(p.latency_rel)} latency, ±{_pct(p.throughput_rel)} throughput"
    )
    _log.info("%s: %s", result.load.label, line)
    return dataclasses.replace(result, note=(line + "; " + result.note).strip("; "))


def target_rel(spec: ProfileSpec) -> tuple[float, float]:
    """The precision a level is asked for: (throughput's, the latency statistic's) relative ~95% CI
    half-widths. Throughput's within half the stability percentage, the latency statistic's within
    the whole of it (tails are noisier): both stricter than perf_analyzer's "3 windows within +-10%
    of their mean", which bounds spread, not error."""
    return spec.stability_percentage / 200.0, spec.stability_percentage / 100.0


@dataclass
class LevelStop:
    """The stopping rule of one level, asked after each window by every level loop.

    A level ends stable once its precision is reached (after min_windows, with the samples the gate's
    percentiles need); short of it, once its windows drift (a change point or trend larger than the
    precision asked), once its time budget is spent, or once the precision asked is out of reach
    within that budget. `decided_only`: a level that only decides a side of a latency threshold
    (the tuner's search) is never given up as out of reach.
    """

    spec: ProfileSpec
    closed_loop: bool
    decided_only: bool = False
    stable: bool = False
    drift: Drift | None = None
    futile: int | None = None  # the windows the precision asked would take, when out of reach
    budget_windows: int = field(init=False)
    targets: tuple[float, float] = field(init=False)

    def __post_init__(self) -> None:
        self.budget_windows = budget_windows_of(self.spec)
        self.targets = target_rel(self.spec)

    def ends_after(
        self,
        k: int,
        windows: Sequence[Window],
        precision: Precision,
        *,
        throughput_ok: bool,
        latency_ok: bool,
        tail_ok: bool,
    ) -> bool:
        """Whether the level ends after its k-th window; why is kept (stable, drift, futile).

        throughput_ok / latency_ok: the loop's own judgement of its precision (closed loop: the CI
        within its target; open loop: the server keeps up with the offered rate); tail_ok: the
        percentiles the gate will judge have their samples. Every stop short of precision waits
        for tail_ok: until then the level lacks samples, whatever else it lacks.
        """
        spec = self.spec
        if k >= spec.min_windows and throughput_ok and latency_ok and tail_ok:
            self.stable = True
            return True
        if not tail_ok:
            return False
        tgt_tput, tgt_lat = self.targets
        # windows of a steady process are exchangeable; a change point among them (a shift or a trend
        # larger than the precision asked) means the process itself moved: more windows cannot make
        # the level more precise, so it ends there, flagged, with every window kept
        if k >= max(spec.min_windows, DRIFT_MIN_WINDOWS):
            self.drift = window_drift(windows, {"throughput": tgt_tput, latency_metric(spec.percentile): tgt_lat})
            if self.drift is not None:
                return True
        if k >= max(spec.min_windows, self.budget_windows):
            return True  # the time given is spent and the samples are there: more windows only refine
        if k >= max(spec.min_windows, FUTILITY_MIN_WINDOWS) and k < self.budget_windows and not self.decided_only:
            self.futile = out_of_reach(
                k, precision, tgt_tput if self.closed_loop else None, None if latency_ok else tgt_lat,
                self.budget_windows,
            )  # fmt: skip
            return self.futile is not None
        return False

    def noted(self, result: LevelResult) -> LevelResult:
        """The level's result with the one line saying why it ended short of its precision (if it did)."""
        if self.drift is not None:
            return with_drift(result, self.drift, early=len(result.windows) < self.spec.max_trials)
        if self.futile is not None:
            return with_futility(result, self.futile, self.budget_windows)
        return result


class StopRule(Protocol):
    """When one level ends, asked after each window; `stable` says how it ended, `noted` says why in its note."""

    stable: bool

    def ends_after(
        self,
        k: int,
        windows: Sequence[Window],
        precision: Precision,
        *,
        throughput_ok: bool,
        latency_ok: bool,
        tail_ok: bool,
    ) -> bool: ...

    def noted(self, result: LevelResult) -> LevelResult: ...


def level_stop_rule(
    spec: ProfileSpec, closed_loop: bool, *, decided_only: bool, latencies_us: Callable[[int], np.ndarray]
) -> StopRule:
    """The stop rule spec.stop_rule names: perfkit's precision (LevelStop) or perf_analyzer's window
    stability (WindowStability; latencies_us(i): window i's service latencies)."""
    if spec.stop_rule == "stability":
        return WindowStability(spec, open_loop=not closed_loop, latencies_us=latencies_us)
    return LevelStop(spec, closed_loop, decided_only=decided_only)
