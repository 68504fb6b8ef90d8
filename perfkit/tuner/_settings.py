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
from perfkit.errors import InputError, UsageError
from perfkit.objectives import ObjectiveName
from perfkit.records import (
    BUDGET_METRICS,
    DEFAULT_BURST_OFF_MS,
    DEFAULT_BURST_ON_MS,
    Budget,
    TrialRecord,
    TuneRecord,
    check_percentile,
    parse_latency_budget,
    parse_mix_budgets,
)
from perfkit.schedule import check_bursts
from perfkit.tuner._accuracy import OutputTolerance
from perfkit.tuner._find_load import TrialLoadSettings
from perfkit.tuner._setting_decl import (
    BUDGET_SETTINGS,
    BYTES,
    DURATION_S,
    FILE,
    FLOAT,
    GOODPUT_MS,
    INT,
    REPEATS,
    TOLERANCE,
    declarations,
    setting,
    trial_load_field,
    trial_load_fields,
)
from perfkit.units import parse_percent

# The defaults of the settings that feed the trial's load settings as they are: TrialLoadSettings'
# own, so each is written once (on the record the trials are measured with).
_TRIAL = {f.name: f.default for f in dataclasses.fields(TrialLoadSettings) if f.default is not dataclasses.MISSING}


def parse_budget(
    models: Sequence[str], text: str | float, mix_text: str | None = None
) -> tuple[Budget, tuple[tuple[str, int], ...]]:
    """--latency-budget of one model ('20ms', 'ttft:300ms') or, with several -m, of a traffic mix
    (--mix, default equal weights; 'A:20ms,B:50ms' or one budget for all): the Budget and the mix
    (() for one model), held to Budget's default percentile (from_mapping sets the one asked for).
    Raises UsageError naming the value."""
    from perfkit.measure import parse_mix  # the mix's syntax is the profiler's

    mix = parse_mix(models, mix_text)
    if not mix:
        metric, ms = parse_latency_budget(text)
        return Budget(ms, metric=metric), ()
    budgets = parse_mix_budgets([m for m, _ in mix], str(text))
    own = tuple((m, budgets[m]) for m, _ in mix)
    return Budget(own[0][1], per_model_ms=own), mix


CONFIRM_MIN_WINDOWS = 5  # windows of a confirmation run at the least (ConfirmSettings.min_windows)
CONFIRM_EXTRA_REPEATS = 2  # more runs at a load read within the budget but not its bound (ConfirmSettings)


def parse_max_error_rate(data: Mapping[str, Any], named: str, default: float = 0.0) -> float:
    """The error budget a [tune] table or the flags give (max_error_rate: 0.05 or '5%'), else the
    default. Raises UsageError naming the flag or key."""
    if data.get("max_error_rate") is None:
        return default
    return parse_percent(str(data["max_error_rate"]), what=named)


@dataclass(frozen=True)
class TuneSettings:
    """How to search: budget, objective, bounds, where results and the study go. Each setting is
    declared on its field (setting(): its default, [tune] key, flags, unit, help and the trial's
    settings it feeds); `perfkit tune`'s options and the [tune] parser are derived from them."""

    model: str
    # The one budget trials are held to: its value in ms, the percentile, what it holds (end-to-end
    # latency, or TTFT / ITL of a decoupled model's stream) and, for a traffic mix, each model's own.
    budget: Budget = trial_load_field(trial_load="budget")
    objective: ObjectiveName = setting(
        objectives.DEFAULT,
        key="objective",
        flags=("--objective",),
        choices=objectives.NAMES,
        help="throughput: within the budget. per-instance / per-gpu: throughput over the instances or GPUs the"
        " config occupies; goodput: streamed requests meeting every --goodput SLO per second (decoupled models);"
        " pareto: throughput and latency.",
    )
    # --objective goodput: the SLOs a streamed request must meet to count, e.g. {"ttft": 200, "itl": 20}
    goodput_slo_ms: dict[str, float] = setting(
        default_factory=dict,
        key="goodput",
        flags=("--goodput",),
        kind=GOODPUT_MS,
        flag_only=True,
        trial_load="goodput_slo_ms",
        help="With --objective goodput: the SLOs, e.g. ttft:200ms,itl:20ms.",
    )
    trials: int | None = setting(
        20, key="trials", flags=("--trials",), kind=INT, minimum=1, help="Trials in the study (counts resumed ones)."
    )
    max_time_s: float | None = setting(
        None,
        key="max_time",
        flags=("--max-time",),
        kind=DURATION_S,
        help="Bound the whole tune, e.g. 10m (trials stop in time to confirm).",
    )
    min_throughput: float | None = setting(
        None, key="min_throughput", flags=("--min-throughput",), kind=FLOAT, help="Constraint: infer/s at least this."
    )
    max_gpu_memory_bytes: float | None = setting(
        None,
        key="max_gpu_memory",
        flags=("--max-gpu-memory",),
        kind=BYTES,
        help="Constraint: GPU memory used at most this, e.g. 8GiB.",
    )
    seed: int = setting(0, key="seed", flags=("--seed",), kind=INT, help="Sampler seed.")
    output_dir: Path | None = None
    storage: str | None = None  # default: sqlite:///<output_dir>/study.db
    study_name: str | None = None
    resume: bool = False
    apply: bool = False
    protocol: Literal["http", "grpc"] = setting(
        _TRIAL["protocol"],
        key="protocol",
        flags=("-i", "--protocol"),
        choices=("http", "grpc"),
        trial_load="protocol",
        help="Protocol of the trials' requests.",
    )
    max_concurrency: int = setting(
        _TRIAL["max_concurrency"],
        key="max_concurrency",
        flags=("--max-concurrency",),
        kind=INT,
        minimum=1,
        trial_load="max_concurrency",
        help="Closed loop (--load concurrency; a decoupled model's default): highest concurrency tried per trial.",
    )
    measurement_interval_ms: float = setting(
        _TRIAL["measurement_interval_ms"],
        key="measurement_interval_ms",
        flags=("--measurement-interval",),
        kind=FLOAT,
        unit="ms",
        trial_load="measurement_interval_ms",
        help="Window length in ms.",
    )
    min_windows: int = setting(_TRIAL["min_windows"], trial_load="min_windows")
    max_windows: int = setting(_TRIAL["max_windows"], trial_load="max_windows")
    stability_percentage: float = setting(_TRIAL["stability_percentage"], trial_load="stability_percentage")
    warmup_s: float = setting(_TRIAL["warmup_s"], trial_load="warmup_s")
    # The first measurement after a config is put on the server warms up this long (at least): the
    # first second or so after a reload serves slowly (a short window right after a reload can read
    # the p99 ten times what it reads a second later at the same rate), and a level that reads its
    # first window there is decided over the budget by it.
    reload_warmup_s: float = 2.0
    sampler: Literal["auto", "grid", "random"] = setting(
        "auto",
        key="sampler",
        flags=("--sampler",),
        choices=("auto", "grid", "random"),
        checked_choices=True,
        help="auto: TPE (NSGA-II for pareto); grid: every point (ranges at 4 log-spaced values); random.",
    )
    # "predict": calibrate, predict the space, measure the best predicted first (tuner/_search/_predict.py);
    # "measure": every trial measured; "auto": predict where the prediction applies (tuner/_search/_kind.py)
    search: Literal["auto", "measure", "predict"] = setting(
        "auto",
        key="search",
        flags=("--search",),
        choices=("auto", "measure", "predict"),
        help="predict: calibrate on the server, predict every config, measure the best predicted (the measured"
        " search takes over where predictions miss); measure: every trial measured; auto: predict where the"
        " prediction applies (one model or an ensemble, open-loop rates, a latency budget, the batching and"
        " instance knobs), else measure, saying why.",
    )
    # Accuracy guard: None compares outputs with per-datatype defaults; OutputTolerance.off() skips it.
    max_output_diff: OutputTolerance | None = setting(
        None,
        key="max_output_diff",
        flags=("--max-output-diff",),
        kind=TOLERANCE,
        default_text="by output datatype: FP32 2e-3, FP16/BF16 1e-2, integers and strings exact",
        help="Accuracy guard: how far a candidate's outputs may differ from the original config's on the same"
        " inputs: a relative difference (1e-3), abs=X,rel=Y, or off.",
    )
    # Concurrency search: start where the most similar trial met the budget, gallop and bisect a
    # sqrt(2) ladder from there, and end a level as soon as it is clearly over or under the budget.
    # False: every level from 1 by doubling.
    adaptive_load: bool = setting(True, trial_load="stop_when_decided")
    command: tuple[str, ...] = ()
    # Load: open loop ("rate": the figure is the highest sustainable arrival rate, Poisson or
    # constant arrivals), closed loop ("concurrency": N clients in lockstep) or a trace replayed.
    # None: the default, decided by load_for() alone (see there and docs/concepts/tuning.md).
    load: Literal["concurrency", "rate", "trace"] | None = setting(
        None,
        key="load",
        flags=("--load",),
        choices=("concurrency", "rate", "trace"),
        default_text="",  # decided by load_for(), as the help says
        help="How each trial offers load. Default: rate (open loop: the figure is the highest sustainable arrival"
        " rate; its claims agree with an independent re-measurement), but concurrency for a decoupled model (its"
        " streams outlast an open-loop window). concurrency: closed loop, clients in lockstep. trace: --trace FILE"
        " replayed faster or slower (the highest sustainable mean rate).",
    )
    trace: Path | None = setting(
        None,
        key="trace",
        flags=("--trace",),
        kind=FILE,
        flag_only=True,
        help="With --load trace: a JSONL trace (perfkit profile --trace's format); sessions are kept.",
    )
    arrival: Literal["poisson", "constant", "onoff"] = setting(
        _TRIAL["distribution"],
        key="arrival",
        flags=("--arrival",),
        choices=("poisson", "constant", "onoff"),
        checked_choices=True,
        trial_load="distribution",
        help="With --load rate. onoff: bursts (--burst-on-ms of evenly spaced sends, --burst-off-ms of none), the"
        " rate the mean over the cycle; searched by measurement.",
    )
    burst_on_ms: float | None = setting(
        None, key="burst_on_ms", flags=("--burst-on-ms",), kind=FLOAT, unit="ms", trial_load="burst_on_ms",
        flag_only=True, default_text=f"{DEFAULT_BURST_ON_MS:g} ms",
        help="With --arrival onoff: how long each burst sends.",
    )  # fmt: skip
    repeat_fraction: float = setting(
        _TRIAL["repeat_fraction"], key="repeat_fraction", flags=("--repeat-fraction",), kind=FLOAT,
        trial_load="repeat_fraction",
        help="The fraction of requests that repeat an earlier request's inputs (perfkit profile --repeat-fraction):"
        " a stated repeat rate is what searches the response cache (0: one input sent every time, not searched).",
    )  # fmt: skip
    burst_off_ms: float | None = setting(
        None, key="burst_off_ms", flags=("--burst-off-ms",), kind=FLOAT, unit="ms", trial_load="burst_off_ms",
        flag_only=True, default_text=f"{DEFAULT_BURST_OFF_MS:g} ms",
        help="With --arrival onoff: the quiet gap after each burst.",
    )  # fmt: skip
    max_rate_rps: float = setting(
        _TRIAL["max_rate_rps"],
        key="max_rate",
        flags=("--max-rate",),
        kind=FLOAT,
        unit="req/s",
        flag_only=True,
        trial_load="max_rate_rps",
        help="With --load rate: highest rate tried.",
    )
    confirm_repeats: int = setting(
        3,
        key="confirm",
        flags=("--confirm",),
        kind=REPEATS,
        help="Re-measure the pick and its nearest rivals in N longer runs before claiming it (0: off).",
    )
    # Each confirmation repeat lasts at least this long: one window of perf_analyzer's default
    # --measurement-interval (5000 ms), so the claim is read over as long as a re-measurement.
    confirm_time_s: float = setting(
        5.0,
        key="confirm_time",
        flags=("--confirm-time",),
        kind=DURATION_S,
        unit="s",
        help="Each confirmation run lasts at least this long, e.g. 5s (the default: one perf_analyzer window).",
    )
    # A traffic mix (perfkit tune -m A -m B --mix A:3,B:1 --latency-budget A:20ms,B:50ms): the models
    # (model is the first) and their weights; each model's budget is the budget's per_model_ms
    mix: tuple[tuple[str, int], ...] = setting((), trial_load="mix")

    def __post_init__(self) -> None:
        for decl in FIELD_SETTINGS:
            decl.check(getattr(self, decl.field))
        check_percentile(self.budget.percentile)
        check_bursts(self.arrival, self.burst_on_ms, self.burst_off_ms, flag="--arrival")
        if self.budget.latency_budget_ms <= 0:
            raise UsageError("--latency-budget must be positive")
        if not 0 <= self.budget.max_error_rate < 1:
            raise UsageError(
                f"--max-error-rate {self.budget.max_error_rate:g}: give a share of requests from 0 up to (not) 1",
                hint="e.g. --max-error-rate 0.05 (or 5%)",
            )
        if self.budget.metric not in BUDGET_METRICS:
            raise UsageError(
                f"--latency-budget metric {self.budget.metric!r} unknown", hint="use ttft:300ms, itl:20ms or 20ms"
            )
        if self.trials is None and self.max_time_s is None:
            raise UsageError("give --trials N or --max-time (or both) to bound the search")
        if self.load is not None and self.load not in ("concurrency", "rate", "trace"):
            raise UsageError(f"--load {self.load!r}: choose concurrency, rate or trace FILE")
        if (self.load == "trace") != (self.trace is not None):
            raise UsageError("--load trace FILE names the trace to replay (and only --load trace takes a file)")
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
        TuneSpace's) and, for `perfkit tune`, its flags: `flags` holds them under the declared keys
        (those of SETTINGS_KEYS and the flag-only goodput, trace, max_rate), None for a flag not
        given. A flag given overrides the table and its errors name the flag. The budget is the
        table's latency_budget and percentile, or arrives parsed (by parse_budget, a mix's too) as
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
        try:
            percentile = float(data.get("percentile", parsed.percentile))
        except (TypeError, ValueError):
            raise InputError(f"{source}: percentile = {data['percentile']!r} is not a number") from None
        max_error_rate = parse_max_error_rate(data, named("max_error_rate"), parsed.max_error_rate)
        kw["budget"] = dataclasses.replace(parsed, percentile=percentile, max_error_rate=max_error_rate)
        for decl in FIELD_SETTINGS:
            values = given if decl.flag_only else data
            if decl.key is not None and decl.key in values:
                kw[decl.field] = decl.kind.parse(values[decl.key], decl.key, source, named(decl.key))
        if flags is not None and "trials" not in data and "max_time" in data:
            kw["trials"] = None
        if kw.get("search", "auto") not in ("auto", "measure", "predict"):
            raise InputError(f"{named('search')} = {kw['search']!r}: give auto, measure or predict")
        if kw.get("objective", objectives.DEFAULT) not in objectives.NAMES:
            *first, last = objectives.NAMES
            raise InputError(f"{source}: objective must be {', '.join(first)} or {last}")
        kw.update(overrides)
        return cls(model=model, **kw)

    def load_for(self, decoupled: bool) -> str:
        """The load a trial offers: the one asked for (--load), else the default: open loop
        ("rate"), whose claimed figures agree with an independent re-measurement (closed-loop
        figures on a batching model depend on the client's turnaround); closed loop
        ("concurrency") for a decoupled model, whose streams outlast an open-loop window, so a
        level cannot tell a growing backlog from streams still in flight (an open-loop pick of a
        streaming model does not hold its confirmation)."""
        if self.load is not None:
            return self.load
        return "concurrency" if decoupled else "rate"

    def search_time_s(self) -> float | None:
        """How long the search may take (None without --max-time): --max-time bounds the whole tune,
        so the search leaves confirmation its time (at most half of it)."""
        if self.max_time_s is None:
            return None
        return self.max_time_s - min(confirmation_reserve_s(self), self.max_time_s / 2)

    def trial_load_settings(self, metrics_url: str | None, *, streaming: bool = False) -> TrialLoadSettings:
        """How each trial is measured; streaming for a decoupled model. The settings that feed it
        as they are say so in their declaration (trial_load=...); the rest depend on the trial."""
        return TrialLoadSettings(
            **trial_load_fields(self, FIELD_SETTINGS),
            streaming=streaming,
            collect_metrics=self.max_gpu_memory_bytes is not None,
            metrics_url=metrics_url,
            load_mode=self.load_for(streaming),
            trace=str(self.trace) if self.trace is not None else None,
            trace_base_rps=_trace_base(self.trace),
        )


FIELD_SETTINGS = declarations(TuneSettings)
TUNE_SETTINGS = (*BUDGET_SETTINGS, *FIELD_SETTINGS)
# The keys of a [tune] table's settings (TuneSpace's keys are the rest of the table).
SETTINGS_KEYS = tuple(s.key for s in TUNE_SETTINGS if s.key is not None and not s.flag_only)


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
