"""Calibration's fitting, pure: batch points out of Triton's statistics answers, the service line
and its stated error, the contention factor from two instance counts, and the calibration stored
in (and read back from) the tune record, old records without it still loading. No server."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from perfkit.errors import MeasurementError
from perfkit.predict import batch_points, calibration, contention, fit_service, service_model
from perfkit.predict._calibrate import execution_stretch, fit_host_us, fit_shared_fraction, instance_busy
from perfkit.records import Budget, Calibration, CalibrationPoint, Machine, TuneRecord


def _stats(model: str, batches: dict[int, tuple[int, float]]) -> dict:
    """A /v2/models/M/stats answer: {batch size: (executions, mean infer us)}; input and output
    phases take 10% each of the infer time."""
    return {
        "model_stats": [
            {
                "name": model,
                "version": "1",
                "batch_stats": [
                    {
                        "batch_size": size,
                        "compute_input": {"count": n, "ns": int(n * us * 100)},
                        "compute_infer": {"count": n, "ns": int(n * us * 1000)},
                        "compute_output": {"count": n, "ns": int(n * us * 100)},
                    }
                    for size, (n, us) in batches.items()
                ],
            },
            {"name": "other", "batch_stats": [{"batch_size": 1, "compute_infer": {"count": 99, "ns": 1}}]},
        ]
    }


def test_batch_points_are_the_executions_between_two_answers():
    before = _stats("m", {1: (10, 1_000.0), 4: (5, 2_000.0)})
    after = _stats("m", {1: (10, 1_000.0), 4: (15, 2_000.0), 8: (4, 3_000.0)})
    points = batch_points(before, after, "m")
    assert [(p.batch_size, p.executions) for p in points] == [(4, 10), (8, 4)]  # size 1 did not run
    assert points[0].service_us == pytest.approx(2_400.0)  # input + infer + output
    assert points[1].service_us == pytest.approx(3_600.0)


def test_a_line_is_fitted_exactly_and_its_error_is_stated():
    exact = [CalibrationPoint(n, 10, 2_000 + 250 * n) for n in (1, 2, 4, 8)]
    a, b, rms, worst = fit_service(exact)
    assert (a, b) == (pytest.approx(2_000), pytest.approx(250)) and rms < 1e-9 and worst < 1e-9
    # One point 10% off: the error says so (the worst residual is the largest relative miss).
    noisy = [*exact[:3], CalibrationPoint(8, 10, 4_000 * 1.1)]
    _, _, rms2, worst2 = fit_service(noisy)
    assert 0.01 < rms2 < worst2 < 0.1
    # A single batch size fits a constant; a negative slope is clamped to a constant.
    assert fit_service([CalibrationPoint(4, 3, 1_000)])[:2] == (1_000, 0.0)
    assert fit_service([CalibrationPoint(1, 5, 2_000), CalibrationPoint(8, 5, 1_000)])[1] == 0.0
    with pytest.raises(MeasurementError, match="no batch"):
        fit_service([])


def test_a_stalled_batch_size_is_left_out_of_the_fit_but_counted_in_its_error():
    # Batch sizes as a loaded machine gives them: on the line 30 ms + 0.3 ms an item, but for one
    # size whose few executions stalled (the calibration of `hungry` at load average 10).
    line = [CalibrationPoint(n, 20, 30_000 + 300 * n) for n in (1, 2, 4, 8, 16, 32, 64)]
    stalled = CalibrationPoint(21, 10, 133_000)
    a, b, _, worst = fit_service([*line, stalled])
    assert a == pytest.approx(30_000, rel=0.01) and b == pytest.approx(300, rel=0.02)
    assert worst > 0.7  # the stalled size, 133 ms against 36 ms on the line, is in the stated error
    # One weighted fit through every point would be pulled up by it (about 35.7 ms + 0.34 ms an item).
    sizes = [p.batch_size for p in (*line, stalled)]
    one_fit = np.polyfit(sizes, [p.service_us for p in (*line, stalled)], 1, w=np.sqrt([20.0] * 7 + [10.0]))
    assert one_fit[1] > 33_000
    # Misses within 25% are the machine's noise, not stalls: every point stays in the fit.
    noisy = [CalibrationPoint(n, 20, (30_000 + 300 * n) * (1.2 if n == 8 else 1.0)) for n in (1, 2, 4, 8, 16)]
    a2, _, _, _ = fit_service(noisy)
    assert a2 > 30_500


@pytest.mark.parametrize(
    ("rates", "shared"),
    [((100.0, 200.0), 0.0), ((100.0, 196.0), 0.0), ((100.0, 100.0), 1.0), ((100.0, 150.0), 1 / 1.5)],
)
def test_the_contention_factor_follows_the_rate_ratio(rates: tuple[float, float], shared: float):
    f = fit_shared_fraction((1, 2), rates)
    assert f == pytest.approx(shared)
    # The fitted contention reproduces the measured scaling.
    cal = calibration("m", [CalibrationPoint(1, 1, 1_000)], instance_counts=(1, 2), saturated_rps=rates)
    assert contention(cal).instance_scaling(2) == pytest.approx(min(2.0, rates[1] / rates[0]), rel=0.03)
    with pytest.raises(MeasurementError, match="two instance counts"):
        fit_shared_fraction((1, 2), (100.0, 0.0))


def test_the_calibration_round_trips_through_the_tune_record(tmp_path: Path):
    cal = calibration(
        "m",
        [CalibrationPoint(1, 40, 2_300.0), CalibrationPoint(8, 12, 4_100.0)],
        overhead_us=400.0,
        instance_counts=(1, 2),
        saturated_rps=(300.0, 310.0),
        duration_s=12.5,
        host_saturated_rps=280.0,
        host_points=[CalibrationPoint(8, 30, 4_100.0)],
    )
    assert cal.host_us == pytest.approx(1e6 / 280.0)
    svc = service_model(cal)
    assert svc.overhead_us == 400.0 and svc.service_us(8) == pytest.approx(4_100.0, rel=1e-6)
    rec = TuneRecord("0", "now", (), Machine.from_mapping({}), {}, "m", Budget(50.0, 99.0), "throughput", "", None,
                     None, (), calibration=cal)  # fmt: skip
    path = rec.save(tmp_path / "tune.json")
    back = TuneRecord.load(path)
    assert back.calibration == cal and isinstance(back.calibration, Calibration)
    # A record written before calibrations existed still loads.
    old = json.loads(path.read_text())
    del old["calibration"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert TuneRecord.load(tmp_path / "old.json").calibration is None


def test_the_request_path_holds_the_rate_only_where_the_instance_was_not_busy():
    from perfkit.predict import host_bound

    # 100 batches of 128 at 6.4 ms (50 us an item): at 9,000 items/s the instance executes 45% of the time.
    points = [CalibrationPoint(128, 100, 6_400.0)]
    assert instance_busy(9_000.0, points) == pytest.approx(0.45)
    assert host_bound(0.45) and fit_host_us(9_000.0, True) == pytest.approx(1e6 / 9_000.0)
    # At 19,800 items/s it executes 99% of the time: the instance held the rate, the path is faster.
    assert instance_busy(19_800.0, points) == pytest.approx(0.99)
    assert not host_bound(0.99) and fit_host_us(19_800.0, False) == 0.0
    assert instance_busy(0.0, points) == 0.0 and instance_busy(9_000.0, []) == 0.0
    cal = calibration("m", points, host_saturated_rps=9_000.0, host_points=points)
    assert cal.host_busy == pytest.approx(0.45) and cal.host_us == pytest.approx(111.1, rel=1e-3)
    assert service_model(cal).host_us == cal.host_us
    assert calibration("m", points, host_saturated_rps=19_800.0, host_points=points).host_us == 0.0
    # Under that load the same batches read twice as long (the CPU they run on also handles the
    # requests): busy is judged by the unloaded line, 45%, so the path still holds the rate.
    stretched = [CalibrationPoint(128, 100, 12_800.0)]
    assert instance_busy(9_000.0, stretched) == pytest.approx(0.90)
    cal = calibration("m", points, host_saturated_rps=9_000.0, host_points=stretched)
    assert cal.host_busy == pytest.approx(0.45) and cal.host_us == pytest.approx(1e6 / 9_000.0)


def test_the_request_path_capacity_is_the_rate_held_within_the_budget_where_one_was_measured():

    points = [CalibrationPoint(128, 100, 6_400.0)]
    # Saturated at 9,000 items/s with the instance 45% busy, the path held the rate; within the
    # budget the same config held 6,000: that is the path's ceiling a prediction may not pass.
    assert fit_host_us(9_000.0, True, held_rps=6_000.0) == pytest.approx(1e6 / 6_000.0)
    cal = calibration("m", points, host_saturated_rps=9_000.0, host_points=points, host_held_rps=6_000.0)
    assert cal.host_us == pytest.approx(1e6 / 6_000.0) and cal.host_held_rps == 6_000.0
    # A held rate at or past the saturated one says nothing more than saturation; none measured: saturation.
    assert fit_host_us(9_000.0, True, held_rps=9_500.0) == pytest.approx(1e6 / 9_000.0)
    assert fit_host_us(9_000.0, True, held_rps=0.0) == pytest.approx(1e6 / 9_000.0)
    # Where the instance held the saturated rate, the path sets no ceiling, whatever was held.
    busy = calibration("m", points, host_saturated_rps=19_800.0, host_points=points, host_held_rps=6_000.0)
    assert busy.host_us == 0.0 and busy.host_held_rps == 0.0


def test_executions_stretched_under_load_are_simulated_stretched():

    # Unloaded, a batch takes 200 + 40 us an item; saturated, batches of 64 and 128 took 2x and 1.5x that.
    line = lambda n: 200.0 + 40.0 * n  # noqa: E731  # the fitted line, as calibration() passes it
    loaded = [CalibrationPoint(64, 10, 2 * line(64)), CalibrationPoint(128, 30, 1.5 * line(128))]
    want = (10 * 2 * line(64) + 30 * 1.5 * line(128)) / (10 * line(64) + 30 * line(128))
    assert execution_stretch(loaded, line) == pytest.approx(want)
    # Faster than unloaded is not modelled (1), nor is a level with no batch.
    assert execution_stretch([CalibrationPoint(64, 10, 0.5 * line(64))], line) == 1.0
    assert execution_stretch([], line) == 1.0
    unloaded = [CalibrationPoint(1, 50, line(1)), CalibrationPoint(128, 50, line(128))]
    cal = calibration("m", unloaded, host_saturated_rps=9_000.0, host_points=loaded, host_held_rps=6_000.0)
    assert cal.loaded_stretch == pytest.approx(want)
    svc = service_model(cal)
    assert svc.service_us(128) == pytest.approx(want * line(128), rel=1e-6) and svc.host_us == cal.host_us
    # Executions that ran as long as unloaded: the line as fitted.
    same = calibration("m", unloaded, host_saturated_rps=9_000.0, host_points=unloaded)
    assert same.loaded_stretch == pytest.approx(1.0) and service_model(same).service_us(128) == pytest.approx(line(128))


def test_instances_that_do_not_scale_overloaded_as_their_contention_says_were_held_by_the_request_path():
    from perfkit.predict import host_bound

    # Busy 94% by the line (not under 92%): alone it says the instance held. Unbatched, two
    # instances delivered 1.6x one (shared fraction 0.62); overloaded with batching, 14,500 and
    # 15,200 req/s (x1.05): something they do not share that way held the rate.
    points = [CalibrationPoint(128, 100, 6_400.0)]  # 50 us an item: 94% busy at 18,800 items/s
    counts, rates = (1, 2), (4_771.0, 7_716.0)
    cal = calibration("m", points, instance_counts=counts, saturated_rps=rates, host_saturated_rps=18_800.0,
                      host_points=points, host_held_rps=9_000.0, host_scaled_rps=19_700.0)  # fmt: skip
    assert cal.host_busy == pytest.approx(0.94) and not host_bound(cal.host_busy)
    assert cal.host_us == pytest.approx(1e6 / 9_000.0) and cal.host_scaled_rps == 19_700.0
    # Two instances that delivered what their contention gives (x1.6): the instance held it.
    scaled = calibration("m", points, instance_counts=counts, saturated_rps=rates, host_saturated_rps=18_800.0,
                         host_points=points, host_held_rps=9_000.0, host_scaled_rps=30_000.0)  # fmt: skip
    assert scaled.host_us == 0.0 and scaled.host_held_rps == 0.0
    # Instances that share everything (x1.0 expected) cannot tell the path apart this way.
    shared = calibration("m", points, instance_counts=counts, saturated_rps=(4_771.0, 4_800.0),
                         host_saturated_rps=18_800.0, host_points=points, host_scaled_rps=18_900.0)  # fmt: skip
    assert shared.host_us == 0.0
    assert host_bound(0.94, 1.05, 1.6) and not host_bound(0.94, 1.3, 1.6) and not host_bound(0.94)


def test_one_unbatched_instance_saturated_in_closed_loop_is_judged_by_its_own_threshold_and_not_stretched():
    from perfkit.predict import host_bound
    from perfkit.predict._calibrate import HOST_BOUND_BUSY, UNBATCHED_HOST_BOUND_BUSY

    # A model without batching: one instance, closed loop, 10 ms executions that read 10.7 ms
    # loaded (x1.07, the queue fixture's exponential service by chance), 88 req/s: 94% busy by the
    # line. Judged as the trials' overloaded batches are (92%), the instance held it and the
    # executions are simulated stretched; judged as one unbatched instance it held it too, and the
    # closed loop's stretch is not simulated.
    unloaded = [CalibrationPoint(1, 20, 10_000.0)]
    loaded = [CalibrationPoint(1, 200, 10_700.0)]
    batched = calibration("m", unloaded, host_saturated_rps=94.0, host_points=loaded)
    alone = calibration("m", unloaded, host_saturated_rps=94.0, host_points=loaded, host_unbatched=True)
    assert batched.host_busy == pytest.approx(0.94) and alone.host_busy == pytest.approx(0.94)
    assert batched.loaded_stretch == pytest.approx(1.07) and alone.loaded_stretch == 1.0
    assert service_model(alone).service_us(1) == pytest.approx(10_000.0)
    assert batched.host_us == 0.0 and alone.host_us == 0.0
    # At 88% busy the overloaded batches were held by the path; one unbatched instance in closed
    # loop, whose gaps between executions read idle on a loaded machine, still held it itself.
    assert UNBATCHED_HOST_BOUND_BUSY < 0.88 < HOST_BOUND_BUSY
    assert host_bound(0.88) and not host_bound(0.88, unbatched=True) and host_bound(0.80, unbatched=True)
    held = calibration("m", unloaded, host_saturated_rps=88.0, host_points=unloaded, host_unbatched=True)
    assert held.host_busy == pytest.approx(0.88) and held.host_us == 0.0
    assert calibration("m", unloaded, host_saturated_rps=88.0, host_points=unloaded).host_us > 0
