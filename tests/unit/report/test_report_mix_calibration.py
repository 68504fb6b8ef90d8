"""A mix's (or a pipeline's) calibration in the tune report: one section per model, each with its
own fit (the whole calibration's own points are none)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from perfkit.records import Calibration
from perfkit.report import load_inputs, write_tune_report
from tests.unit.report.test_report_calibration import CAL
from tests.unit.report.test_report_pages import RECORDS, _text, _visible


def test_a_calibration_of_several_models_shows_each_models_fit_in_its_own_section(tmp_path: Path):
    light = dataclasses.replace(CAL, model="light", fixed_us=2_000.0, per_item_us=250.0)
    whole = Calibration("light", (), 0.0, 0.0, 0.02, 0.03, duration_s=30.0, steps=(light, CAL))
    runs, tunes = load_inputs([RECORDS / "tune"])
    page = _text(write_tune_report(dataclasses.replace(tunes[0], calibration=whole), tmp_path / "tune.html", runs))
    text = _visible(page)
    assert 'id="calibration-light"' in page and 'id="calibration-hungry"' in page and 'id="calibration"' not in page
    assert "Calibration: light" in text and "Calibration: hungry" in text
    assert "2.00 ms + 0.250 ms per item over 4 measured batch size(s)" in text
    assert "16.50 ms + 0.165 ms per item over 4 measured batch size(s)" in text
    assert "0.00 ms + 0.000 ms per item" not in text  # the whole's empty line is not drawn
