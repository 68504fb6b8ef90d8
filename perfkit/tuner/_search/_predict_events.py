"""The predicted search's lines: the space scored (Predicted), and what it says in passing (Note)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfkit.tuner._events import TuneEvent
from perfkit.tuner._space import P_COUNT, P_DB, P_DELAY, P_KIND, P_MBS, P_PREC, P_PREF
from perfkit.tuner._space._knob_backend import MEASURED_PER_VALUE


@dataclass(frozen=True)
class Predicted(TuneEvent):
    """The space scored: how many configs, how long, and the best predicted ones."""

    configs: int
    simulated: int
    seconds: float
    best: tuple[tuple[str, float], ...]

    def line(self) -> str:
        top = "; ".join(f"{label}: {rate:.0f} req/s" for label, rate in self.best)
        return (
            f"predicted {self.configs} configs in {self.seconds:.1f} s ({self.simulated} simulated, the rest bounded"
            f" below the best); measuring the best first, each next only while it could beat the best measured: {top}"
        )


@dataclass(frozen=True)
class Note(TuneEvent):
    """One line the predicted search says (a fallback, your config measured at its prediction only)."""

    text: str

    def line(self) -> str:
        return self.text


def label(params: Mapping[str, Any]) -> str:
    """A point's knobs the prediction tells apart, for the search's lines."""
    told = (P_MBS, P_DB, P_DELAY, P_PREF, P_COUNT, P_PREC, P_KIND, *MEASURED_PER_VALUE)
    return " ".join(f"{k}={v}" for k, v in params.items() if k in told)
