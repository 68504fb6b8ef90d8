"""A latency budget and what a measured level says about it: the statistic a budget holds
(end-to-end latency, or a stream's TTFT / ITL, at a percentile), whether a level is within it,
and why an open-loop level is not sustainable whatever its latency. A record (a tune record
holds its Budget) and pure functions over levels, shared by the tuner's verdicts, its load
search and capacity planning (which must not load the tuner).

`Budget.within` is the one rule for "this level is within budget". measure's `-l` threshold
(perfkit.measure.over_latency_threshold) is another rule on purpose: perf_analyzer's
--latency-threshold, which ends a sweep once the latency statistic passes it and counts neither
errors nor an open-loop shortfall; the tuner uses it only to stop measuring higher loads, and
judges every level it measured by `Budget.within`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from perfkit.errors import UsageError
from perfkit.records._level import LevelResult
from perfkit.records._load import PERCENTILES
from perfkit.units import parse_latency_ms

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


_FORM = "write it as MODEL:BUDGET,MODEL:BUDGET (A:20ms,B:50ms), or one budget for every model (20ms)"


def parse_mix_budgets(models: Sequence[str], text: str) -> dict[str, float]:
    """Each model's latency budget (ms) from `A:20ms,B:50ms`, or one budget (`20ms`) for all.

    Raises UsageError naming the value: a malformed item, a model not given with -m, a model
    without a budget, or a TTFT/ITL budget (a mix carries unary requests).
    """
    items = [i.strip() for i in text.split(",") if i.strip()]
    if len(items) == 1 and ":" not in items[0]:
        _, ms = parse_latency_budget(items[0])
        return dict.fromkeys(models, ms)
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition(":")
        name = name.strip()
        if not sep or not value.strip():
            raise UsageError(f"--latency-budget {text!r}: {item!r} is not MODEL:BUDGET", hint=_FORM)
        if name not in models:
            raise UsageError(
                f"--latency-budget {text!r} names model {name!r}, which is not given with -m",
                hint=f"give a budget to each of {', '.join(models)}",
            )
        metric, ms = parse_latency_budget(value.strip())
        if metric != "latency":
            raise UsageError(f"--latency-budget {text!r}: a mix holds end-to-end latency budgets, not {metric}")
        out[name] = ms
    missing = [m for m in models if m not in out]
    if missing:
        raise UsageError(f"--latency-budget {text!r} gives no budget to -m {missing[0]}", hint=_FORM)
    return out


@dataclass(frozen=True)
class Budget:
    """A latency budget, in one place: its value, the percentile held to it, what it holds
    (end-to-end latency, or a stream's TTFT / ITL), and for a traffic mix each model's own
    budget (latency_budget_ms is then the first model's, the reference the mix is scaled to)."""

    latency_budget_ms: float
    percentile: float = 99.0
    metric: str = "latency"  # one of BUDGET_METRICS
    per_model_ms: tuple[tuple[str, float], ...] = ()
    # The error budget: the share of a level's requests the server may reject (a full queue, a
    # queue timeout; LevelCounts.rejected_count) with the level still counted. 0: any error fails
    # the level. Other failures always fail it. A record saved before it read as 0, its rule then.
    max_error_rate: float = 0.0

    @property
    def latency_budget_us(self) -> float:
        """The budget in microseconds, the unit levels' latencies are recorded in."""
        return self.latency_budget_ms * 1e3

    @property
    def mix_scale(self) -> dict[str, float] | None:
        """Each mix model's factor to the reference budget (None without a mix): see level_budget_us."""
        if not self.per_model_ms:
            return None
        return {m: self.latency_budget_ms / b for m, b in self.per_model_ms}

    @property
    def label(self) -> str:
        """The budget's statistic as lines name it: 'p99', 'TTFT p99'."""
        return budget_label(self.metric, self.percentile)

    def level_us(self, level: LevelResult) -> float:
        """The statistic this budget holds, at a level (see level_budget_us)."""
        return level_budget_us(level, self.percentile, self.metric, self.mix_scale)

    def errors_within(self, level: LevelResult) -> bool:
        """Whether a level's failures fit the error budget: none but the server's rejections, and
        those at most max_error_rate of its requests (with 0, no error at all)."""
        rejected = level.rejected_count if self.max_error_rate > 0 else 0
        return level.error_count == rejected and level.rejection_rate <= self.max_error_rate

    def within(self, level: LevelResult) -> bool:
        """Whether a level counts as within this budget, the one rule every verdict applies: its
        errors within the error budget (errors_within), its statistic (level_us: the percentile of
        the budget's metric, coordinated-omission corrected for open loop) at most the budget, and
        for an open-loop level nothing dropped, sends on schedule and no growing backlog
        (open_loop_shortfall)."""
        return (
            self.errors_within(level)
            and open_loop_shortfall(level) is None
            and self.level_us(level) <= self.latency_budget_us
        )
