"""The predicted search's check of a measured trial against its prediction. Two checks, either
one holding is enough:

1. the rate: the sustainable rate measured within PREDICTION_TOLERANCE of the one predicted;
2. the latency at the rate measured: the simulator's budget statistic (p99 by default), run at
   the rate the trial sustained with the calibration's service model, contention and overhead,
   within LATENCY_TOLERANCE of the statistic measured there.

The second is the model checked where the first cannot see it: near the budget a batching
config's p99 is flat in the rate (94.7 ms at 100 req/s and 102.4 ms at 200 with a 100 ms budget),
so a 2% error in latency moves the rate that meets the budget by 30% and two calibrations 2.5%
apart predict 133 and 183 req/s for the same config. A model that is right about the latency
where the config was measured is right about the config, however far that moves the rate."""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfkit import predict
from perfkit.records import Calibration, budget_label
from perfkit.tuner._events import TuneEvent

# A measured sustainable rate within 25% of its prediction counts as the prediction holding: the
# simulator's own seed-to-seed spread at 10k requests is ~5%, the open-loop search's rate ladder
# ~9% a step, and calibration fit errors of 5-10% are usual on a shared CPU.
PREDICTION_TOLERANCE = 0.25
# The simulator's latency at the rate measured within 10% of the measured one: the calibration's
# fit errors (5-10% on a shared CPU) carry into it about one for one. Where the p99 is steep in
# the rate, 10% of latency is a few percent of rate, so a rate 25% off shows as far more than 10%
# of latency there: the check lets through only what the flat part of the curve hides.
LATENCY_TOLERANCE = 0.10


def rate_holds(predicted_rps: float, measured_rps: float | None) -> bool:
    """Whether a measured sustainable rate is within PREDICTION_TOLERANCE of its prediction."""
    if measured_rps is None or predicted_rps <= 0:
        return False
    return abs(measured_rps / predicted_rps - 1) <= PREDICTION_TOLERANCE


def latency_holds(latency_us: tuple[float, float] | None) -> bool:
    """Whether a (simulated, measured) latency pair is within LATENCY_TOLERANCE of the measured."""
    if latency_us is None:
        return False
    simulated, measured = latency_us
    return measured > 0 and abs(simulated / measured - 1) <= LATENCY_TOLERANCE


def simulated_latency_us(
    cal: Calibration,
    cfg: predict.BatcherConfig,
    rate_rps: float,
    *,
    percentile: float,
    arrival: str = "poisson",
    requests: int,
) -> float | None:
    """The simulator's `percentile` of latency for `cfg` offered `rate_rps` (the calibration's
    service model with its overhead, and its contention); None where it keeps no such percentile
    (it keeps 50, 90, 95 and 99) or the rate is not positive."""
    if rate_rps <= 0 or float(percentile) not in (50.0, 90.0, 95.0, 99.0):
        return None
    load = predict.Load(arrival if arrival in ("poisson", "constant") else "poisson", rate_rps=rate_rps)
    p = predict.simulate(cfg, predict.service_model(cal), load, predict.contention(cal), requests=requests)
    return p.percentile_us(percentile)


@dataclass(frozen=True)
class PredictionChecked(TuneEvent):
    """One measured trial next to its prediction: the rate, and where that is off, the latency at
    the rate measured (latency_us: simulated and measured at latency_rps; None: not checked)."""

    number: int
    predicted_rps: float
    measured_rps: float | None
    held: bool
    latency_us: tuple[float, float] | None = None
    latency_rps: float | None = None
    percentile: float = 99.0
    budget_metric: str = "latency"
    lower_bound: bool = False  # measured at its predicted rate only, and held there (TrialState.rate_is_lower_bound)
    past_path: bool = (
        False  # held more than predicted, past the request path's ceiling (tuner/_search/_request_path.py)
    )

    @property
    def rate_held(self) -> bool:
        return rate_holds(self.predicted_rps, self.measured_rps)

    def line(self) -> str:
        head = f"  trial {self.number}: predicted {self.predicted_rps:.0f} req/s"
        if self.measured_rps is None:
            return f"{head}, measured none within budget"
        if self.lower_bound:
            return f"{head}, held there ({self.measured_rps:.0f} completed): at least that, so no error to tell"
        off = self.measured_rps / self.predicted_rps - 1 if self.predicted_rps > 0 else math.inf
        if self.past_path:
            return (
                f"{head}, measured {self.measured_rps:.0f} ({off:+.0%}): past the request path's calibrated capacity,"
                " which bounded the prediction, so no error to tell"
            )
        if self.rate_held:
            return f"{head}, measured {self.measured_rps:.0f} ({off:+.0%}, within {PREDICTION_TOLERANCE:.0%})"
        if self.latency_us is None:
            return f"{head}, measured {self.measured_rps:.0f} ({off:+.0%}, OFF BY MORE THAN {PREDICTION_TOLERANCE:.0%})"
        simulated, measured = self.latency_us
        stat = budget_label(self.budget_metric, self.percentile)
        at = f"{self.latency_rps:.0f}/s" if self.latency_rps is not None else "the rate measured"
        figures = f"{stat} at {at}: simulated {simulated / 1e3:.1f} ms, measured {measured / 1e3:.1f} ms"
        if latency_holds(self.latency_us):
            return (
                f"{head}, measured {self.measured_rps:.0f} ({off:+.0%}, off by more than {PREDICTION_TOLERANCE:.0%};"
                f" {figures}, within {LATENCY_TOLERANCE:.0%}: holds)"
            )
        return (
            f"{head}, measured {self.measured_rps:.0f} ({off:+.0%}, OFF BY MORE THAN {PREDICTION_TOLERANCE:.0%};"
            f" {figures}, OFF BY MORE THAN {LATENCY_TOLERANCE:.0%})"
        )
