"""Whether a stored-baseline comparison shows the machine moving, and how large a change that explains.

A stored baseline compares two jobs; the gate allows their speeds a small difference (the job
noise) and calls anything past it, if significant, a regression. On a shared machine the jobs'
speeds differ by far more, and two signals in the records themselves say so:

- within-run drift: a job's own windows moved (a change point or a trend in throughput or a
  latency percentile, perfkit.changepoints). A machine whose speed moved by X within one job
  can differ by as much between two jobs; the model does not change during a job.
- time outside the server: the client's mean latency less the server's own request time
  (queue + compute, Triton's statistics). A slower model moves the server's request time and
  leaves the time outside it (client, HTTP/gRPC frontend, network) as it was; a busier machine
  slows the client and the frontend too.

- the server's own time that did not move: a slower model, or its batching, makes the server's own
  request time (queue + compute) per request rise; a client latency that rose while it did not is
  the machine's (the client, the frontend), whatever its size.
- windows that flip between states: a machine shared with bursty jobs moves a run's windows back
  and forth (neither a change point nor a trend); a model does not change during a job, so a
  run's slower and faster halves of windows differing by far more than a steady process's count
  noise (and by the drift floor) is the machine moving.

Neither can tell a busier machine from a slower model when the change is larger than the
machine's own movement: a change up to EXPLAINED_FACTOR times the largest movement seen (log
ratios; the factor is slack for the figures' own noise) is inconclusive, with the advice to
measure A/B; a larger one is still judged a regression. A competing load started mid-run moves
the run's figures by less than its windows moved, so it is not called a regression; a 30%
slowdown is caught while the machine moves by less than about 21%, and whatever it moves when
even the current run's better half of windows is worse than the baseline's worse half by
CLEAN_CHANGE or more (significant, past the threshold), unless the time outside the server alone
explains it: the machine's movement inside the runs then made part of them worse, but not the part
that still shows the change, and the machine was not busier throughout the current run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from perfkit.changepoints import describe_drift, linear_trend, window_drift, window_series
from perfkit.gate._results import Finding
from perfkit.records import Drift, LevelResult

# the least movement that counts as evidence: within-run drift past these (relative), and time outside
# the server moving by this share of the latency
EXPLAINED_FACTOR = 1.25
DRIFT_FLOOR = {"throughput": 0.03, "p50": 0.05, "p90": 0.08, "p95": 0.10, "p99": 0.15}
OUTSIDE_FLOOR = 0.03
SERVER_FLOOR = 0.03  # the server's own time per request rising by less than this is "did not rise"
GATE_ALPHA = 0.02  # one look at a finished run, two tests a metric (alpha / 2 each)
# windows flipping between states: the halves must differ by this many times a steady process's
# count noise (relative sd of a window's count in closed loop: CV(latency) / sqrt(completions))
FLIP_NOISE_FACTOR = 4.0
FLIP_MIN_WINDOWS = 6  # halves of fewer windows cannot tell two states from noise
# a change this large (|log ratio|, about 18%) between the current run's better half of windows and
# the baseline's worse half stays a regression, whatever the machine's movement
CLEAN_CHANGE = 0.2


@dataclass(frozen=True)
class MachineMove:
    """The machine's movement seen in a pair of levels: its size (|log ratio|) and what showed it."""

    size: float
    reason: str
    within_run: bool = True  # seen inside one run (a drift, flips); False: between the runs (time outside)

    def explains(self, baseline: float, current: float) -> bool:
        """Whether a change from baseline to current is within what this movement can explain."""
        if baseline <= 0 or current <= 0:
            return False
        return abs(math.log(current / baseline)) <= EXPLAINED_FACTOR * self.size


def _drift_of(level: LevelResult) -> Drift | None:
    # one look at a finished run (not a look after every window as the level loop does)
    found = window_drift(level.windows, DRIFT_FLOOR, alpha=GATE_ALPHA)
    recorded = level.drift
    if recorded is None:
        return found
    if found is None or abs(math.log1p(recorded.rel_change)) >= abs(math.log1p(found.rel_change)):
        return recorded
    return found


def _moved_by(level: LevelResult, drift: Drift, metric: str) -> float:
    """How far `metric` moved at the drift (|log ratio|): its own windows either side of the change
    point (or its own fitted trend), however noisy; the drift's own size when the windows lack it."""
    own = abs(math.log(drift.after / drift.before))
    series = window_series(level.windows, metric)
    if series is None or len(series) < 2 or not all(v > 0 for v in series):
        return own
    base = own if drift.metric == metric else 0.0
    if drift.kind == "trend":
        trend = linear_trend(series)
        return base if trend is None else max(base, abs(math.log(trend[1] / trend[0])))
    if not 0 < drift.at_window < len(series):
        return base
    before = sum(series[: drift.at_window]) / drift.at_window
    after = sum(series[drift.at_window :]) / (len(series) - drift.at_window)
    return max(base, abs(math.log(after / before)))


def halves(series: Sequence[float]) -> tuple[list[int], list[int]]:
    """The indices of a run's lower and upper half of windows by the metric's value (the middle one,
    of an odd count, in neither)."""
    order = sorted(range(len(series)), key=lambda i: series[i])
    half = len(series) // 2
    return order[:half], order[len(series) - half :]


def _flipped_by(level: LevelResult, metric: str) -> float | None:
    """How far the run's upper half of windows lies above its lower half for `metric` (|log ratio|),
    when that is past the drift floor and FLIP_NOISE_FACTOR times a steady process's count noise;
    else None."""
    series = window_series(level.windows, metric)
    if series is None or len(series) < FLIP_MIN_WINDOWS or not all(v > 0 for v in series):
        return None
    lo, hi = halves(series)
    size = math.log(sum(series[i] for i in hi) / len(hi)) - math.log(sum(series[i] for i in lo) / len(lo))
    counts = [w.completed for w in level.windows if w.completed > 0]
    lat = level.service
    cv = lat.std_us / lat.mean_us if lat.mean_us > 0 else 0.0
    noise = math.hypot(cv, 1.0) / math.sqrt(sum(counts) / len(counts))  # a count's sd, and its +-1 quantization
    floor = DRIFT_FLOOR.get(metric, DRIFT_FLOOR["p99"])
    return size if size >= max(math.log1p(floor), FLIP_NOISE_FACTOR * noise) else None


def _outside_us(level: LevelResult) -> float | None:
    if level.server is None or level.server.request_count <= 0 or level.service.count <= 0:
        return None
    return level.service.mean_us - level.server.request_avg_us


def machine_move(baseline: LevelResult, current: LevelResult, metric: str = "throughput") -> MachineMove | None:
    """The largest movement of the machine the two levels show for `metric` (see the module's
    docstring), or None: a drift found in a run's windows (on any metric) sized by how far the
    metric's own windows moved at it, windows that flip between states, or the time outside the
    server that moved."""
    moves = machine_moves(baseline, current, metric)
    return max(moves, key=lambda m: m.size) if moves else None


def machine_moves(baseline: LevelResult, current: LevelResult, metric: str = "throughput") -> list[MachineMove]:
    """Every movement of the machine the two levels show for `metric` (machine_move's largest)."""
    moves: list[MachineMove] = []
    for side, level in (("baseline", baseline), ("current", current)):
        drift = _drift_of(level)
        if drift is not None and drift.before > 0 and drift.after > 0:
            text = f"the {side} run's own windows drifted: {describe_drift(drift, len(level.windows))}"
            moves.append(MachineMove(_moved_by(level, drift, metric), text))
        flipped = _flipped_by(level, metric)
        if flipped is not None:
            text = (
                f"the {side} run's own windows moved back and forth: its faster and slower halves of windows "
                f"differ by {math.expm1(flipped):.0%} in {metric}"
            )
            moves.append(MachineMove(flipped, text))
    b_out, c_out = _outside_us(baseline), _outside_us(current)
    if b_out is not None and c_out is not None and baseline.service.mean_us > 0:
        share = (c_out - b_out) / baseline.service.mean_us
        if abs(share) >= OUTSIDE_FLOOR:
            text = (
                f"the time outside the server's own request time (client, frontend, network) went "
                f"{b_out / 1e3:.3g} -> {c_out / 1e3:.3g} ms per request ({share:+.0%} of the latency)"
                " while a slower model would move the server's time"
            )
            moves.append(MachineMove(abs(math.log1p(share)) if share > -1 else math.inf, text, within_run=False))
    return moves


def _server_flat(baseline: LevelResult, current: LevelResult) -> MachineMove | None:
    """The server's own request time per request (queue + compute) that did not rise while the client's
    latency did: a slower model (or its batching) moves the server's time, so a change the client
    sees beyond it is the machine's; it explains any change (None when the server's time rose by
    SERVER_FLOOR or more, or either run lacks the server's statistics)."""
    b, c = baseline.server, current.server
    if b is None or c is None or b.request_count <= 0 or c.request_count <= 0 or b.request_avg_us <= 0:
        return None
    if c.request_avg_us <= 0 or current.service.mean_us <= baseline.service.mean_us:
        return None
    if math.log(c.request_avg_us / b.request_avg_us) >= math.log1p(SERVER_FLOOR):
        return None
    text = (
        f"the server's own time per request did not rise ({b.request_avg_us / 1e3:.3g} -> "
        f"{c.request_avg_us / 1e3:.3g} ms) while the client's latency did "
        f"({baseline.service.mean_us / 1e3:.3g} -> {current.service.mean_us / 1e3:.3g} ms)"
    )
    return MachineMove(math.inf, text, within_run=False)


@dataclass(frozen=True)
class Evidence:
    """A metric's per-window values in both runs, and the gate's decision on any part of them."""

    baseline: Sequence[float]
    current: Sequence[float]
    judge: Callable[[list[float], list[float]], Finding]


def machine_checked(
    f: Finding, baseline: LevelResult, current: LevelResult, evidence: Evidence | None = None
) -> Finding:
    """A stored baseline's regression within what the machine's own movement explains: inconclusive,
    with the reason and the advice to measure A/B (an inconclusive one gets them too, in place of
    "more windows"); any other finding as it is. With the metric's `evidence`, a regression that the
    current run's better half of windows still shows against the baseline's worse half, by
    CLEAN_CHANGE or more, is kept."""
    judged = f.verdict == "regression" or (f.verdict == "inconclusive" and f.past_threshold)
    if not judged or f.baseline is None or f.current is None:
        return f
    flat = _server_flat(baseline, current)
    explaining = [m for m in machine_moves(baseline, current, f.metric) if m.explains(f.baseline, f.current)]
    explaining += [flat] if flat is not None else []
    if not explaining:
        return f
    move = max(explaining, key=lambda m: m.size)
    # the halves set aside the movement inside the runs, not one between them (the time outside the server)
    between = any(not m.within_run for m in explaining)
    if f.verdict == "regression" and evidence is not None and not between:
        clean = _halves_judged(f, evidence)
        if clean is not None:
            return clean
    head = f.reason if f.verdict == "regression" else f.reason.split("; about ")[0]
    reason = (
        f"{head}; but the machine moved ({move.reason}): a stored baseline cannot tell a busier machine "
        "from a slower model at this size, nor can more windows; measure with perfkit gate --ab (both in one job)"
    )
    return dataclasses.replace(f, verdict="inconclusive", reason=reason, more_windows=None)


def _halves_judged(f: Finding, evidence: Evidence) -> Finding | None:
    """The regression judged on the current run's better half of windows against the baseline's worse
    half, when it still is one there and of CLEAN_CHANGE or more; else None."""
    b_series, c_series = list(evidence.baseline), list(evidence.current)
    if len(b_series) < 4 or len(c_series) < 4 or min(b_series + c_series) <= 0:
        return None
    b_lo, b_hi = halves(b_series)
    c_lo, c_hi = halves(c_series)
    b_worse, c_better = (b_lo, c_hi) if f.metric == "throughput" else (b_hi, c_lo)
    b_part, c_part = [b_series[i] for i in sorted(b_worse)], [c_series[i] for i in sorted(c_better)]
    b_mean, c_mean = sum(b_part) / len(b_part), sum(c_part) / len(c_part)
    if abs(math.log(c_mean / b_mean)) < CLEAN_CHANGE:
        return None
    judged = evidence.judge(b_part, c_part)
    if judged.verdict != "regression":
        return None
    reason = (
        f"{f.reason}; the machine moved, but even the current run's better half of windows is worse than the "
        f"baseline's worse half ({b_mean:.4g} -> {c_mean:.4g}: {judged.reason})"
    )
    return dataclasses.replace(f, reason=reason)
