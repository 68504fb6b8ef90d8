"""The predicted search on a BLS model and the models it calls (`perfkit tune --search predict -m
<bls> --composing-models a,b`): a pipeline's predicted search (tuner/_search/_predict_pipeline.py)
whose calibration reads the BLS model's calls and own time from the server's statistics
(tuner/_search/_bls_calibrate.py) and whose simulation holds a BLS instance through its calls,
one after another (perfkit.predict._bls). Where the calls cannot be told (a fan-out that depends
on the data, calls that overlap) it says why and goes on with the measured search."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfkit import predict
from perfkit.errors import MeasurementError
from perfkit.tuner._search._bls_calibrate import CallsUntold, calibrate_bls
from perfkit.tuner._search._predict_pipeline import PipelinePredictor
from perfkit.tuner._search._predict_points import dimension_values
from perfkit.tuner._space import P_COUNT

if TYPE_CHECKING:
    from perfkit.records import Calibration
    from perfkit.tuner import _pipeline


@dataclass
class BlsPredictor(PipelinePredictor):
    """The predicted search over a BLS pipeline's joint space: step 0 the BLS model."""

    sim_requests: int = predict.BLS_REQUESTS

    def calibrate(self) -> Calibration:
        cal, calls = calibrate_bls(self.t)
        self.fanout = calls.fanout
        return cal

    def fell_back_line(self, err: MeasurementError) -> str:
        if isinstance(err, CallsUntold):
            return f"{err.message}: going on with the measured search"
        return super().fell_back_line(err)

    def step_order(self) -> list[tuple[str, tuple[str, ...]]]:
        """The BLS model, then the models it calls in the order given (its calls' order)."""
        return [(s.model, ()) for s in self.pipeline.steps]

    def step_points(self, s: _pipeline.Step, base: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The BLS model's instance counts, its other knobs at your config's values: a batch of its
        requests runs them one after another on the instance it took, so its batching changes
        little but the wait (and would multiply the joint product, every point bounded alike by
        its instances); the models it calls, every point."""
        if s.model != self.pipeline.model:
            return super().step_points(s, base)
        count = next((d for d in s.space.dimensions if d.name == P_COUNT), None)
        if count is None:
            return [dict(base)]
        return [{**base, P_COUNT: c} for c in dimension_values(count)]

    def scored_alone(self, s: _pipeline.Step) -> bool:
        """The BLS model's configs all go into the joint product: alone, its instance count says
        nothing (each instance is held through its calls)."""
        return s.searched and s.model != self.pipeline.model

    def calls_of(self, model: str) -> int:
        if self.fanout is None or model == self.pipeline.model:
            return 1
        called = [s.model for s in self.pipeline.steps[1:]]
        return max(1, self.fanout[called.index(model)])

    def rest_us(self, model: str) -> float:
        """The BLS model's own time and every other model's execution of one (at its fastest
        calibrated value), times its calls."""
        return sum(self.one_us(m) * self.calls_of(m) for m, _ in self.order if m != model)

    def execution_scale(self) -> dict[str, float]:
        """The called models' (the BLS model's measured execution holds its calls)."""
        return {m: v for m, v in super().execution_scale().items() if m != self.pipeline.model}
