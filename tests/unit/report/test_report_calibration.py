"""A predicted tune's calibration in the tune report: execution time by batch size as the measured
points and the fitted line, instance scaling as the measured rates and the contention model, and
the fit's error in words. Figure data checked first, then the rendered page."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from perfkit.records import Calibration, CalibrationPoint
from perfkit.report import load_inputs, write_tune_report
from perfkit.report._calibration_figures import (
    calibration_table,
    fit_error_sentence,
    scaling_figure,
    service_figure,
)
from tests.unit.report.test_report_pages import RECORDS, _table, _text, _visible, assert_self_contained

# The hungry fixture's shape: 16.5 ms + 0.165 ms per item, on one device its instances share.
POINTS = (CalibrationPoint(1, 300, 16_900.0), CalibrationPoint(4, 120, 17_100.0), CalibrationPoint(16, 60, 19_600.0),
          CalibrationPoint(64, 20, 27_300.0))  # fmt: skip
CAL = Calibration(
    model="hungry",
    points=POINTS,
    fixed_us=16_500.0,
    per_item_us=165.0,
    fit_rms_rel=0.012,
    fit_max_rel=0.031,
    overhead_us=500.0,
    instance_counts=(1, 2),
    saturated_rps=(60.0, 66.0),
    shared_fraction=1 / 1.1,  # what perfkit.predict.fit_shared_fraction makes of 66 over 60 req/s
    duration_s=14.0,
)


def test_the_service_figure_holds_the_points_and_the_fitted_line():
    fig = service_figure(CAL)
    measured, fit = fig.series
    assert measured.kind == "scatter" and measured.points == ((1.0, 16.9), (4.0, 17.1), (16.0, 19.6), (64.0, 27.3))
    # The line from 1 to the largest measured batch size, through every measured size: 16.5 + 0.165 n ms.
    xs = [x for x, _ in fit.points]
    assert xs[0] == 1.0 and xs[-1] == 64.0 and {4.0, 16.0} <= set(xs) and xs == sorted(xs) and len(xs) >= 16
    assert all(y == pytest.approx(16.5 + 0.165 * x) for x, y in fit.points)
    assert "1.2% RMS, 3.1% worst" in fig.caption
    rows = calibration_table(CAL).rows
    assert [r[0] for r in rows] == [1, 4, 16, 64] and rows[0][4] == f"{(16.5 + 0.165) / 16.9 - 1:+.1%}"


def test_the_scaling_figure_holds_the_measured_rates_and_the_contention_model():
    fig = scaling_figure(CAL)
    assert fig is not None
    measured, model, independent = fig.series
    assert measured.points == ((1.0, 60.0), (2.0, 66.0))
    f = CAL.shared_fraction
    # Through the one-instance rate, scaled by min(c, 1/f); independent instances scale by c.
    assert dict(model.points)[1.0] == pytest.approx(60.0) and dict(model.points)[4.0] == pytest.approx(
        60 * min(4, 1 / f)
    )
    assert dict(independent.points)[4.0] == pytest.approx(240.0)
    assert scaling_figure(dataclasses.replace(CAL, instance_counts=(), saturated_rps=())) is None


def test_the_fit_error_is_stated_in_words():
    text = fit_error_sentence(CAL)
    assert "16.50 ms + 0.165 ms per item over 4 measured batch size(s) (batch sizes 1–64, 500 executions)" in text
    assert "Fit error: 1.2% RMS (weighted by executions), 3.1% at worst" in text
    # The worst point named: batch 16, where the line (19.14 ms) is 2.3% below the measured 19.6 ms.
    assert "(batch size 16: the line is 2.3% below the measured time)" in text
    assert "2 delivered 1.10× what 1 did at saturation" in text and "(shared fraction 0.91) gives 1.10×" in text
    single = fit_error_sentence(dataclasses.replace(CAL, instance_counts=(), saturated_rps=()))
    assert "Instance scaling was not measured" in single


def test_a_tune_report_with_a_calibration_shows_its_curves_and_error(tmp_path: Path):
    runs, tunes = load_inputs([RECORDS / "tune"])
    tune = dataclasses.replace(tunes[0], calibration=CAL)
    page = _text(write_tune_report(tune, tmp_path / "tune.html", runs))
    assert 'data-figure="calibration-service"' in page and 'data-figure="calibration-scaling"' in page
    # Each figure is drawn: an SVG right where the figure is.
    for key in ("calibration-service", "calibration-scaling"):
        assert re.match(r'data-figure="[^"]+"><svg\b', page[page.index(f'data-figure="{key}"') :])
    assert "Execution time by batch size" in page and "Throughput by instance count" in page
    text = _visible(page)
    assert "Fit error: 1.2% RMS (weighted by executions), 3.1% at worst" in text
    rows = _table(page, "calibration")
    assert rows[0] == ["batch size", "executions", "measured (ms)", "fitted (ms)", "fit error"]
    assert [r[0] for r in rows[1:]] == ["1", "4", "16", "64"]
    assert_self_contained(page)
    # A tune without a calibration has no such section.
    plain = _text(write_tune_report(tunes[0], tmp_path / "plain.html", runs))
    assert "calibration-service" not in plain and "Fit error" not in _visible(plain)


# The same model calibrated at fp16 too: its own line, no factor of fp32's (hungry's host part is
# not scaled by the precision); and at int8 as a factor of the first curve, confirmed at two sizes.
FP16 = dataclasses.replace(
    CAL, value="precision=fp16", points=(CalibrationPoint(1, 200, 9_200.0), CalibrationPoint(64, 30, 15_100.0)),
    fixed_us=9_100.0, per_item_us=94.0, fit_rms_rel=0.01, fit_max_rel=0.02, shared_fraction=0.8, duration_s=6.0,
)  # fmt: skip
INT8 = dataclasses.replace(
    CAL, value="precision=int8", points=(CalibrationPoint(1, 200, 6_800.0), CalibrationPoint(64, 30, 10_900.0)),
    fixed_us=16_500.0 * 0.4, per_item_us=165.0 * 0.4, factor=0.4, duration_s=3.0, instance_counts=(), saturated_rps=(),
)  # fmt: skip
PER_VALUE = dataclasses.replace(CAL, value="precision=fp32", values=(FP16, INT8))


def test_a_calibration_per_precision_shows_one_curve_per_value():
    fig = service_figure(PER_VALUE)
    labels = [s.label for s in fig.series]
    assert len(fig.series) == 6 and [s.group for s in fig.series[::2]] == [c.value for c in PER_VALUE.curves()]
    assert labels[0] == "precision=fp32: measured" and labels[2] == "precision=fp16: measured"
    assert "×0.40 the first curve" in labels[5] and "×" not in labels[3]
    fp16_fit = fig.series[3]
    assert all(y == pytest.approx(9.1 + 0.094 * x) for x, y in fp16_fit.points)
    assert fig.series[2].points == ((1.0, 9.2), (64.0, 15.1))
    assert "3.1% worst (the worst curve's, precision=fp32)" in fig.caption
    table = calibration_table(PER_VALUE)
    assert table.columns[0] == "value" and [r[0] for r in table.rows].count("precision=fp16") == 2
    assert table.note == "Calibrated in 14 s + 6 s + 3 s on the running server (a value each)."
    text = fit_error_sentence(PER_VALUE)
    assert "At precision=fp16: 9.10 ms + 0.094 ms per item over batch sizes 1, 64" in text
    assert "At precision=int8: ×0.40 the first curve" in text
    # A record saved before carries no values: one curve, as it was drawn.
    assert [s.label for s in service_figure(CAL).series][0] == "measured (server batch_stats)"
