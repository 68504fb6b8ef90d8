"""The predicted search of a decoupled (streaming) model: the one-model predictor
(tuner/_search/_predict.py) over the stream model (perfkit/predict/_stream.py). The calibration
(tuner/_search/_stream_calibrate.py) reads each stream's first-response and per-response times and
how long it holds its instance; the simulator runs each request for its whole stream, and the
budget's statistic (Budget.metric) chooses what is held: the end-to-end latency as it is, TTFT as
the end-to-end budget it stands for (each request's TTFT and latency differ by the rest of its
stream), ITL as the instance's own pace (within the budget or not at any rate). Each measured
trial is checked against the simulated statistic at the rate it held, as the one-model search does.

Where the prediction cannot go on it says so and the measured search goes on: the model's
executions end before its streams (its instances do not bound them), the original config batches
streams, or the stream's ITL is past an ITL budget at any load."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfkit import predict
from perfkit.tuner._search._predict import SIM_REQUESTS, Predictor
from perfkit.tuner._search._predict_events import Note
from perfkit.tuner._search._predict_points import batcher_config
from perfkit.tuner._search._stream_calibrate import StreamNotHeld, calibrate_stream

MEASURED = "going on with the measured search"


@dataclass
class StreamPredictor(Predictor):
    """The one-model predictor of a decoupled model (see the module docstring)."""

    stream: predict.StreamModel | None = None

    def run_calibration(self) -> bool:
        t = self.t
        if batcher_config(t, t.original_fixed_params()).batching:
            return self._measured("your config batches streams, whose stream times the prediction does not model")
        try:
            told = calibrate_stream(t)
        except StreamNotHeld as why:
            return self._measured(str(why))
        self.calibration, self.stream = told.cal, told.stream
        t.emit(told)
        if self.simulated_budget_us() <= 0:
            b = t.s.budget
            return self._measured(
                f"the stream's {b.label} is {self.stream.itl_us(b.percentile) / 1e3:.2f} ms with nothing waiting,"
                f" past the {b.latency_budget_ms:g} ms budget at any load"
            )
        return True

    def _measured(self, why: str) -> bool:
        """Say why the prediction stops before it predicts; the measured search goes on."""
        self.fell_back = True
        self.steer = True
        self.t.emit(Note(f"--search predict: {self.t.model!r}: {why}: {MEASURED}"))
        return False

    def simulated_budget_us(self) -> float:
        assert self.calibration is not None and self.stream is not None
        b = self.t.s.budget
        service = predict.service_model(self.calibration)
        return predict.end_to_end_budget_us(self.stream, service, b.metric, b.latency_budget_us, b.percentile)

    def latency_at_measured(self, params: Mapping[str, Any], rate_rps: float) -> float | None:
        """The simulated budget statistic (end-to-end latency, TTFT or ITL at the budget's
        percentile) of a point's streams offered the rate a trial sustained; None where it cannot
        say (no calibration, a percentile it does not keep)."""
        b = self.t.s.budget
        if self.calibration is None or self.stream is None or float(b.percentile) not in (50.0, 90.0, 95.0, 99.0):
            return None
        cfg = self.key({**self.t.original_fixed_params(), **params})
        load = predict.Load(self.t.trial_load.distribution, rate_rps=rate_rps)
        p = predict.simulate_stream(cfg, self.stream, predict.service_model(self.calibration), load,
                            predict.contention(self.calibration), requests=SIM_REQUESTS)  # fmt: skip
        return p.percentile_us(b.metric, b.percentile)
