"""A measured trial of a pipeline's predicted search (tuner/_search/_predict_pipeline.py) step by
step: each step's execution time, batch and queue as the pipeline simulator says at the rate
measured next to what Triton's per-model statistics reported for it, and the bottleneck named
(the step of least predicted capacity) with whether Triton's breakdown points at it too."""

from __future__ import annotations

from dataclasses import dataclass

from perfkit import predict
from perfkit.tuner._events import TuneEvent


@dataclass(frozen=True)
class StepCheck:
    """One step of a measured trial: the simulator's figures at the rate measured, and what
    Triton's per-model statistics reported for the step during the trial (None: not reported)."""

    predicted: predict.StepFigures
    queue_us: float | None
    compute_us: float | None
    batch: float | None

    def cells(self) -> str:
        f = self.predicted
        out = f"{f.name} compute {_ms(f.mean_exec_us)} / {_ms(self.compute_us)}"
        if self.compute_us is not None:
            out += f" ({_off(f.mean_exec_us, self.compute_us)})"
        batch = "-" if self.batch is None else f"{self.batch:.1f}"
        return out + f", batch {f.mean_batch:.1f} / {batch}, queue {_ms(f.mean_wait_us)} / {_ms(self.queue_us)}"


@dataclass(frozen=True)
class StepsChecked(TuneEvent):
    """A measured trial's steps next to the pipeline simulator's at the rate measured, the
    bottleneck named: the step with the least predicted ceiling (the one the rate leans on), and
    whether Triton's breakdown (most queue + compute time) points at the same step."""

    number: int
    rate_rps: float
    steps: tuple[StepCheck, ...]

    @property
    def bottleneck(self) -> StepCheck:
        return min(self.steps, key=lambda c: c.predicted.ceiling_rps)

    def measured_bottleneck(self) -> str | None:
        seen = [c for c in self.steps if c.queue_us is not None and c.compute_us is not None]
        if not seen:
            return None
        return max(seen, key=lambda c: (c.queue_us or 0.0) + (c.compute_us or 0.0)).predicted.name

    def bottleneck_line(self) -> str:
        c = self.bottleneck
        f = c.predicted
        meas = self.measured_bottleneck()
        agree = (
            "Triton's breakdown reports no step" if meas is None
            else "Triton's breakdown puts the most time there too" if meas == f.name
            else f"Triton's breakdown puts the most time in {meas}"
        )  # fmt: skip
        off = f" ({_off(f.mean_exec_us, c.compute_us)})" if c.compute_us is not None else ""
        return (
            f"{f.name} (predicted capacity {f.ceiling_rps:.0f} req/s): compute {f.mean_exec_us / 1e3:.2f} ms"
            f" predicted, {_ms(c.compute_us)} measured{off}; queue {f.mean_wait_us / 1e3:.2f} ms predicted,"
            f" {_ms(c.queue_us)} measured; {agree}"
        )

    def line(self) -> str:
        return (
            f"  trial {self.number} steps at {self.rate_rps:.0f} req/s, predicted / measured: "
            + "; ".join(c.cells() for c in self.steps)
            + f"\n  bottleneck: {self.bottleneck_line()}"
        )


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1e3:.2f} ms"


def _off(want: float, got: float) -> str:
    return f"{got / want - 1:+.0%}" if want > 0 else "n/a"
