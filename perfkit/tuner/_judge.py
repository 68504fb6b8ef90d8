"""How one candidate is judged: the load levels measured, and what a run record says about
the budget (the highest load whose percentile stays within it, and its throughput)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from perfkit.errors import UsageError
from perfkit.records import PERCENTILES, LevelResult, LoadLevel, ProfileSpec, RunRecord

_UNITS_S = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration_s(text: str | float, *, default_unit: str = "s", what: str = "duration") -> float:
    """'20ms', '1.5s', '500us', '10m', '2h' (or a bare number in default_unit) in seconds;
    raises UsageError naming what."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), default_unit
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zµ]*)\s*", str(text).lower())
        if not m:
            raise UsageError(f"{what} {text!r} is not a number with a unit", hint="e.g. 20ms, 1.5s, 500us, 10m")
        value, unit = float(m.group(1)), m.group(2) or default_unit
    if unit not in _UNITS_S:
        raise UsageError(f"{what} {text!r}: unknown unit {unit!r}", hint="use us, ms, s, m or h")
    seconds = value * _UNITS_S[unit]
    if seconds <= 0:
        raise UsageError(f"{what} {text!r} must be positive")
    return seconds


def parse_latency_ms(text: str | float) -> float:
    """A latency budget ('20ms', '0.02s', '20000us'; bare numbers are ms) in milliseconds."""
    return parse_duration_s(text, default_unit="ms", what="latency budget") * 1e3


# What a budget holds to its percentile: the end-to-end request latency (plain '20ms'), or for
# streamed (decoupled) models the time to first response ('ttft:300ms') or the gap between
# consecutive responses ('itl:20ms'), as `perfkit profile --streaming` measures them.
BUDGET_METRICS = ("latency", "ttft", "itl")
STREAM_BUDGET_METRICS = ("ttft", "itl")


def parse_latency_budget(text: str | float) -> tuple[str, float]:
    """A --latency-budget as (metric, milliseconds): '20ms' -> ('latency', 20.0),
    'ttft:300ms' -> ('ttft', 300.0), 'itl:20ms' -> ('itl', 20.0). Raises UsageError naming the
    value for an unknown metric or a bad duration."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return "latency", parse_latency_ms(text)
    raw = str(text).strip()
    metric, sep, rest = raw.partition(":")
    if not sep:
        return "latency", parse_latency_ms(raw)
    metric = metric.strip().lower()
    if metric not in BUDGET_METRICS:
        raise UsageError(
            f"latency budget {raw!r}: unknown metric {metric!r}",
            hint="use ttft:300ms, itl:20ms, or a plain duration (end-to-end latency), e.g. 20ms",
        )
    return metric, parse_latency_ms(rest)


def check_budget_metric(metric: str, model: str, decoupled: bool) -> None:
    """Raise UsageError when a TTFT/ITL budget is given for a model that streams no responses."""
    if metric in STREAM_BUDGET_METRICS and not decoupled:
        raise UsageError(
            f"--latency-budget {metric}:...: model {model!r} is not decoupled, so it streams no responses to time",
            hint="give a plain budget (end-to-end latency), e.g. --latency-budget 20ms",
        )


def budget_label(metric: str, percentile: float) -> str:
    """How a budget's statistic is named in lines and reports: 'p99', 'TTFT p99', 'ITL p99'."""
    pct = f"p{percentile:g}"
    return pct if metric == "latency" else f"{metric.upper()} {pct}"


def check_percentile(pct: float) -> float:
    """The percentile if perfkit summarizes it (50, 90, 95, 99, 99.9); raises UsageError."""
    if float(pct) not in PERCENTILES:
        raise UsageError(
            f"--percentile {pct:g} is not one perfkit reports",
            hint=f"use one of {', '.join(f'{p:g}' for p in PERCENTILES)}",
        )
    return float(pct)


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
class JudgeSettings:
    """How each trial is measured. Short windows keep a trial to seconds."""

    latency_budget_ms: float
    percentile: float = 99.0
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
    budget_metric: str = "latency"  # one of BUDGET_METRICS
    streaming: bool = False  # a decoupled model: responses arrive on a gRPC stream
    # How load is offered: closed loop ("concurrency": N clients in lockstep) or open loop
    # ("rate": arrivals at a rate, `distribution` poisson or constant; the figure is the
    # sustainable rate).
    load_mode: str = "concurrency"
    distribution: str = "poisson"
    max_rate_rps: float = 20000.0
    goodput_slo_ms: dict[str, float] = field(default_factory=dict)  # streamed requests' SLOs (goodput)
    # load_mode "trace": a JSONL trace replayed faster or slower; a level's value is its mean rate
    # (trace_base_rps, the trace's own mean rate, at speed 1).
    trace: str | None = None
    trace_base_rps: float = 1.0
    # A traffic mix (perfkit tune -m A -m B --mix A:3,B:1): the mix measured, and each model's own
    # budget; latency_budget_ms is then the first model's (the reference the mix's figure is scaled to)
    mix: tuple[tuple[str, int], ...] = ()
    mix_budgets_ms: tuple[tuple[str, float], ...] = ()

    @property
    def mix_scale(self) -> dict[str, float] | None:
        """Each mix model's factor to the reference budget (None without a mix): see level_budget_us."""
        if not self.mix_budgets_ms:
            return None
        return {m: self.latency_budget_ms / b for m, b in self.mix_budgets_ms}

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
            dist: Any = self.distribution
            return LoadLevel("request_rate", float(value), dist)
        return LoadLevel("concurrency", float(int(value)))

    @property
    def judged_by_measure(self) -> bool:
        """Whether perfkit profile itself can judge levels against the budget (its threshold is
        on the end-to-end latency); TTFT/ITL budgets are judged by the tuner level by level."""
        return self.budget_metric == "latency" and not self.mix  # a mix's models each hold their own budget

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
            percentile=self.percentile,
            # measure's threshold is on the end-to-end latency: a TTFT/ITL budget must not stop it.
            latency_threshold_ms=self.latency_budget_ms if by_measure else None,
            warmup_s=self.warmup_s,
            collect_metrics=self.collect_metrics,
            metrics_url=self.metrics_url,
            streaming=self.streaming,
            goodput_slo_ms=dict(self.goodput_slo_ms),
            trace=self.trace if trace else None,
            trace_speed=speed,
            mix=self.mix,
        )


class ConstraintSettings(Protocol):
    """The settings a verdict is checked against (TuneSettings has them)."""

    @property
    def latency_budget_ms(self) -> float: ...
    @property
    def min_throughput(self) -> float | None: ...
    @property
    def max_gpu_memory_bytes(self) -> float | None: ...


@dataclass(frozen=True)
class TrialVerdict:
    """What a trial achieved: the best level within the budget, or why none was."""

    feasible_load: LoadLevel | None
    throughput_infer_per_s: float | None
    latency_us: float | None
    lowest_over_budget: bool  # the lightest load already broke the budget: hopeless
    lowest_throughput: float
    lowest_latency_us: float
    levels_measured: int
    gpu_memory_bytes: float | None
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def within_budget(self) -> bool:
        return self.feasible_load is not None


def level_budget_us(
    level: LevelResult, percentile: float, metric: str = "latency", mix_scale: Mapping[str, float] | None = None
) -> float:
    """The statistic a budget holds at this level: the percentile of the end-to-end latency
    (corrected where measured), of TTFT, or of ITL. A TTFT/ITL budget on a level measured
    without streaming reads as infinite (never within budget).

    A traffic mix (`mix_scale`: each model's reference budget over its own) holds every model to
    its own budget: the figure is the worst model's percentile scaled to the reference budget,
    within it exactly when every model is within its own."""
    if mix_scale is not None and level.models:
        return max(s.result.latency().percentile_us(percentile) * mix_scale[s.model] for s in level.models)
    if metric == "latency":
        return level.latency().percentile_us(percentile)
    st = level.streaming
    if st is None:
        return math.inf
    if metric == "ttft":
        return st.ttft.percentile_us(percentile)
    if metric == "itl":
        return st.itl.percentile_us(percentile)
    raise UsageError(f"budget metric {metric!r} unknown", hint=f"use one of {', '.join(BUDGET_METRICS)}")


MIN_WINDOW_REQUESTS = 50  # open-loop windows hold about this many requests (see JudgeSettings)

# An open-loop level is sustainable only if the generator sent what was asked (at least this
# share of the target rate) and the server completed what was sent (no growing backlog).
MIN_SENT_SHARE = 0.9
MIN_COMPLETED_SHARE = 0.95


def open_loop_shortfall(level: LevelResult) -> str | None:
    """Why an open-loop level is not sustainable whatever its latency (dropped sends, sends
    behind the schedule, a growing backlog), or None. Closed-loop levels: None."""
    if level.load.mode not in ("request_rate", "custom", "trace"):
        return None
    if level.dropped_count > 0:
        return f"{level.dropped_count} sends dropped (too many requests in flight)"
    if level.load.mode == "request_rate" and level.duration_s > 0:
        # Poisson schedules send a random number of requests: behind schedule means short by
        # more than 10% and by more than 3 standard deviations of that count.
        due = level.load.value * level.duration_s
        sent = level.sent_rps * level.duration_s
        if sent < due - max((1 - MIN_SENT_SHARE) * due, 3 * math.sqrt(due)):
            return f"sent {level.sent_rps:.1f} req/s of {level.load.value:g} asked"
    # Requests still in flight when the level ends are normal (rate x latency); a backlog grows
    # when the deficit passes 5% of what was sent and 3 standard deviations of a Poisson count.
    sent_n = level.sent_rps * level.duration_s
    deficit = sent_n - level.completed_rps * level.duration_s
    if sent_n > 0 and deficit > max((1 - MIN_COMPLETED_SHARE) * sent_n, 3 * math.sqrt(sent_n) + 2):
        return f"completed {level.completed_rps:.1f} of {level.sent_rps:.1f} req/s sent: the backlog grows"
    return None


def level_within_budget(
    level: LevelResult,
    latency_budget_ms: float,
    percentile: float,
    metric: str = "latency",
    mix_scale: Mapping[str, float] | None = None,
) -> bool:
    """Whether a level counts as within budget: no errors, its percentile (of the budget's
    metric; coordinated-omission corrected for open loop) at most the budget, and for an
    open-loop level nothing dropped, sends on schedule and no growing backlog."""
    return (
        level.error_count == 0
        and open_loop_shortfall(level) is None
        and level_budget_us(level, percentile, metric, mix_scale) <= latency_budget_ms * 1e3
    )


def judge_trial(
    record: RunRecord,
    *,
    latency_budget_ms: float,
    percentile: float,
    metric: str = "latency",
    mix_scale: Mapping[str, float] | None = None,
) -> TrialVerdict:
    """Read a trial's run record against the budget (of `metric`: end-to-end latency, TTFT or
    ITL). A level counts only without errors.

    The throughput judged stays completed requests per second for every model. For a decoupled
    model output tokens/s is the figure users quote, but the tokens a request streams are set by
    the workload (its inputs, max_tokens), not by the config: tokens/s ranks candidates exactly as
    requests/s does, so the record keeps one throughput meaning for every model and reports
    tokens/s beside it (metrics['output_tokens_per_s'], shown in the summary line)."""
    budget_us = latency_budget_ms * 1e3
    levels = list(record.levels)
    best: LevelResult | None = None

    def _level_latency_us(level: LevelResult, pct: float) -> float:
        return level_budget_us(level, pct, metric, mix_scale)

    for level in levels:
        ok = level_within_budget(level, latency_budget_ms, percentile, metric, mix_scale)
        if ok and (best is None or level.throughput_infer_per_s > best.throughput_infer_per_s):
            best = level
    first = levels[0] if levels else None
    lowest_over = first is None or first.error_count > 0 or _level_latency_us(first, percentile) > budget_us
    mem = [s.memory_used_bytes for lv in levels for s in lv.metrics if s.memory_used_bytes is not None]
    metrics: dict[str, float] = {"levels_measured": float(len(levels))}
    if best is not None:
        metrics.update(
            {
                "p50_us": best.latency().p50_us,
                "p99_us": best.latency().p99_us,
                "mean_us": best.latency().mean_us,
                "concurrency" if best.load.mode == "concurrency" else "rate_rps": best.load.value,
                "stable": 1.0 if best.stable else 0.0,
            }
        )
        st = best.streaming
        if st is not None:
            metrics.update(
                {
                    "ttft_p50_us": st.ttft.p50_us,
                    "ttft_p99_us": st.ttft.p99_us,
                    "itl_p50_us": st.itl.p50_us,
                    "itl_p99_us": st.itl.p99_us,
                    "output_tokens_per_s": st.output_tokens_per_s,
                    "responses_per_s": st.responses_per_s,
                }
            )
            if st.goodput_rps is not None:
                metrics["goodput_rps"] = st.goodput_rps
        for share in best.models:  # a traffic mix: each model's own figures at the level picked
            metrics[f"{share.model}.throughput_infer_per_s"] = share.result.throughput_infer_per_s
            metrics[f"{share.model}.latency_us"] = share.result.latency().percentile_us(percentile)
        if best.server is not None:
            metrics["server_queue_avg_us"] = best.server.queue_avg_us
            metrics["server_compute_infer_avg_us"] = best.server.compute_infer_avg_us
            if best.server.execution_count:
                metrics["avg_batch"] = best.server.inference_count / best.server.execution_count
    if mem:
        metrics["gpu_memory_bytes"] = max(mem)
    return TrialVerdict(
        feasible_load=best.load if best else None,
        throughput_infer_per_s=best.throughput_infer_per_s if best else None,
        latency_us=_level_latency_us(best, percentile) if best else None,
        lowest_over_budget=lowest_over,
        lowest_throughput=first.throughput_infer_per_s if first else 0.0,
        lowest_latency_us=_level_latency_us(first, percentile) if first else float("inf"),
        levels_measured=len(levels),
        gpu_memory_bytes=max(mem) if mem else None,
        metrics=metrics,
    )


def constraints(settings: ConstraintSettings, v: TrialVerdict) -> tuple[bool, dict[str, float]]:
    """A verdict's constraint values (<= 0 is satisfied), relative so they mix on one scale:
    the latency budget, and --min-throughput / --max-gpu-memory when given. GPU memory
    unknown (no metrics) does not break the constraint."""
    budget_us = settings.latency_budget_ms * 1e3
    lat = v.latency_us if v.latency_us is not None else v.lowest_latency_us
    rel = (lat - budget_us) / budget_us
    cons = {"latency": rel if v.within_budget else max(1e-6, rel)}
    if settings.min_throughput is not None:
        tput = v.throughput_infer_per_s or 0.0
        cons["min_throughput"] = (settings.min_throughput - tput) / settings.min_throughput
    if settings.max_gpu_memory_bytes is not None:
        mem = v.gpu_memory_bytes
        limit = settings.max_gpu_memory_bytes
        cons["gpu_memory"] = 0.0 if mem is None else (mem - limit) / limit
    cons = {k: (c if math.isfinite(c) else 1e6) for k, c in cons.items()}
    return all(c <= 0 for c in cons.values()), cons


def level_table(
    record: RunRecord, percentile: float, metric: str = "latency", mix_scale: Mapping[str, float] | None = None
) -> list[dict[str, Any]]:
    """One short row per measured level (for progress lines)."""
    return [
        {
            "load": lv.load.label,
            "throughput": lv.throughput_infer_per_s,
            "latency_us": level_budget_us(lv, percentile, metric, mix_scale),
            "errors": lv.error_count,
        }
        for lv in record.levels
    ]
