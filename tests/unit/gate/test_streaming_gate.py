"""Gate thresholds on streaming metrics (TTFT, ITL, tokens/s), over synthetic run records."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from perfkit.errors import UsageError
from perfkit.gate.compare import GateOptions, compare_records
from perfkit.gate.synthetic import synthetic_level, synthetic_record
from perfkit.gate.thresholds import parse_job_noise, parse_threshold, parse_thresholds
from perfkit.recorder import summarize
from perfkit.records import StreamingSummary, StreamWindow


def _streaming(ttft_ms: float, itl_ms: float, tokens_per_s: float, seed: int, windows: int = 6) -> StreamingSummary:
    rng = np.random.default_rng(seed)
    wins = []
    for _ in range(windows):
        f = 1 + rng.normal(0, 0.02)
        wins.append(StreamWindow(ttft_ms * 1e3 * f, ttft_ms * 1.3e3 * f, itl_ms * 1e3 * f, itl_ms * 1.5e3 * f,
                                 tokens_per_s / f))  # fmt: skip
    ttft = summarize("service", rng.normal(ttft_ms * 1e3, ttft_ms * 20, 2000))
    itl = summarize("service", rng.normal(itl_ms * 1e3, itl_ms * 20, 20000))
    return StreamingSummary(ttft, itl, itl, 16.0, 16.0, 16.0, 16, tokens_per_s, tokens_per_s, 2000, windows=tuple(wins))


def _record(ttft_ms: float, itl_ms: float, tokens_per_s: float, seed: int, streaming: bool = True):
    level = synthetic_level(latency_ms=100.0, seed=seed)
    if streaming:
        level = dataclasses.replace(level, streaming=_streaming(ttft_ms, itl_ms, tokens_per_s, seed))
    return synthetic_record(levels=[level])


def _verdicts(baseline, current, *thresholds: str) -> dict[str, str]:
    # synthetic records: one job's window noise, no job factor
    opts = GateOptions(thresholds=tuple(parse_thresholds(list(thresholds))), job_noise_pct=parse_job_noise(["all:0%"]))
    return {f.metric: f.verdict for f in compare_records(baseline, current, opts).findings}


def test_streaming_thresholds_parse_with_aliases_and_directions():
    assert parse_threshold("ttft_p99:+10%").metric == "ttft_p99"
    assert parse_threshold("ttft:+5ms").value == 5000.0 and parse_threshold("ttft:+5ms").metric == "ttft_p99"
    assert parse_threshold("itl_p50:+1ms").kind == "abs"
    tok = parse_threshold("tokens/s:-5%")
    assert tok.metric == "tokens" and tok.higher_is_better
    assert parse_threshold("tokens:-100/s").value == 100.0
    with pytest.raises(UsageError, match="a tokens regression is a drop"):
        parse_threshold("tokens:+5%")
    with pytest.raises(UsageError, match="a ttft_p50 regression is a rise"):
        parse_threshold("ttft_p50:-5%")


def test_gate_flags_ttft_itl_and_tokens_regressions_and_passes_equal_runs():
    base = _record(20.0, 5.0, 800.0, seed=1)
    same = _record(20.0, 5.0, 800.0, seed=2)
    worse = _record(26.0, 6.5, 600.0, seed=3)
    thresholds = ("ttft_p50:+10%", "itl_p99:+10%", "tokens:-5%")
    assert _verdicts(base, same, *thresholds) == {"ttft_p50": "pass", "itl_p99": "pass", "tokens": "pass"}
    got = _verdicts(base, worse, *thresholds)
    assert got == {"ttft_p50": "regression", "itl_p99": "regression", "tokens": "regression"}
    better = _verdicts(worse, base, *thresholds)
    assert set(better.values()) == {"improvement"}


def test_streaming_threshold_on_a_run_without_streaming_figures_is_invalid():
    unary = _record(0, 0, 0, seed=4, streaming=False)
    result = compare_records(
        unary, _record(20.0, 5.0, 800.0, seed=5), GateOptions(thresholds=(parse_threshold("ttft:+10%"),))
    )
    (finding,) = result.findings
    assert finding.verdict == "invalid" and "baseline has no streaming figures" in finding.reason
