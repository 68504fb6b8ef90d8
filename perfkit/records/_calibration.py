"""What a calibration measured and fitted: a model's execution time per batch size (from the
server's per-batch-size statistics), its per-request overhead, and how its instances share the
device. Stored with the tune record it served (TuneRecord.calibration); a pipeline's holds one
per step."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CalibrationPoint:
    """One batch size the server executed: how often, and its mean execution time
    (compute_input + compute_infer + compute_output per execution)."""

    batch_size: int
    executions: int
    service_us: float


@dataclass(frozen=True)
class Calibration:
    """The fitted models and the points they were fitted to. Execution time of a batch of n:
    fixed_us + per_item_us * n, off the points by fit_rms_rel (execution-weighted RMS of the
    relative residuals) and fit_max_rel at worst. overhead_us: what a request spends outside the
    instance. shared_fraction: the part of an execution on a device every instance shares, from
    the saturated rates measured at instance_counts (0: independent instances). host_us: the
    request path's capacity (perfkit.predict.ServiceModel.host_us), 1 / host_held_rps (the
    highest rate the batching config held within the budget, at the larger instance count where
    host_scaled_rps was measured; 1 / host_saturated_rps where none was) where the path held the
    saturated rate (perfkit.predict.host_bound: the instance busy only host_busy of the time, or
    more instances not scaling as their contention says); 0 where the instances held it, or
    nothing measured it.

    A pipeline's calibration names the pipeline (the ensemble): `steps` holds each step's own
    calibration (fitted from that step's statistics during the same run, overhead_us 0), and
    overhead_us is what a request spends outside every step's instances, end to end; its own
    points are empty and its fit errors the worst of its steps'.

    Where the space searches a knob that changes the service time itself (precision, instance
    kind), each value has a curve of its own: `value` names the values this calibration was
    measured at ("precision=fp32", knobs joined by spaces; '' where one curve serves every
    config), and `values` holds one calibration per other value of the space (each with its own
    points, line and contention; the overhead and the request path's as measured here). A value's
    `factor`, where positive, says its curve is this one's times that factor, confirmed at the
    points it holds (tuner/_search/_value_calibrate.py). A pipeline's step whose space searches
    such a knob holds its values the same way, in its own calibration under `steps`. Records saved
    before carry neither."""

    model: str
    points: tuple[CalibrationPoint, ...]
    fixed_us: float
    per_item_us: float
    fit_rms_rel: float
    fit_max_rel: float
    overhead_us: float = 0.0
    instance_counts: tuple[int, ...] = ()
    saturated_rps: tuple[float, ...] = ()
    shared_fraction: float = 0.0
    duration_s: float = 0.0
    steps: tuple[Calibration, ...] = ()  # a pipeline's: one per step, in the pipeline's order
    host_us: float = 0.0
    host_saturated_rps: float = 0.0  # the saturated rate of the largest batching config, one instance
    host_busy: float = 0.0  # how much of that level its instance executed (0..1)
    host_held_rps: float = 0.0  # the highest rate a batching config held within the budget (0: not measured)
    host_scaled_rps: float = 0.0  # that config saturated at the larger of instance_counts (0: not measured)
    # How much longer that saturated level's executions took than the fitted (unloaded) line, at
    # least 1: the simulator stretches every execution by it (perfkit.predict.service_model).
    loaded_stretch: float = 1.0
    value: str = ""  # the values of the knobs this curve was measured at ('' : one curve for every config)
    values: tuple[Calibration, ...] = ()  # one per other value of the space, each at its own `value`
    factor: float = 0.0  # > 0: this value's curve is the first's times this, confirmed at its points

    def curves(self) -> tuple[Calibration, ...]:
        """Every curve, this one first: one per value of the space (this one alone without values)."""
        return (self, *self.values)

    def curve(self, value: str) -> Calibration | None:
        """The calibration of the configs at `value` (BatcherConfig.variant): this one where it
        was measured at no value of its own (one curve for every config; a record saved before),
        or `value` is its own or ''; the value's own; None for a value it holds no curve for (it
        failed to load, say: measured at one value, every other one refused, it holds none)."""
        if not (self.value or self.values) or value in ("", self.value):
            return self
        return next((c for c in self.values if c.value == value), None)

    @property
    def stated_error_rel(self) -> float:
        """The error a prediction from this calibration states: its fit's worst (fit_max_rel; with
        a curve per value, the worst of theirs), never below 0. `perfkit plan` gives a predicted
        rate +- this; the predicted search measures a config predicted within it of the best
        measured (perfkit.tuner._search._predict)."""
        return max(self.fit_max_rel, *(c.fit_max_rel for c in self.values), 0.0)

    @property
    def stretch_worth_telling(self) -> bool:
        """Whether the executions stretched under load enough (5%) for the line and report to say so."""
        return self.loaded_stretch >= 1.05
