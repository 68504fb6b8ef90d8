"""One model's calibration at each precision of the space (tuner/_search/_value_calibrate.py) and
the prediction across them (tuner/_search/_predict_values.py): the factor shortcut (two batch
sizes in the same ratio to the first precision's: that factor, nothing more measured), the full
curve where the ratio is not one factor, the budget per value, and the points crossed with every
precision, each scored with its own curve. On a stand-in server whose per-batch-size statistics
follow a known service model per precision."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from perfkit.gate.synthetic import synthetic_level, synthetic_record
from perfkit.records import Budget, Calibration, CalibrationPoint, ProfileSpec, RunRecord, TuneRecord
from perfkit.tuner import TuneSettings, TuneSpace, parse_max_output_diff, tune
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._search._model_calibrate import Calibrated
from perfkit.tuner._search._predict_events import Predicted
from perfkit.tuner._search._value_calibrate import (
    FACTOR_TOLERANCE,
    VALUE_LEVELS,
    ValueFigures,
    confirm_sizes,
    factor_of,
    rest_sizes,
    value_curve,
)
from tests.conftest import copy_models
from tests.support.stand_in_server import StandInRoute, StandInServer

TOP = 8  # the space's largest max_batch_size
FP16 = 0.5  # the stand-in's fp16 runs its device part this factor of fp32's


def _points(service_us, sizes=(1, 2, 4, 8)) -> tuple[CalibrationPoint, ...]:
    return tuple(CalibrationPoint(n, 100, service_us(n)) for n in sizes)


def test_two_sizes_in_one_ratio_are_that_factor_and_sizes_in_two_ratios_are_none():
    first = _points(lambda n: 1_000 + 50 * n)
    assert factor_of(first, _points(lambda n: 0.5 * (1_000 + 50 * n), (1, 8))) == pytest.approx(0.5)
    # a part the value does not change (the host's 300 us a request) makes the ratio move with the size
    assert factor_of(first, _points(lambda n: 300 * n + 0.5 * (1_000 + 50 * n), (1, 8))) is None
    # the ratio moving just within the tolerance still is a factor; just past it, not
    edge = 1 + FACTOR_TOLERANCE * 0.9
    assert factor_of(first, (CalibrationPoint(1, 10, 1_050), CalibrationPoint(8, 10, 1_400 * edge))) is not None
    past = 1 + FACTOR_TOLERANCE * 1.1
    assert factor_of(first, (CalibrationPoint(1, 10, 1_050), CalibrationPoint(8, 10, 1_400 * past))) is None
    assert factor_of(first, _points(lambda n: 500.0, (1,))) is None  # one size tells no shape


def test_a_value_measures_the_ends_first_and_at_most_its_budget_of_levels():
    assert confirm_sizes([1, 2, 4, 8, 16]) == [1, 16] and confirm_sizes([1]) == [1]
    assert rest_sizes([1, 2, 4, 8, 16], [1, 2]) == [2, 4, 8]
    wide = [1, *[2**i for i in range(1, 15)]]  # a space up to max_batch_size 16384: 15 sizes
    rest = rest_sizes(wide, [1, 2])
    assert len(confirm_sizes(wide)) + len(rest) + 2 == VALUE_LEVELS
    assert set(rest) < set(wide[1:-1]) and rest == sorted(rest)


def _first() -> Calibration:
    return Calibration("m", _points(lambda n: 1_000 + 50 * n), 1_000, 50, 0.01, 0.02, overhead_us=300,
                       instance_counts=(1, 2), saturated_rps=(900.0, 1_500.0), shared_fraction=0.6, host_us=0.0,
                       value="precision=fp32")  # fmt: skip


def test_a_factor_scales_the_first_curve_and_keeps_its_contention():
    figures = ValueFigures(_points(lambda n: 0.5 * (1_000 + 50 * n), (1, 8)))
    c = value_curve(_first(), "precision=fp16", figures, duration_s=3.0)
    assert c.factor == pytest.approx(0.5) and (c.fixed_us, c.per_item_us) == pytest.approx((500, 25))
    assert c.shared_fraction == 0.6 and c.overhead_us == 300 and c.value == "precision=fp16"
    assert [p.batch_size for p in c.points] == [1, 8]


def test_no_factor_fits_the_values_own_line_and_contention():
    figures = ValueFigures(_points(lambda n: 300 * n + 0.5 * (1_000 + 50 * n)), (1_000.0, 2_000.0))
    c = value_curve(_first(), "precision=fp16", figures, duration_s=3.0)
    assert c.factor == 0 and (c.fixed_us, c.per_item_us) == pytest.approx((500, 325))
    assert c.shared_fraction == 0.0 and c.saturated_rps == (1_000.0, 2_000.0)  # two instances scaled fully
    assert c.overhead_us == 300  # outside the instance: the first value's


class _Known:
    """The stand-in's state: the config it serves (precision, batching, instances), and its known
    service time per batch of n at that precision: host_us a request (unscaled) plus the device's
    1000 + 50 n, FP16 times that at fp16."""

    def __init__(self, host_us: float) -> None:
        self.host_us, self.text = host_us, ""

    def served(self, text: str) -> None:
        self.text = text

    @property
    def precision(self) -> str:
        m = re.search(r'key: "precision"\s*value: \{\s*string_value: "(\w+)"', self.text)
        return m.group(1) if m else "fp32"

    @property
    def instances(self) -> int:
        m = re.search(r"count: (\d+)", self.text)
        return int(m.group(1)) if m else 1

    def service_us(self, n: int) -> float:
        return self.host_us * n + (1_000.0 + 50.0 * n) * (FP16 if self.precision == "fp16" else 1.0)


class _Measure:
    """Calibration levels execute what they ask on the served config: N closed-loop clients one
    batch of N where it batches, N executions of one where not; an open-loop overload keeps every
    instance busy (they are independent: the instances, not the request path, hold the rate).
    The first trial's level ends the tune (Ctrl-C)."""

    def __init__(self, server: StandInServer, known: _Known) -> None:
        self.server, self.known = server, known
        self.levels: list[tuple[str, str, float]] = []  # (precision, mode, value) of each level

    def __call__(self, server: Any, spec: ProfileSpec, **kw: Any) -> RunRecord:
        if spec.max_trials != 1:
            raise KeyboardInterrupt  # a trial: the calibration is over
        lv = spec.levels[0]
        self.levels.append((self.known.precision, lv.mode, lv.value))
        window_s = spec.measurement_interval_ms / 1e3
        if lv.mode == "concurrency":
            clients = int(lv.value)
            if "dynamic_batching" in self.known.text:
                self.server.executed(clients, 100)
                level = synthetic_level(concurrency=clients, latency_ms=self.known.service_us(clients) / 1e3, noise=0)
            else:
                self.server.executed(1, 100 * clients)
                per_ms = self.known.service_us(1) / 1e3 * clients / self.known.instances
                level = synthetic_level(concurrency=clients, latency_ms=per_ms, noise=0.0)
        else:
            executions = int(self.known.instances * window_s * 1e6 / self.known.service_us(TOP))
            self.server.executed(TOP, executions)
            done_rps = min(lv.value, executions * TOP / window_s)
            level = synthetic_level(concurrency=done_rps, open_loop=True, latency_ms=5.0, noise=0.0)
        return synthetic_record([level], model=spec.model)


def _calibrate(tmp_path: Path, host_us: float) -> tuple[Calibration, _Measure, list[TuneEvent]]:
    repo = copy_models(tmp_path, ["hungry"])
    out = tmp_path / "out"
    settings = TuneSettings(model="hungry", budget=Budget(100.0, 99.0), search="predict", trials=3, output_dir=out,
                            confirm_repeats=0, max_output_diff=parse_max_output_diff("off"))  # fmt: skip
    known = _Known(host_us)
    server = StandInServer(service_us=known.service_us)
    measure, events = _Measure(server, known), []
    space = TuneSpace(max_batch_sizes=(TOP,), instance_counts=(1, 2), precisions=("fp32", "fp16"))
    with pytest.raises(KeyboardInterrupt):
        tune(server, settings, space, model_repository=repo, measure=measure, route=StandInRoute(known.served),
             on_event=events.append)  # fmt: skip
    cal = TuneRecord.load(out / "tune.json").calibration
    assert cal is not None and cal.host_us == 0
    return cal, measure, events


def test_a_precision_whose_curve_is_a_factor_is_confirmed_at_two_sizes_only(tmp_path: Path):
    cal, measure, events = _calibrate(tmp_path, host_us=0.0)
    assert cal.value == "precision=fp32" and [c.value for c in cal.values] == ["precision=fp16"]
    fp16 = cal.values[0]
    assert fp16.factor == pytest.approx(FP16, rel=0.01)
    assert (fp16.fixed_us, fp16.per_item_us) == pytest.approx((cal.fixed_us * FP16, cal.per_item_us * FP16), rel=0.01)
    # fp16 measured at the smallest and largest batch sizes only: no other size, no instance counts
    assert [(mode, v) for p, mode, v in measure.levels if p == "fp16"] == [("concurrency", 1), ("concurrency", TOP)]
    line = next(e for e in events if isinstance(e, Calibrated)).line()
    assert "at precision=fp32" in line and "precision=fp16: x0.50 the first curve" in line, line


def test_a_precision_that_is_no_factor_gets_its_own_curve_and_the_best_predicted_is_at_it(tmp_path: Path):
    cal, measure, events = _calibrate(tmp_path, host_us=300.0)
    fp16 = cal.curve("precision=fp16")
    assert fp16 is not None and fp16.factor == 0
    # the known fp16 line: 300 n + 0.5 (1000 + 50 n) = 500 + 325 n us
    assert (fp16.fixed_us, fp16.per_item_us) == pytest.approx((500, 325), rel=0.02)
    assert (cal.fixed_us, cal.per_item_us) == pytest.approx((1_000, 350), rel=0.02)
    assert fp16.instance_counts == (1, 2) and len(fp16.saturated_rps) == 2
    assert sorted(int(v) for p, mode, v in measure.levels if p == "fp16" and mode == "concurrency") == [
        1, 2, 4, 4, 8, 8,  # batch sizes 1, 2, 4, 8; saturated 4 clients a instance at 1 and 2 instances
    ]  # fmt: skip
    assert cal.curve("precision=int8") is None  # a value the space does not hold: no curve
    # The space crossed with both precisions (2 x the batching points), each scored on its own curve:
    # fp16 runs every batch faster, so the best predicted is at fp16, by what its full batches give
    # (3800 against 3100 us at batch 8, both instance counts' instances independent).
    predicted = next(e for e in events if isinstance(e, Predicted))
    assert predicted.configs % 2 == 0, predicted.line()
    rates = dict(predicted.best)
    best = predicted.best[0][0]
    assert "precision=fp16" in best and "instance_count=2" in best, predicted.line()
    same_at_fp32 = best.replace("precision=fp16", "precision=fp32")
    assert rates[best] / rates[same_at_fp32] == pytest.approx(3_800 / 3_100, rel=0.03), predicted.line()
