"""The report's streaming figures are the records' values (data first, then drawn)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from perfkit.gate.synthetic import synthetic_level, synthetic_record
from perfkit.recorder import summarize
from perfkit.records import StreamingSummary
from perfkit.report import write_profile_report
from perfkit.report._streaming_figures import has_streaming, streaming_cdf, streaming_table, tokens_vs_load


def _record():
    rng = np.random.default_rng(0)
    levels = []
    for c, tokens in ((1, 190.0), (4, 520.0)):
        ttft = summarize("service", rng.normal(20_000 + 500 * c, 300, 400))
        itl = summarize("service", rng.normal(5_000 + 1_000 * (c - 1), 200, 6000))
        st = StreamingSummary(ttft, itl, itl, 16.0, 16.0, 16.0, 16, tokens, tokens, 400, goodput_rps=3.0)
        levels.append(dataclasses.replace(synthetic_level(concurrency=c, seed=c), streaming=st))
    return synthetic_record(levels=levels, model="streamer")


def test_streaming_figures_carry_the_records_values(tmp_path):
    rec = _record()
    assert has_streaming(rec) and not has_streaming(synthetic_record())
    for which in ("ttft", "itl"):
        fig = streaming_cdf(rec, which)
        assert [s.label for s in fig.series] == ["concurrency 1", "concurrency 4"]
        for series, lv in zip(fig.series, rec.levels):
            summary = lv.streaming.ttft if which == "ttft" else lv.streaming.itl
            xs = [p[0] for p in series.points]
            fr = [p[1] for p in series.points]
            assert fr == sorted(fr) and fr[-1] == pytest.approx(1.0)
            assert xs[-1] == pytest.approx(summary.max_us / 1000, rel=1e-3)
        p50 = [m for m in fig.marks if m.label == "p50" and m.group == "concurrency 4"][0]
        summary = rec.levels[1].streaming.ttft if which == "ttft" else rec.levels[1].streaming.itl
        assert p50.x == summary.p50_us / 1000
    tokens = tokens_vs_load([rec])
    assert tokens.series[0].points == ((1.0, 190.0), (4.0, 520.0))
    table = streaming_table(rec)
    assert [row[0] for row in table.rows] == ["concurrency 1", "concurrency 4"]
    assert table.rows[1][table.columns.index("tokens/s")] == 520.0
    assert table.rows[0][table.columns.index("ITL p50")] == rec.levels[0].streaming.itl.p50_us / 1000
    html = write_profile_report([rec], tmp_path / "r.html").read_text()
    assert "Time to first token distribution" in html and "Output tokens/s vs load" in html
