"""The calibration's second overload, on two instances (tuner/_search/_model_calibrate.py): measured only
where the instance's busy time at the first did not already say the request path held the rate
(predict.host_bound). On a stand-in server whose per-batch-size statistics grow by what each level
executed: an instance half busy at the overload is the path's (no second level, no reload for
it); one busy all the time needs the second level to tell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perfkit.gate.synthetic import synthetic_level, synthetic_record
from perfkit.records import Budget, ProfileSpec, RunRecord, TuneRecord
from perfkit.tuner import TuneSettings, TuneSpace, parse_max_output_diff, tune
from tests.conftest import copy_models
from tests.support.stand_in_server import StandInRoute, StandInServer

TOP = 8  # hungry's max_batch_size, the space's largest


def _service_us(batch: int) -> float:
    return 1_000.0 + 50.0 * batch


class _Measure:
    """Calibration levels (one window each) execute what they ask; an overload of batches keeps
    the instance `busy` of the time. The first trial's level ends the tune (Ctrl-C)."""

    def __init__(self, server: StandInServer, busy: float) -> None:
        self.server, self.busy = server, busy

    def __call__(self, server: Any, spec: ProfileSpec, **kw: Any) -> RunRecord:
        if spec.max_trials != 1:
            raise KeyboardInterrupt  # a trial: the calibration is over
        lv = spec.levels[0]
        window_s = spec.measurement_interval_ms / 1e3
        if lv.mode == "concurrency":
            clients = int(lv.value)
            self.server.executed(clients, 100)
            level = synthetic_level(concurrency=clients, latency_ms=_service_us(clients) / 1e3, noise=0.0)
        else:
            executions = int(self.busy * window_s * 1e6 / _service_us(TOP))
            self.server.executed(TOP, executions)
            done_rps = min(lv.value, executions * TOP / window_s)
            level = synthetic_level(concurrency=done_rps, open_loop=True, latency_ms=5.0, noise=0.0)
        return synthetic_record([level], model=spec.model)


@pytest.mark.parametrize(("busy", "path"), [(0.5, True), (1.0, False)])
def test_the_second_overload_runs_only_where_the_instances_busy_time_did_not_tell(
    tmp_path: Path, busy: float, path: bool
):
    repo = copy_models(tmp_path, ["hungry"])
    out = tmp_path / "out"
    settings = TuneSettings(model="hungry", budget=Budget(100.0, 99.0), search="predict", trials=3, output_dir=out,
                            confirm_repeats=0, max_output_diff=parse_max_output_diff("off"))  # fmt: skip
    server, route = StandInServer(service_us=_service_us), StandInRoute()
    with pytest.raises(KeyboardInterrupt):
        tune(server, settings, TuneSpace(max_batch_sizes=(TOP,), instance_counts=(1, 2)), model_repository=repo,
             measure=_Measure(server, busy), route=route)  # fmt: skip
    cal = TuneRecord.load(out / "tune.json").calibration
    assert cal is not None and cal.host_busy == pytest.approx(busy, rel=0.05)
    # the second overload's config: the calibration's batching (its own 5 ms delay) on two instances
    overload_on_two = [t for t in route.served if "max_queue_delay_microseconds: 5000" in t and "count: 2" in t]
    if path:  # told by the busy time: the path's ceiling read, no second overload nor its reload
        assert cal.host_us > 0 and cal.host_scaled_rps == 0.0
        assert overload_on_two == []
    else:  # the instance was busy throughout: two instances overloaded say whether they scale
        assert cal.host_scaled_rps > 0 and len(overload_on_two) == 1
