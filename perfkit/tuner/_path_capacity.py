"""The request path's capacity in the predicted search, learnt by measurement where a trial holds
more than the calibration saw.

Where the calibration found the request path, not the instance, holding a saturated model
(predict.host_bound), no config is predicted past the path's capacity: the highest rate the
calibration's config held within the budget (predict.fit_host_us). That figure is read in a few
one-window levels on a machine whose CPUs the path shares with the executions and the load
generator, and is low as often as not: onnx_mlp's calibration held 7,185 req/s where its trials
then held 8,700 to 13,400 (2 cores). A config the path bounds that a trial measures holding more
is not a prediction off in the simulator's model of the batcher: the path carries at least that.
The capacity is raised to the rate held, the space predicted again, and the best predicted
configs not yet measured are measured next, each still checked against its new prediction: a
config the path bounds ties with the best measured (PATH_TIE), which only a measurement settles.
A trial holding less than its prediction is checked as any other (tuner/_predict_check.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from perfkit import predict
from perfkit.records import Calibration
from perfkit.tuner._events import TuneEvent

# A config the path bounds predicted within this factor of the best measured rate ties with it: the
# simulator puts such configs at 0.97-0.99 of the path's capacity (its queue of one request at a
# time, at budgets of tens of ms), and the capacity is the rate the best held, so only a
# measurement tells them apart.
PATH_TIE = 0.95


def path_capacity_rps(cal: Calibration | None) -> float | None:
    """The request path's capacity (req/s) a calibration sets, None where it sets none."""
    if cal is None or cal.host_us <= 0:
        return None
    return 1e6 / cal.host_us


def path_bound(cal: Calibration | None, cfg: object) -> bool:
    """Whether the request path, not the instances, bounds a config's predicted rate: its
    instances alone could complete more than the path's capacity lets through. False for what is
    not one model's config (a pipeline's steps) or a calibration without a path capacity."""
    capacity = path_capacity_rps(cal)
    if capacity is None or cal is None or not isinstance(cfg, predict.BatcherConfig):
        return False
    instances_only = dataclasses.replace(predict.service_model(cal), host_us=0.0)
    return predict.capacity_rps(cfg, instances_only, predict.contention(cal)) > capacity


def raised(cal: Calibration, held_rps: float) -> Calibration:
    """The calibration with the path's capacity raised to a rate a config it bounds held."""
    return dataclasses.replace(cal, host_us=1e6 / held_rps, host_held_rps=held_rps)


@dataclass(frozen=True)
class PathRaised(TuneEvent):
    """A trial held more than the request path's calibrated capacity: the capacity is raised and
    the space predicted again."""

    number: int
    capacity_rps: float  # before
    held_rps: float
    best: tuple[tuple[str, float], ...]  # the best predicted configs not yet measured, with their new rates

    def line(self) -> str:
        top = "; ".join(f"{label}: {rate:.0f} req/s" for label, rate in self.best) or "none left to measure"
        return (
            f"trial {self.number} held {self.held_rps:.0f} req/s, past the request path's calibrated capacity"
            f" ({self.capacity_rps:.0f}): the path carries at least that; capacity raised to {self.held_rps:.0f}"
            f" and the space predicted again, measuring next: {top}"
        )
