"""Gate thresholds: `throughput:-5%`, `p99:+10%`, `p99:+2ms`, `throughput:-50/s`."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Literal

from perfkit.errors import UsageError
from perfkit.gate.stream_metrics import ALIASES as STREAM_ALIASES
from perfkit.gate.stream_metrics import STREAM_METRICS
from perfkit.records import DEFAULT_GATE_THRESHOLDS, PERCENTILE_OF_METRIC

METRICS = ("throughput", *PERCENTILE_OF_METRIC, *STREAM_METRICS)
PERCENTILE_OF = PERCENTILE_OF_METRIC
DEFAULT_THRESHOLDS = DEFAULT_GATE_THRESHOLDS  # defined on the records: the measurement reads them too
HIGHER_IS_BETTER = ("throughput", "tokens")
_ALIASES = {"p99.9": "p999", "infer/s": "throughput", "tput": "throughput", **STREAM_ALIASES}  # other names -> metric

_UNIT_US = {"us": 1.0, "ms": 1000.0, "s": 1_000_000.0}
_PATTERN = re.compile(r"^\s*([a-z0-9._/]+?)\s*:\s*([+-]?)\s*([0-9]*\.?[0-9]+)\s*(%|us|ms|s|/s|infer/s)?\s*$")


@dataclass(frozen=True)
class Threshold:
    """How much worse a metric may get: relative (pct) or absolute (us for latency, infer/s for throughput)."""

    metric: str
    kind: Literal["pct", "abs"]
    value: float  # magnitude toward worse: percent points, or us / infer/s
    text: str
    model: str = ""  # MODEL:METRIC:VALUE: only that model's figures (alone, or its share of a mix); "": all

    @property
    def higher_is_better(self) -> bool:
        return self.metric in HIGHER_IS_BETTER

    def exceeded(self, worse_pct: float, worse_abs: float) -> bool:
        """Whether a change toward worse (positive = worse) is past the threshold."""
        return (worse_pct if self.kind == "pct" else worse_abs) > self.value


def parse_threshold(text: str) -> Threshold:
    """Parse [MODEL:]METRIC:[+-]VALUE[%|ms|us|s|/s]; raises UsageError naming the text and the forms accepted.

    With MODEL the threshold judges only that model's figures (measured alone, or its share of
    a traffic mix); without it, every model's and every mix's.
    """
    if text.count(":") >= 2:
        model, rest = text.split(":", 1)
        model = model.strip()
        if not model:
            raise UsageError(f"--threshold {text!r}: the model before the first ':' is empty")
        return dataclasses.replace(parse_threshold(rest), model=model, text=text)
    m = _PATTERN.match(text.lower())
    forms = "forms: throughput:-5%, throughput:-50/s, p99:+10%, p99:+2ms (metrics: " + ", ".join(METRICS) + ")"
    if not m:
        raise UsageError(f"--threshold {text!r} is not METRIC:[+-]VALUE[%|ms|us|/s]", hint=forms)
    metric, sign, number, unit = m.groups()
    metric = _ALIASES.get(metric, metric)
    if metric not in METRICS:
        raise UsageError(f"--threshold {text!r}: unknown metric {metric!r}", hint=forms)
    value = float(number)
    worse_sign = "-" if metric in HIGHER_IS_BETTER else "+"
    if sign and sign != worse_sign:
        direction = "a drop (-)" if metric in HIGHER_IS_BETTER else "a rise (+)"
        raise UsageError(f"--threshold {text!r}: a {metric} regression is {direction}", hint=forms)
    if unit == "%":
        return Threshold(metric, "pct", value, text)
    if metric in HIGHER_IS_BETTER:
        if unit not in (None, "/s", "infer/s"):
            per_s = "infer/s" if metric == "throughput" else "tokens/s"
            raise UsageError(f"--threshold {text!r}: {metric} is in % or {per_s}", hint=forms)
        return Threshold(metric, "abs", value, text)
    if unit not in _UNIT_US:
        raise UsageError(f"--threshold {text!r}: latency needs a unit (%, ms, us or s)", hint=forms)
    return Threshold(metric, "abs", value * _UNIT_US[unit], text)


# How much one CI job's figure of a metric moves, job to job, with nothing changed (a relative
# standard deviation, in percent): the runner's neighbours, its thermal state, a noise episode
# that lasts a whole level. A stored baseline carries two such job factors that no window can
# see, so the gate allows for them; an A/B comparison measures both arms in one job and needs
# none. The defaults are about 1.5-2x the spread measured over unchanged runs on a shared CI
# runner, for the tails of the tails (the measurement: docs/guides/ci-gates.md).
DEFAULT_JOB_NOISE_PCT: dict[str, float] = {
    "throughput": 3.0,
    "tokens": 3.0,
    "p50": 3.0,
    "ttft_p50": 3.0,
    "itl_p50": 3.0,
    "p90": 6.0,
    "p95": 8.0,
    "p99": 15.0,
    "ttft_p99": 15.0,
    "itl_p99": 15.0,
    "p999": 20.0,
}
_JOB_NOISE = re.compile(r"^\s*([a-z0-9._/]+?)\s*:\s*([0-9]*\.?[0-9]+)\s*%\s*$")


def parse_job_noise(texts: tuple[str, ...] | list[str]) -> dict[str, float]:
    """The job-to-job noise per metric (percent): the defaults, overridden by METRIC:PCT% texts
    (`p99:5%`; `all:0%` sets every metric). Raises UsageError naming the text."""
    noise = dict(DEFAULT_JOB_NOISE_PCT)
    for text in texts:
        m = _JOB_NOISE.match(text.lower())
        if not m:
            raise UsageError(
                f"--job-noise {text!r} is not METRIC:PERCENT%", hint="forms: p99:5%, throughput:1%, all:0%"
            )
        metric, pct = m.group(1), float(m.group(2))
        metric = _ALIASES.get(metric, metric)
        if metric == "all":
            noise = dict.fromkeys(noise, pct)
        elif metric in noise:
            noise[metric] = pct
        else:
            raise UsageError(f"--job-noise {text!r}: unknown metric {metric!r}", hint="metrics: " + ", ".join(noise))
    return noise


def parse_thresholds(texts: tuple[str, ...] | list[str]) -> list[Threshold]:
    """Parse every threshold; the last one given for a metric (of a model) wins.

    The defaults apply when no threshold for every model is given: thresholds scoped to a model
    (MODEL:METRIC:CHANGE) add to them.
    """
    parsed = [parse_threshold(text) for text in texts]
    if not any(not t.model for t in parsed):
        parsed = [parse_threshold(text) for text in DEFAULT_THRESHOLDS] + parsed
    by_metric: dict[tuple[str, str], Threshold] = {}
    for t in parsed:
        by_metric[(t.model, t.metric)] = t
    return sorted(by_metric.values(), key=lambda t: (t.model, METRICS.index(t.metric)))
