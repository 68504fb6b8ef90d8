"""What a calibration measured and fitted: a model's execution time per batch size (from the
server's per-batch-size statistics), its per-request overhead, and how its instances share the
device. Stored with the tune record it served (TuneRecord.calibration)."""

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
    the saturated rates measured at instance_counts (0: independent instances)."""

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
