"""What a tune run is asked to do (TuneSettings, from flags or a sweep file's [tune] table)
and what it hands back (TuneResult)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from perfkit import objectives
from perfkit.budget import BUDGET_METRICS, Budget, check_percentile, parse_latency_budget, parse_mix_budgets
from perfkit.errors import InputError, UsageError
from perfkit.objectives import ObjectiveName
from perfkit.records import TrialRecord, TuneRecord
from perfkit.tuner._accuracy import OutputTolerance, parse_max_output_diff
from perfkit.tuner._find_load import JudgeSettings
from perfkit.units import parse_bytes, parse_duration_s

SETTINGS_KEYS = (
    "latency_budget",
    "percentile",
    "trials",
    "max_time",
    "objective",
    "seed",
    "min_throughput",
    "max_gpu_memory",
    "max_concurrency",
    "measurement_interval_ms",
    "protocol",
    "sampler",
    "search",
    "max_output_diff",
    "load",
    "arrival",
    "confirm",
    "confirm_time",
)


# Keys only the command line gives (beside SETTINGS_KEYS): --goodput, --trace and --max-rate.
FLAG_KEYS = ("goodput", "trace", "max_rate")


def parse_budget(
    models: Sequence[str], text: str | float, mix_text: str | None = None, *, percentile: float = 99.0
) -> tuple[Budget, tuple[tuple[str, int], ...]]:
    """--latency-budget of one model ('20ms', 'ttft:300ms') or, with several -m, of a traffic mix
    (--mix, default equal weights; 'A:20ms,B:50ms' or one budget for all): the Budget and the mix
    (() for one model). Raises UsageError naming the value."""
    from perfkit.measure import parse_mix  # the mix's syntax is the profiler's

    mix = parse_mix(models, mix_text)
    if not mix:
        metric, ms = parse_latency_budget(text)
        return Budget(ms, percentile, metric), ()
    budgets = parse_mix_budgets([m for m, _ in mix], str(text))
    own = tuple((m, budgets[m]) for m, _ in mix)
    return Budget(own[0][1], percentile, "latency", own), mix


CONFIRM_MIN_WINDOWS = 5  # windows of a confirmation run at the least (ConfirmSettings.min_windows)
CONFIRM_EXTRA_REPEATS = 2  # more runs at a load read within the budget but not its bound (ConfirmSettings)


@dataclass(frozen=True)
class TuneSettings:
    """How to search: budget, objective, bounds, where results and the study go."""

    model: str
    # The one budget trials are held to: its value in ms, the percentile, what it holds (end-to-end
    # latency, or TTFT / ITL of a decoupled model's stream) and, for a traffic mix, each model's own.
    budget: Budget
    objective: ObjectiveName = "throughput"  # a name of perfkit.objectives
    # --objective goodput: the SLOs a streamed request must meet to count, e.g. {"ttft": 200, "itl": 20}
    goodput_slo_ms: dict[str, float] = field(default_factory=dict)
    trials: int | None = 20
    max_time_s: float | None = None
    min_throughput: float | None = None  # infer/s
    max_gpu_memory_bytes: float | None = None
    seed: int = 0
    output_dir: Path | None = None
    storage: str | None = None  # default: sqlite:///<output_dir>/study.db
    study_name: str | None = None
    resume: bool = False
    apply: bool = False
    protocol: Literal["http", "grpc"] = "http"
    max_concurrency: int = 64
    measurement_interval_ms: float = 800.0
    min_windows: int = 3
    max_windows: int = 6
    stability_percentage: float = 15.0
    warmup_s: float = 0.5
    # The first measurement after a config is put on the server warms up this long (at least): the
    # first second or so after a reload serves slowly (onnx_mlp, the server on one CPU: a 0.8 s
    # window read p99 36-47 ms right after a reload and 2.6-3.3 ms after it at the same rate), and
    # a level that reads its first window there is decided over the budget by it.
    reload_warmup_s: float = 2.0
    sampler: Literal["auto", "grid", "random"] = "auto"  # auto: TPE, or NSGA-II for pareto
    # "predict": calibrate, predict the space, measure the best predicted first (tuner/_search/_predict.py);
    # "measure": every trial measured; "auto": predict where the prediction applies (tuner/_search/_kind.py)
    search: Literal["auto", "measure", "predict"] = "auto"
    # Accuracy guard: None compares outputs with per-datatype defaults; OutputTolerance.off() skips it.
    max_output_diff: OutputTolerance | None = None
    # Concurrency search: start where the most similar trial met the budget, gallop and bisect a
    # sqrt(2) ladder from there, and end a level as soon as it is clearly over or under the budget.
    # False: every level from 1 by doubling.
    adaptive_load: bool = True
    command: tuple[str, ...] = ()
    # Load: open loop ("rate": the figure is the highest sustainable arrival rate, Poisson or
    # constant arrivals), closed loop ("concurrency": N clients in lockstep) or a trace replayed.
    # None: the default, decided by load_for() alone (see there and docs/concepts/tuning.md).
    load: Literal["concurrency", "rate", "trace"] | None = None
    trace: Path | None = None  # --load trace FILE: a JSONL trace (perfkit profile --trace's format)
    arrival: Literal["poisson", "constant"] = "poisson"
    max_rate_rps: float = 20000.0
    # Confirmation of the pick and its nearest rivals: repeated longer runs (0: off).
    confirm_repeats: int = 3
    # Each confirmation repeat lasts at least this long: one window of perf_analyzer's default
    # --measurement-interval (5000 ms), so the claim is read over as long as a re-measurement.
    confirm_time_s: float = 5.0
    # A traffic mix (perfkit tune -m A -m B --mix A:3,B:1 --latency-budget A:20ms,B:50ms): the models
    # (model is the first) and their weights; each model's budget is the budget's per_model_ms
    mix: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        check_percentile(self.budget.percentile)
        if self.budget.latency_budget_ms <= 0:
            raise UsageError("--latency-budget must be positive")
        if self.budget.metric not in BUDGET_METRICS:
            raise UsageError(
                f"--latency-budget metric {self.budget.metric!r} unknown", hint="use ttft:300ms, itl:20ms or 20ms"
            )
        if self.trials is not None and self.trials < 1:
            raise UsageError("--trials must be at least 1")
        if self.trials is None and self.max_time_s is None:
            raise UsageError("give --trials N or --max-time (or both) to bound the search")
        if self.sampler not in ("auto", "grid", "random"):
            raise UsageError(f"--sampler {self.sampler!r}: choose auto, grid or random")
        if self.max_concurrency < 1:
            raise UsageError("--max-concurrency must be at least 1")
        if self.load is not None and self.load not in ("concurrency", "rate", "trace"):
            raise UsageError(f"--load {self.load!r}: choose concurrency, rate or trace FILE")
        if (self.load == "trace") != (self.trace is not None):
            raise UsageError("--load trace FILE names the trace to replay (and only --load trace takes a file)")
        if self.arrival not in ("poisson", "constant"):
            raise UsageError(f"--arrival {self.arrival!r}: choose poisson or constant")
        if self.objective == "goodput" and not self.goodput_slo_ms:
            raise UsageError(
                "--objective goodput needs the SLOs a request must meet", hint="e.g. --goodput ttft:200ms,itl:20ms"
            )
        if self.confirm_repeats < 0 or self.confirm_repeats == 1:
            raise UsageError(f"--confirm {self.confirm_repeats}: give 0 (off) or at least 2 repeats")
        if not 0 <= self.confirm_time_s <= 600:
            raise UsageError(f"--confirm-time {self.confirm_time_s:g}s: give 0 to 600 seconds per confirmation run")

    @classmethod
    def from_mapping(
        cls,
        model: str,
        data: Mapping[str, Any],
        *,
        source: str = "[tune]",
        flags: Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> TuneSettings:
        """Settings from a sweep file's [tune] table (keys in SETTINGS_KEYS; space keys are
        TuneSpace's) and, for `perfkit tune`, its flags: `flags` holds them under the table's keys
        (and FLAG_KEYS: goodput, trace, max_rate), None for a flag not given. A flag
        given overrides the table and its errors name the flag. The budget is the table's
        latency_budget and percentile, or arrives parsed (by parse_budget, a mix's too) as
        `budget=` in `overrides`, held to the percentile given here. On the command line
        --max-time alone bounds the search by time (no trial count). Raises InputError/UsageError
        naming the key or flag."""
        given = {k: v for k, v in (flags or {}).items() if v is not None}
        data = {**data, **{k: v for k, v in given.items() if k in SETTINGS_KEYS}}

        def named(key: str) -> str:
            return "--" + key.replace("_", "-") if key in given else f"{source} {key}"

        kw: dict[str, Any] = {}
        parsed: Budget | None = overrides.pop("budget", None)
        if "latency_budget" not in data and parsed is None:
            raise InputError(f"{source}: latency_budget is required", hint='e.g. latency_budget = "20ms"')
        if parsed is None:
            metric, ms = parse_latency_budget(data["latency_budget"])
            parsed = Budget(ms, metric=metric)
        if "max_time" in data:
            kw["max_time_s"] = parse_duration_s(data["max_time"], what=named("max_time"))
        if "confirm_time" in data:
            kw["confirm_time_s"] = parse_duration_s(data["confirm_time"], what=named("confirm_time"))
        try:
            percentile = float(data.get("percentile", parsed.percentile))
        except (TypeError, ValueError):
            raise InputError(f"{source}: percentile = {data['percentile']!r} is not a number") from None
        kw["budget"] = dataclasses.replace(parsed, percentile=percentile)
        for key, conv in (
            ("trials", int),
            ("seed", int),
            ("min_throughput", float),
            ("max_concurrency", int),
            ("measurement_interval_ms", float),
        ):
            if key in data:
                try:
                    kw[key] = conv(data[key])
                except (TypeError, ValueError):
                    raise InputError(f"{source}: {key} = {data[key]!r} is not a number") from None
        if flags is not None and "trials" not in data:
            kw["trials"] = None if "max_time" in data else 20
        if "max_gpu_memory" in data:
            kw["max_gpu_memory_bytes"] = parse_bytes(data["max_gpu_memory"])
        if "max_output_diff" in data:
            kw["max_output_diff"] = parse_max_output_diff(str(data["max_output_diff"]))
        if "confirm" in data:
            try:
                kw["confirm_repeats"] = int(data["confirm"])
            except (TypeError, ValueError):
                raise InputError(f"{source}: confirm = {data['confirm']!r} is not a number of repeats") from None
        for key in ("objective", "protocol", "sampler", "load", "arrival", "search"):
            if key in data:
                kw[key] = str(data[key])
        if kw.get("search", "auto") not in ("auto", "measure", "predict"):
            raise InputError(f"{named('search')} = {kw['search']!r}: give auto, measure or predict")
        if kw.get("objective", objectives.DEFAULT) not in objectives.NAMES:
            *first, last = objectives.NAMES
            raise InputError(f"{source}: objective must be {', '.join(first)} or {last}")
        if "goodput" in given:
            from perfkit.measure import parse_goodput

            kw["goodput_slo_ms"] = parse_goodput(given["goodput"])
        if "trace" in given:
            kw["trace"] = Path(given["trace"])
        if "max_rate" in given:
            kw["max_rate_rps"] = float(given["max_rate"])
        kw.update(overrides)
        return cls(model=model, **kw)

    def load_for(self, decoupled: bool) -> str:
        """The load a trial offers: the one asked for (--load), else the default: open loop
        ("rate"), whose claimed figures agree with an independent re-measurement (closed-loop
        figures on a batching model depend on the client's turnaround); closed loop
        ("concurrency") for a decoupled model, whose streams outlast an open-loop window, so a
        level cannot tell a growing backlog from streams still in flight (open-loop picks of the
        streaming fixture were demoted on confirmation, none held)."""
        if self.load is not None:
            return self.load
        return "concurrency" if decoupled else "rate"

    def search_time_s(self) -> float | None:
        """How long the search may take (None without --max-time): --max-time bounds the whole tune,
        so the search leaves confirmation its time (at most half of it)."""
        if self.max_time_s is None:
            return None
        return self.max_time_s - min(confirmation_reserve_s(self), self.max_time_s / 2)

    def judge_settings(self, metrics_url: str | None, *, streaming: bool = False) -> JudgeSettings:
        """How each trial is measured; streaming for a decoupled model."""
        return JudgeSettings(
            budget=self.budget,
            streaming=streaming,
            max_concurrency=self.max_concurrency,
            protocol=self.protocol,
            measurement_interval_ms=self.measurement_interval_ms,
            stability_percentage=self.stability_percentage,
            min_windows=self.min_windows,
            max_windows=self.max_windows,
            warmup_s=self.warmup_s,
            collect_metrics=self.max_gpu_memory_bytes is not None,
            metrics_url=metrics_url,
            stop_when_decided=self.adaptive_load,
            load_mode=self.load_for(streaming),
            goodput_slo_ms=dict(self.goodput_slo_ms),
            trace=str(self.trace) if self.trace is not None else None,
            trace_base_rps=_trace_base(self.trace),
            distribution=self.arrival,
            max_rate_rps=self.max_rate_rps,
            mix=self.mix,
        )


def confirmation_reserve_s(s: TuneSettings) -> float:
    """About how long confirming the pick takes: its repeats, each at least --confirm-time or its
    minimum windows, plus warm-up, for the pick and one more run of repeats (a rival or a step
    down), the extra runs at the budget's edge, and the longer warm-up after each config is put."""
    if s.confirm_repeats <= 0:
        return 0.0
    repeat_s = max(s.confirm_time_s, CONFIRM_MIN_WINDOWS * s.measurement_interval_ms / 1000.0) + s.warmup_s + 1.0
    reloads_s = 2 * max(0.0, s.reload_warmup_s - s.warmup_s)
    return (2 * s.confirm_repeats + CONFIRM_EXTRA_REPEATS) * repeat_s + reloads_s


def _trace_base(trace: Path | None) -> float:
    if trace is None:
        return 1.0
    from perfkit.measure import trace_mean_rate

    return trace_mean_rate(Path(trace))


@dataclass(frozen=True)
class TuneResult:
    """The tune record and where its files went."""

    record: TuneRecord
    output_dir: Path
    paths: dict[str, Path] = field(default_factory=dict)
    applied_backup: Path | None = None

    @property
    def best(self) -> TrialRecord | None:
        return next((t for t in self.record.trials if t.number == self.record.best_trial), None)

    @property
    def original(self) -> TrialRecord | None:
        return self.record.original()


def default_output_dir(model: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"tune-{model}-{stamp}"
