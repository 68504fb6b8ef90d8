"""What a BLS model's calls are, read from the server's own statistics over the calibration's
levels (tuner/_search/_bls_calibrate.py): how many calls each called model gets per BLS request
(its fan-out), and the BLS model's own time (what its instance spends outside its calls).

What the statistics say (triton-inference-server/server, docs/protocol/extension_statistics.md):
"success" counts every successful request of a model, so over one level a called model's success
count against the BLS model's is the calls it got per BLS request; "queue" is the time a request
waited for an instance, and compute_input + compute_infer + compute_output the time its execution
took, per request. A python model's execution holds its instance while `InferenceRequest.exec()`
waits for each call (triton-inference-server/python_backend, README "Business Logic Scripting":
exec is blocking; async_exec lets calls overlap), so the BLS model's compute time per request is
its own time plus each call's queue and compute time in the model called: its own time is that
difference. The python backend reports an execution's start and end for every request it held
(src/pb_metric_reporter.cc, PbMetricReporter's destructor), so a batch of m requests run one
after another reports the whole execution for each: the time per request is the compute time
times executions over requests.

Where the calls cannot be told, the predicted search measures instead, saying why:
- a fan-out that is not the same whole number at every level (it depends on the data sent, or
  on something else the statistics do not show);
- calls that overlap: the BLS model's compute time clearly short of the time its calls took one
  after another (async_exec, or threads), which the simulator's calls in series do not model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from perfkit.records import ServerStats

FANOUT_TOLERANCE = 0.05  # a level's calls per request this near a whole number count as it
OVERLAP_TOLERANCE = 0.15  # own time below minus this fraction of the calls' time: the calls overlapped


@dataclass(frozen=True)
class BlsLevel:
    """One calibration level's statistics deltas: the BLS model's and each called model's."""

    label: str  # how the level is named in what is said ("1 client")
    stats: Mapping[str, ServerStats]


@dataclass(frozen=True)
class BlsCalls:
    """The calls read: per called model its fan-out (None where untold) and the calls per request
    at each level; the BLS model's own time per request (us, at the first level); why the calls
    cannot be simulated (None: they can)."""

    called: tuple[str, ...]
    fanout: tuple[int, ...] | None
    ratios: tuple[tuple[float, ...], ...]  # per level, per called model
    own_us: float
    calls_us: float  # the calls' queue and compute time per request, at the first level
    why_untold: str | None = None

    def line(self) -> str:
        """The calls as the calibration says them."""
        if self.fanout is None:
            return self.why_untold or "the calls were not told"
        calls = ", ".join(f"{m} x{f}" for m, f in zip(self.called, self.fanout, strict=True))
        return (
            f"calls per request {calls} (the same at every level), one after another; own time"
            f" {self.own_us / 1e3:.2f} ms a request outside its calls ({self.calls_us / 1e3:.2f} ms in them)"
        )


def _compute_us(s: ServerStats) -> float:
    return s.compute_input_avg_us + s.compute_infer_avg_us + s.compute_output_avg_us


def read_calls(bls: str, called: Sequence[str], levels: Sequence[BlsLevel]) -> BlsCalls:
    """The calls of `bls` to the `called` models over the levels (each with statistics of the BLS
    model and every called model; levels where the BLS model answered nothing are skipped)."""
    seen = [lv for lv in levels if bls in lv.stats and lv.stats[bls].request_count > 0]
    called = tuple(called)
    if len(seen) < 2:
        return BlsCalls(called, None, (), 0.0, 0.0, f"{bls!r} answered at {len(seen)} calibration level(s), not 2")
    ratios = tuple(
        tuple((lv.stats[m].request_count if m in lv.stats else 0) / lv.stats[bls].request_count for m in called)
        for lv in seen
    )
    fanout: list[int] = []
    for j, m in enumerate(called):
        per = [r[j] for r in ratios]
        whole = round(sum(per) / len(per))
        if any(abs(r - whole) > FANOUT_TOLERANCE for r in per):
            at = ", ".join(f"{r:.2f} at {lv.label}" for r, lv in zip(per, seen, strict=True))
            why = (
                f"{bls!r} calls {m} {at} a request: not one whole number at every level (the calls depend on"
                " the data sent), which the simulator cannot follow"
            )
            return BlsCalls(called, None, ratios, 0.0, 0.0, why)
        fanout.append(whole)
    own, calls_us = _own_us(bls, called, fanout, seen[0])
    for lv in seen:
        o, c = _own_us(bls, called, fanout, lv)
        if c > 0 and o < -OVERLAP_TOLERANCE * c:
            why = (
                f"{bls!r} executes {(o + c) / 1e3:.2f} ms a request at {lv.label} while its calls take"
                f" {c / 1e3:.2f} ms one after another: they overlap (async_exec or threads), which the simulator"
                " (calls in series) does not model"
            )
            return BlsCalls(called, None, ratios, 0.0, 0.0, why)
    return BlsCalls(called, tuple(fanout), ratios, max(own, 0.0), calls_us)


def _own_us(bls: str, called: Sequence[str], fanout: Sequence[int], lv: BlsLevel) -> tuple[float, float]:
    """(own time, time in calls) per BLS request at one level: the execution per request (the
    execution's time over the requests it ran) less each call's queue and compute time."""
    b = lv.stats[bls]
    per_request = _compute_us(b) * (b.execution_count / b.request_count if b.execution_count else 1.0)
    calls = sum(f * (lv.stats[m].queue_avg_us + _compute_us(lv.stats[m])) for m, f in zip(called, fanout, strict=True)
                if m in lv.stats and f > 0)  # fmt: skip
    return per_request - calls, calls
