"""perf_analyzer's rule for when a level ends: its last three windows agree within the stability percentage.

perf_analyzer 2.60 (src/inference_profiler.cc at commit 263c5f6e, InferenceProfiler::ProfileHelper and
DetermineStability) measures a level window after window, at most --max-trials of them, and stops after the
first window at which the last `stability_window` (3, set in the InferenceProfiler constructor) windows:
- all completed something (a window with zero throughput, or a failed one, is never stable);
- have throughputs whose max / min is at most 1 + stability_percentage / 100 (IsInferWindowStable);
- have latencies (each window's average, or its --percentile) whose max / min is at most the same
  (IsLatencyWindowStable).
With -l, IsDoneProfiling also ends the level, unstable, once any of those three windows' latency is at
or past the threshold. A level that reaches --max-trials without it is unstable ("Failed to obtain stable
measurement within N measurement windows"), except that an asynchronous run whose throughput alone is
stable is taken as stable with the warning "Request latency is not stabilizing. Please try lowering the
request rate." perfkit's engine sends asynchronously in every mode; it applies that fallback to open-loop
levels (perf_analyzer's request-rate lines are asynchronous; its closed-loop default is synchronous).

This bounds the windows' spread, not the error of the level's figures (perfkit's precision rule,
_stopping.LevelStop, does that): it is the rule of the `perf_analyzer` command and of `perfkit profile`
given perf_analyzer's stability flags, so a drop-in run ends when perf_analyzer's would.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from perfkit.records import LevelResult, Precision, ProfileSpec, Window

_log = logging.getLogger(__name__)

STABILITY_WINDOWS = 3  # perf_analyzer's load_parameters_.stability_window
LATENCY_UNSTEADY = "latency is not stabilizing (throughput is): perf_analyzer's advice is a lower request rate"


def windows_stable(
    infer_per_s: Sequence[float],
    latency_us: Sequence[float],
    stability_percentage: float,
    *,
    check_latency: bool = True,
) -> bool:
    """perf_analyzer's DetermineStability over per-window figures (oldest first): the last three
    windows all completed something, and their throughputs (and, with check_latency, their latencies)
    have max / min <= 1 + stability_percentage / 100."""
    if len(infer_per_s) < STABILITY_WINDOWS:
        return False
    limit = 1.0 + stability_percentage / 100.0
    tput = [float(x) for x in infer_per_s[-STABILITY_WINDOWS:]]
    if min(tput) <= 0:
        return False
    if max(tput) / min(tput) > limit:
        return False
    if not check_latency:
        return True
    lat = [float(x) for x in latency_us[-STABILITY_WINDOWS:]]
    if min(lat) <= 0 or not all(math.isfinite(x) for x in lat):
        return False
    return max(lat) / min(lat) <= limit


def past_threshold(latency_us: Sequence[float], threshold_ms: float | None) -> bool:
    """perf_analyzer's IsDoneProfiling under -l: once three windows exist, whether any of the last three
    has a latency at or past the threshold."""
    if threshold_ms is None or len(latency_us) < STABILITY_WINDOWS:
        return False
    return any(x >= threshold_ms * 1000.0 for x in latency_us[-STABILITY_WINDOWS:])


def window_latency_us(window: Window, latencies_us: np.ndarray, percentile: float | None) -> float:
    """The latency perf_analyzer judges a window by: its average, or its --percentile (inf when the
    window completed nothing, as perf_analyzer counts a failed window's latency as the largest)."""
    if window.completed == 0 or latencies_us.size == 0:
        return math.inf
    if percentile is None:
        return float(window.mean_us)
    return float(np.percentile(latencies_us, percentile))


@dataclass
class WindowStability:
    """perf_analyzer's stop rule for one level, asked after each window (the LevelStop interface).

    `latencies_us(i)`: the service latencies (us) of the requests that completed ok in window i (0-based).
    """

    spec: ProfileSpec
    open_loop: bool
    latencies_us: Callable[[int], np.ndarray]
    stable: bool = False
    over_threshold: bool = False
    latency_unsteady: bool = False

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
        """Whether the level ends after its k-th window, by perf_analyzer's rule (the precision the loop
        judges for perfkit's own rule is not asked). tail_ok: the percentiles spec.tail_percentiles names
        have their samples; a stable level waits for them, so runs a gate compares hold its evidence (the
        `perf_analyzer` command asks for none, as perf_analyzer judges no tail)."""
        del precision, throughput_ok, latency_ok  # perf_analyzer's rule reads the windows only
        spec = self.spec
        tput = [w.infer_per_s if w.completed else 0.0 for w in windows]
        lat = [window_latency_us(w, self.latencies_us(i), spec.percentile) for i, w in enumerate(windows)]
        if k >= spec.min_windows and tail_ok and windows_stable(tput, lat, spec.stability_percentage):
            self.stable = True
            return True
        if past_threshold(lat, spec.latency_threshold_ms):
            self.over_threshold = True
            return True
        if k >= spec.max_trials and self.open_loop and windows_stable(tput, lat, spec.stability_percentage,
                                                                      check_latency=False):  # fmt: skip
            self.stable = self.latency_unsteady = True
            return True
        return False

    def noted(self, result: LevelResult) -> LevelResult:
        """The level's result with the one line saying its latency did not settle (if so)."""
        if not self.latency_unsteady:
            return result
        _log.warning("%s: %s", result.load.label, LATENCY_UNSTEADY)
        return dataclasses.replace(result, note=(LATENCY_UNSTEADY + "; " + result.note).strip("; "))
