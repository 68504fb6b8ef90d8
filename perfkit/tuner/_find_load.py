"""The load search: how each trial offers load (TrialLoadSettings: closed loop, open loop or a trace;
its ProfileSpec) and finding a candidate's highest load within budget, cheaply.

Without history a trial measures concurrency 1, 2, 4, ... until the budget breaks. With it,
the search starts where the most similar earlier trial met the budget and walks a ladder of
levels a factor sqrt(2) apart: galloping up (or down) from there until the boundary is
bracketed, then bisecting it (3-4 levels instead of 5-7 for an answer near the start, and a
far answer, such as the concurrency a much larger batch needs, is still reached). A level
reading over the budget where the answer hinges on it is measured once more (see
_ladder.LoadLadder). Levels end as soon as they are clearly over or under the budget
(ProfileSpec.stop_when_decided). Open loop walks a ladder of arrival rates the same way.

A level at the least load (one request at a time) that shows no load can meet the budget (its
service time alone over it, or its percentile far over it: tuner/_hopeless) ends the search there,
the trial pruned saying why.

A deadline (the tune's --max-time) bounds the search: each level is given at most the windows
that fit in the time left, a level whose fewest windows do not fit is not started, and the
search ends there (OutOfTime, holding what it measured).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfkit.records import Budget, LevelResult, LoadLevel, ProfileSpec, RunRecord
from perfkit.server.base import Server
from perfkit.tuner._hopeless import at_least_load, hopeless
from perfkit.tuner._ladder import LoadLadder, OutOfTime, run_level_by_level

Measure = Callable[..., RunRecord]


def concurrency_levels(max_concurrency: int) -> tuple[LoadLevel, ...]:
    """1, 2, 4, ... up to max_concurrency (included even if not a power of two)."""
    values = []
    c = 1
    while c < max_concurrency:
        values.append(c)
        c *= 2
    values.append(max_concurrency)
    return tuple(LoadLevel("concurrency", float(v)) for v in dict.fromkeys(values))


@dataclass(frozen=True)
class TrialLoadSettings:
    """How each trial is measured against its budget. Short windows keep a trial to seconds."""

    budget: Budget  # the settings' one budget (TuneSettings.budget)
    max_concurrency: int = 64
    protocol: str = "http"
    measurement_interval_ms: float = 800.0
    stability_percentage: float = 15.0
    min_windows: int = 3
    max_windows: int = 6
    warmup_s: float = 0.5
    collect_metrics: bool = False
    metrics_url: str | None = None
    batch_size: int = 1
    stop_when_decided: bool = False
    streaming: bool = False  # a decoupled model: responses arrive on a gRPC stream
    # How load is offered: closed loop ("concurrency": N clients in lockstep) or open loop
    # ("rate": arrivals at a rate, `distribution` poisson or constant; the figure is the
    # sustainable rate).
    load_mode: str = "concurrency"
    distribution: str = "poisson"
    burst_on_ms: float | None = None  # distribution "onoff": records.LoadLevel's
    repeat_fraction: float = 0.0  # ProfileSpec.repeat_fraction: requests repeating an earlier one's inputs
    burst_off_ms: float | None = None
    max_rate_rps: float = 20000.0
    goodput_slo_ms: dict[str, float] = field(default_factory=dict)  # streamed requests' SLOs (goodput)
    # load_mode "trace": a JSONL trace replayed faster or slower; a level's value is its mean rate
    # (trace_base_rps, the trace's own mean rate, at speed 1).
    trace: str | None = None
    trace_base_rps: float = 1.0
    # A traffic mix (perfkit tune -m A -m B --mix A:3,B:1): the mix measured (each model's own
    # budget is the budget's per_model_ms)
    mix: tuple[tuple[str, int], ...] = ()

    def _window_ms(self, levels: tuple[LoadLevel, ...] | None) -> float:
        """Windows long enough for an open-loop level to hold MIN_WINDOW_REQUESTS requests (a
        window of a few requests says nothing about a percentile or a backlog); at most 5 s."""
        if not self.open_loop or not levels or levels[0].mode == "concurrency":
            return self.measurement_interval_ms
        rate = max(levels[0].value, 1e-3)
        return max(self.measurement_interval_ms, min(5000.0, 1000.0 * MIN_WINDOW_REQUESTS / rate))

    @property
    def open_loop(self) -> bool:
        return self.load_mode in ("rate", "trace")

    def load_line(self, *, default: bool = False) -> str:
        """How trials offer load, for the search's first lines (`default`: no --load was given)."""
        if self.load_mode == "trace":
            what = "trace replayed faster or slower: each trial's figure is its highest sustainable mean rate"
        elif self.open_loop:
            what = f"open loop, {self.distribution} arrivals: each trial's figure is its highest sustainable rate"
        else:
            what = "closed loop, clients in lockstep: each trial's figure is at its highest concurrency within budget"
        if default:
            what += " (the default" + ("; closed loop for a decoupled model)" if self.streaming else ")")
        return what

    def level(self, value: float) -> LoadLevel:
        """The load level of one search point: a concurrency, an arrival rate, or a trace's mean rate."""
        if self.load_mode == "trace":
            return LoadLevel("trace", float(value))
        if self.open_loop:
            dist: Any = self.distribution  # "poisson", "constant" or "onoff", TuneSettings.arrival's choices
            if dist != "onoff":
                return LoadLevel("request_rate", float(value), dist)
            return LoadLevel("request_rate", float(value), dist, self.burst_on_ms, self.burst_off_ms)
        return LoadLevel("concurrency", float(int(value)))

    @property
    def judged_by_measure(self) -> bool:
        """Whether perfkit profile's latency threshold can stop a sweep where the budget's percentile
        breaks (the threshold is on the end-to-end latency; TTFT/ITL budgets are stopped by the tuner
        level by level). The threshold only stops the sweep: every level is judged by Budget.within."""
        return self.budget.metric == "latency" and not self.mix  # a mix's models each hold their own budget

    def spec(self, model: str, levels: tuple[LoadLevel, ...] | None = None, *, bisect: bool = False) -> ProfileSpec:
        """The ProfileSpec of one trial: doubling concurrency (or the given levels, bisected
        when `bisect`), stopping past the budget."""
        by_measure = self.judged_by_measure
        trace = self.load_mode == "trace"
        speed = (levels[0].value / self.trace_base_rps) if trace and levels else 1.0
        return ProfileSpec(
            model=model,
            levels=levels or concurrency_levels(self.max_concurrency),
            binary_search=bisect and by_measure,
            stop_when_decided=self.stop_when_decided and by_measure,
            # Decoupled models stream over gRPC ModelStreamInfer: HTTP's generate_stream maps
            # only models whose inputs it can read from JSON.
            protocol="grpc" if self.protocol == "grpc" or self.streaming or trace else "http",
            batch_size=self.batch_size,
            measurement_interval_ms=self._window_ms(levels),
            stability_percentage=self.stability_percentage,
            max_trials=self.max_windows,
            min_windows=self.min_windows,
            percentile=self.budget.percentile,
            # measure's threshold is on the end-to-end latency: a TTFT/ITL budget must not stop it.
            latency_threshold_ms=self.budget.latency_budget_ms if by_measure else None,
            warmup_s=self.warmup_s,
            collect_metrics=self.collect_metrics,
            metrics_url=self.metrics_url,
            streaming=self.streaming,
            goodput_slo_ms=dict(self.goodput_slo_ms),
            trace=self.trace if trace else None,
            trace_speed=speed,
            mix=self.mix,
            repeat_fraction=self.repeat_fraction,
        )


MIN_WINDOW_REQUESTS = 50  # open-loop windows hold about this many requests (see TrialLoadSettings)


def _distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    d = 0.0
    for key in set(a) | set(b):
        x, y = a.get(key), b.get(key)
        if x == y:
            continue
        num = (int, float)
        if isinstance(x, num) and isinstance(y, num) and not isinstance(x, bool) and not isinstance(y, bool):
            d += abs(math.log2(max(float(x), 0.5) / max(float(y), 0.5)))  # a doubling counts as one change
        else:
            d += 1.0
    return d


def start_concurrency(history: Sequence[tuple[Mapping[str, Any], float]], params: Mapping[str, Any]) -> float | None:
    """The load (concurrency or arrival rate) at which the most similar earlier trial met the
    budget (ties: the most recent); None without history. history: (params, highest feasible
    load), oldest first."""
    if not history:
        return None
    nearest = min(range(len(history)), key=lambda i: (_distance(history[i][0], params), -i))
    return history[nearest][1]


def _doubling(low: int, high: int) -> tuple[int, ...]:
    """low, 2*low, ... up to high (included)."""
    out, c = [], max(1, low)
    while c < high:
        out.append(c)
        c *= 2
    out.append(high)
    return tuple(dict.fromkeys(out))


# What a level costs beyond its warm-up and windows (starting the load, draining, the server's
# statistics): a level is started only when its fewest windows fit in the time left with this.
LEVEL_OVERHEAD_S = 1.0


def fit_to_time_left(spec: ProfileSpec, time_left_s: float) -> ProfileSpec:
    """spec with at most the windows that fit in time_left_s (one level: its warm-up, its windows,
    LEVEL_OVERHEAD_S). Raises OutOfTime when fewer than its min_windows fit."""
    window_s = spec.measurement_interval_ms / 1000.0
    fit = math.floor((time_left_s - spec.warmup_s - LEVEL_OVERHEAD_S) / window_s) if window_s > 0 else 0
    if fit < spec.min_windows:
        raise OutOfTime()
    return dataclasses.replace(spec, max_trials=min(spec.max_trials, fit))


def find_load(
    measure: Measure,
    server: Server,
    trial_load: TrialLoadSettings,
    model: str,
    start: float | None,
    *,
    command: tuple[str, ...] = (),
    record_path: Path | None = None,
    deadline: float | None = None,
    start_suffices: bool = False,
    predicted: bool = False,
    first_warmup_s: float = 0.0,
    held_elsewhere: float | None = None,
) -> RunRecord:
    """Measure a loaded candidate up to its highest load within the budget (concurrency, or
    for open loop the highest sustainable arrival rate); returns one run record holding every
    level measured (sorted by load). `deadline` (time.monotonic() seconds): each level measured
    one run at a time, given the windows that fit before it. Raises what measure raises, and
    OutOfTime (its record: the levels measured, None if none) when the next level would not
    fit before the deadline. `start_suffices` (open loop, from a given start): a start level within
    budget ends the search there (LoadLadder). `predicted` (open loop): the start is a
    prediction, and the search moves PREDICTED_STRIDE rate steps from it instead of doubling.
    `first_warmup_s`: the first level warms up for at least this long (the runner's warm-up after
    a reload), and is fitted to the deadline with it. `held_elsewhere` (open loop, with
    start_suffices): a rate another config holds, below which the search does not go on
    (LoadLadder)."""

    def ok(lv: LevelResult) -> bool:
        return trial_load.budget.within(lv)

    def answered(lv: LevelResult, at_floor: bool) -> str | None:
        """Why a level shows no load holds (tuner/_hopeless); at_floor: the ladder's lowest value."""
        return hopeless(lv, trial_load.budget, trial_load.batch_size, at_floor=at_floor or at_least_load(lv))

    warmup_first = [first_warmup_s]

    def run(spec: ProfileSpec) -> RunRecord:
        if warmup_first[0] > spec.warmup_s:
            spec = dataclasses.replace(spec, warmup_s=warmup_first[0])
        warmup_first[0] = 0.0
        if deadline is not None:
            spec = fit_to_time_left(spec, deadline - time.monotonic())
        return measure(server, spec, command=command, record_path=record_path)

    def run_spec(values: Sequence[float], bisect: bool) -> RunRecord:
        return run(trial_load.spec(model, tuple(trial_load.level(v) for v in values), bisect=bisect))

    if trial_load.open_loop:
        if start is None and trial_load.load_mode == "trace":
            start = trial_load.trace_base_rps  # the trace as recorded (speed 1)
        probed: list[RunRecord] = []
        if start is None:
            start = _probe_rate(lambda lv: _kept(run(trial_load.spec(model, (lv,))), probed))
            alone = probed[0].levels[-1] if probed and probed[0].levels else None
            if alone is not None and not ok(alone) and answered(alone, True) is not None:
                # one request at a time already shows no rate holds: the search ends at its probe
                if record_path is not None:
                    probed[0].save(record_path)
                return probed[0]
        values = rate_ladder(start, trial_load.max_rate_rps)
        # Double the rate per move, then bisect back to the ladder's resolution: a level below the
        # answer is slow to fill its windows (about 50 requests each), one above it is quick, so
        # overshooting costs little and creeping up from a low start (the probe's, or a similar
        # trial's that sustained far less) costs most of a trial.
        search = LoadLadder(lambda v: run_spec((v,), False), ok, values, values.index(start_on(values, start)),
                               stride=PREDICTED_STRIDE if predicted else RATE_STEPS_PER_DOUBLING,
                               ceiling=backlog_ceiling_rps,
                               start_suffices=start_suffices and not probed,
                               held_elsewhere=held_elsewhere, hopeless=answered)  # fmt: skip
        try:
            merged = search.run()
        except OutOfTime as ended:
            # no rate measured yet: what the probe measured is all the trial has
            raise OutOfTime(ended.record or (probed[0] if probed else None)) from None
        if record_path is not None:
            merged.save(record_path)
        return merged
    if start is None:
        doubling = _doubling(1, trial_load.max_concurrency)
        if trial_load.judged_by_measure and deadline is None:  # one run; under a deadline a run per level
            first_run = run_spec(doubling, False)
        else:
            first_run = run_level_by_level(lambda v: run_spec(v, False), doubling, ok)
        if record_path is not None and not (trial_load.judged_by_measure and deadline is None):
            first_run.save(record_path)
        return first_run
    values = tuple(float(v) for v in ladder(int(start), trial_load.max_concurrency))
    first = float(min(max(int(start), 1), trial_load.max_concurrency))
    search = LoadLadder(lambda v: run_spec((v,), False), ok, values, values.index(first), hopeless=answered)
    merged = search.run()
    if record_path is not None:
        merged.save(record_path)
    return merged


# Arrival rates a factor 2**(1/8) (~9%) apart: the open-loop search's resolution. In open loop
# every config within budget at a rate reads that rate as its throughput, so configs whose
# sustainable rates fall between two steps tie; at 2**(1/4) (19%) the tuner could not tell a
# config from one 15% better (benchmarks/tune_claims.py). One more level per trial buys 9%.
RATE_STEPS_PER_DOUBLING = 8
# From a predicted rate (--search predict) the search moves 3 steps (x1.30, about the predictions'
# stated tolerance) instead of doubling: the answer is most often within it, and a bracket of 3
# steps takes two bisections to the ladder's resolution where one of 8 takes three.
PREDICTED_STRIDE = 3
MIN_RATE_RPS = 1.0


def rate_ladder(start_rps: float, max_rate_rps: float) -> tuple[float, ...]:
    """Arrival rates a factor 2**(1/RATE_STEPS_PER_DOUBLING) apart through start_rps, from MIN_RATE_RPS up to
    max_rate_rps (rounded to 3 significant digits)."""
    start_rps = min(max(start_rps, MIN_RATE_RPS), max_rate_rps)
    n = RATE_STEPS_PER_DOUBLING
    down = math.ceil(n * math.log2(start_rps / MIN_RATE_RPS))
    up = math.ceil(n * math.log2(max(max_rate_rps / start_rps, 1.0)))
    values = {start_rps * 2 ** (k / n) for k in range(-down, up + 1)}
    kept = {float(f"{v:.3g}") for v in values if MIN_RATE_RPS <= v <= max_rate_rps}
    return tuple(sorted(kept | {float(f"{start_rps:.3g}")}))


def start_on(values: Sequence[float], start: float) -> float:
    """The ladder value nearest to start (on a log scale)."""
    return min(values, key=lambda v: abs(math.log(v / max(start, 1e-9))))


def step_below(values: Sequence[float], value: float) -> float | None:
    """The ladder value one step below value, or None at the bottom."""
    lower = [v for v in values if v < value * (1 - 1e-9)]
    return max(lower) if lower else None


def _kept(record: RunRecord, into: list[RunRecord]) -> RunRecord:
    into.append(record)
    return record


def _probe_rate(measure_level: Callable[[LoadLevel], RunRecord]) -> float:
    """Where an open-loop search starts without history: half the throughput of one request at
    a time (concurrency 1, closed loop), a rate nearly any config sustains; the ladder gallops up
    from there."""
    rec = measure_level(LoadLevel("concurrency", 1.0))
    tput = rec.levels[-1].completed_rps if rec.levels else 0.0
    return max(MIN_RATE_RPS, 0.5 * tput)


def backlog_ceiling_rps(level: LevelResult) -> float | None:
    """A rate every level above which is over the budget, from an overloaded open-loop level: one
    that completed well under what it sent (a backlog grew) completed at the server's ceiling,
    and no rate past it (plus 5% for noise) is sustainable. None when the level kept up."""
    sent = min(level.load.value, level.sent_rps) if level.sent_rps > 0 else level.load.value
    if level.load.mode == "concurrency" or level.completed_rps <= 0 or level.completed_rps >= 0.9 * sent:
        return None
    return level.completed_rps * 1.05


def ladder(start: int, max_concurrency: int) -> tuple[int, ...]:
    """Concurrencies a factor ~sqrt(2) apart through start, from 1 to max_concurrency (both
    included): the resolution of the search."""
    start = min(max(start, 1), max_concurrency)
    down = math.ceil(2 * math.log2(start)) + 1
    up = math.ceil(2 * math.log2(max(max_concurrency / start, 1.0))) + 1
    values = {min(max_concurrency, max(1, round(start * 2 ** (k / 2)))) for k in range(-down, up + 1)}
    return tuple(sorted(values | {1, max_concurrency}))
