"""Several models served together under a traffic mix, simulated jointly: each model's dynamic
batcher and instances as _reference.Reference runs them (the rules of _sim's module docstring),
with one device every model's instances share.

The load is a mix: one open-loop arrival process at the total rate, each request drawn to a model
by its weight (as perfkit's mix engine draws each request's model, perfkit.loadgen), so a model's
share of the arrivals is its weight over the weights' sum. Each model's execution runs its
instance-own part first, then its `device_fraction` on its device, one execution at a time first
come first served across every model on that device (Contention's rule, with the device shared by
the models too): a model's executions stretch while another model holds the device. Models on
devices of their own (`device` differs) share only the request path. Members that claim the device
through Triton's rate limiter (`rate_limit_priority`) run as _mix_limiter's rules allocate them. The requests
pass one request path on their way to the batchers (ServiceModel.host_us of each request's model,
one request at a time).

The event loop is the reference loop's, in Python (a space of mixes is a few hundred simulations
of a few thousand requests); the compiled loop (_simloop) runs one model and is not touched.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perfkit.errors import UsageError
from perfkit.predict._mix_limiter import DeviceLimiter, FreeInstances, run_mix
from perfkit.predict._model import BatcherConfig, Contention, ServiceModel
from perfkit.predict._rate import ceiling_rps
from perfkit.predict._reference import Reference
from perfkit.predict._sim import WARMUP_FRACTION, _batch_plan, _service_table, unit_arrivals

MIX_REQUESTS = 4_000  # requests of one simulated mix, every model's together
RATE_STEPS = 9  # geometric bisection of the total rate over [cap/64, cap]: to within 1.2%


@dataclass(frozen=True)
class MixMember:
    """One model of a mix: its batcher config, its service model (alone on the device), its weight,
    the part of each execution on its device (shared by every instance on it, 0: none), its own
    latency budget (us), and which device it runs on (members with the same `device` share it)."""

    name: str
    config: BatcherConfig
    service: ServiceModel
    weight: float
    device_fraction: float
    budget_us: float
    device: int = 0
    # Triton's rate limiter (_mix_limiter): the priority of the member's instances' claim of one
    # unit of the device resource every claiming member shares (0: no claim, no rate_limiter block)
    rate_limit_priority: int = 0

    def __post_init__(self) -> None:
        if self.weight <= 0 or not 0.0 <= self.device_fraction <= 1.0 or self.budget_us <= 0:
            raise UsageError(
                f"mix member {self.name!r}: weight {self.weight}, device fraction {self.device_fraction},"
                f" budget {self.budget_us} us",
                hint="give a positive weight and budget, and a device fraction within 0..1",
            )


@dataclass(frozen=True)
class MemberFigures:
    """One model's figures in a simulated mix: its offered and completed rates, its latency at the
    percentile asked, its mean batch, and its executions' stretch (mean execution, device waits
    included, over the same batches alone)."""

    name: str
    offered_rps: float
    completed_rps: float
    latency_us: float
    mean_batch: float
    stretch: float

    def holds(self, budget_us: float) -> bool:
        """Within its budget, and keeping up with what it is offered (95%)."""
        return self.latency_us <= budget_us and self.completed_rps >= 0.95 * self.offered_rps


@dataclass(frozen=True)
class MixRate:
    """The highest total rate at the mix's weights at which every model holds its own budget
    (0: none does even lightly), with each model's figures there."""

    rate_rps: float
    members: tuple[MemberFigures, ...]


class _Member(Reference):
    """A model's batcher and instances whose device may be another model's too (`dev` read and
    written through the one cell every member on that device holds), each execution's start kept."""

    def __init__(self, arr: list[float], m: MixMember, cell: list[float]) -> None:
        self._cell = cell
        big, _pmin, _pmax, pref, delay = _batch_plan(m.config)
        table = _service_table(m.service, big)
        super().__init__(arr, big, pref, delay, m.config.instances, table, m.device_fraction, (math.inf, 0, 0))
        self.starts: list[float] = []
        self.priority = m.rate_limit_priority
        self.claim = 1 if m.rate_limit_priority > 0 else 0

    @property  # type: ignore[override]  # Reference keeps its device time in a plain attribute: here the mix's cell
    def dev(self) -> float:
        return self._cell[0]

    @dev.setter
    def dev(self, value: float) -> None:
        self._cell[0] = value

    def take(self, i: int, t: float) -> None:
        self.starts.append(t)
        super().take(i, t)


def _split(members: Sequence[MixMember], requests: int, seed: int, arrival: str) -> tuple[np.ndarray, np.ndarray]:
    """Unit-rate arrivals of the whole mix ('poisson' or 'constant') and each one's model, drawn
    by weight (the same draws at every rate: common random numbers keep the rate search monotone)."""
    unit = unit_arrivals(arrival, requests, seed)
    w = np.array([m.weight for m in members], dtype=float)
    which = np.random.default_rng(seed + 1).choice(len(members), size=requests, p=w / w.sum())
    return unit, which


def _request_path(due: np.ndarray, host_s: np.ndarray) -> np.ndarray:
    """When each request of the mix (sorted by due time) leaves the one request path, each holding it
    for its own model's host time: left_i = max(due_i, left_(i-1) + h_i), as _sim.through_request_path
    with the time per request varying."""
    if not np.any(host_s > 0):
        return due
    total = np.cumsum(host_s)
    return total + np.maximum.accumulate(due - total)


def simulate_mix(
    members: Sequence[MixMember],
    total_rps: float,
    *,
    percentile: float = 99.0,
    requests: int = MIX_REQUESTS,
    seed: int = 0,
    arrival: str = "poisson",
) -> tuple[MemberFigures, ...]:
    """Run `requests` requests of the mix at total_rps (`arrival`: 'poisson' or 'constant')
    through every model's batcher and instances on their devices; each model's figures over its requests after the first
    WARMUP_FRACTION of the run. Raises UsageError for a rate that is not positive or no member."""
    if total_rps <= 0 or not members:
        raise UsageError(f"a mix at {total_rps} req/s of {len(members)} models", hint="give a positive rate and models")
    unit, which = _split(members, requests, seed, arrival)
    due = unit / total_rps
    host = np.array([members[k].service.host_us / 1e6 for k in which])
    served = _request_path(due, host)
    cells: dict[int, list[float]] = {m.device: [0.0] for m in members}
    runs = [_Member(served[which == k].tolist(), m, cells[m.device]) for k, m in enumerate(members)]
    run_mix(runs, DeviceLimiter(runs) if any(r.claim for r in runs) else FreeInstances(runs))
    skip_t = due[int(len(due) * WARMUP_FRACTION)]
    out = []
    for k, (m, r) in enumerate(zip(members, runs, strict=True)):
        mine = due[which == k]
        if len(mine) == 0 or not r.sizes:
            out.append(MemberFigures(m.name, 0.0, 0.0, 0.0, 0.0, 1.0))
            continue
        sizes = np.asarray(r.sizes, dtype=np.int64)
        done = np.repeat(np.asarray(r.ends), sizes)
        kept = mine >= skip_t
        latency = (done - mine)[kept] + m.service.overhead_us / 1e6
        span_due = mine[kept][-1] - mine[kept][0] if kept.sum() > 1 else 0.0
        span_done = done[kept].max() - done[kept].min() if kept.sum() > 1 else 0.0
        offered = (kept.sum() - 1) / span_due if span_due > 0 else math.inf
        completed = (kept.sum() - 1) / span_done if span_done > 0 else 0.0
        execs = np.asarray(r.ends) - np.asarray(r.starts)
        alone = np.asarray([r.table[n] for n in r.sizes])
        out.append(
            MemberFigures(
                m.name, float(offered), float(completed), float(np.percentile(latency, percentile)) * 1e6,
                float(sizes.mean()), float(execs.sum() / alone.sum()) if alone.sum() > 0 else 1.0,
            )
        )  # fmt: skip
    return tuple(out)


def mix_ceiling_rps(members: Sequence[MixMember]) -> float:
    """An upper bound on the mix's total rate: no model past its own ceiling at its share
    (perfkit.predict.ceiling_rps, its device fraction as its instances' contention), and the shared
    device no busier than all the time with every execution at its fullest batch."""
    total_w = sum(m.weight for m in members)
    bound = math.inf
    device_s: dict[int, float] = {}  # each device's time per request of the mix, batches full
    for m in members:
        share = m.weight / total_w
        bound = min(bound, ceiling_rps(m.config, m.service, Contention(m.device_fraction)) / share)
        size = m.config.max_batch_size if m.config.batching else 1
        per = share * m.device_fraction * m.service.service_us(size) / size / 1e6
        device_s[m.device] = device_s.get(m.device, 0.0) + per
    busiest = max(device_s.values(), default=0.0)
    return min(bound, 1.0 / busiest) if busiest > 0 else bound


def mix_rate(
    members: Sequence[MixMember],
    *,
    percentile: float = 99.0,
    requests: int = MIX_REQUESTS,
    seed: int = 0,
    arrival: str = "poisson",
) -> MixRate:
    """The highest total rate at the members' weights at which every model holds its own budget,
    by geometric bisection between mix_ceiling_rps and 1/64 of it (then on down to 1/4096)."""
    cap = mix_ceiling_rps(members) * 1.02

    def figures(rate: float) -> tuple[MemberFigures, ...] | None:
        figs = simulate_mix(members, rate, percentile=percentile, requests=requests, seed=seed, arrival=arrival)
        return figs if all(f.holds(m.budget_us) for f, m in zip(figs, members, strict=True)) else None

    lo, hi = cap / 64, cap
    best = figures(lo)
    if best is None:
        lo, hi = cap / 4096, lo
        best = figures(lo)
        if best is None:
            return MixRate(0.0, ())
    for _ in range(RATE_STEPS):
        mid = math.sqrt(lo * hi)
        got = figures(mid)
        if got is None:
            hi = mid
        else:
            lo, best = mid, got
    return MixRate(lo, best)


def fit_mix_contention(
    members: Sequence[MixMember],
    total_rps: float,
    measured_stretch: Sequence[float],
    *,
    own: Sequence[float] | None = None,
    requests: int = MIX_REQUESTS,
    arrival: str = "poisson",
) -> float:
    """How much the models of a mix share one device, from a level where they ran together at
    total_rps: g within 0..1, each model's part on the one device being g x own_m, bisected until
    the simulated executions stretch, summed over the models, as Triton measured them (each
    model's mean execution over its own alone, `measured_stretch`; `arrival`, the level's). own_m:
    the model's part of an execution shared by its own instances where its calibration found
    one, else 1 (`own` None: 1 for every model). One figure, not one a model: a level's stretches
    tell how much the models wait on each other, not whose executions hold the device for how long
    (a light model's part hides behind a heavy one's). Every stretch under 1.02: 0, the models share no device."""
    if len(measured_stretch) != len(members):
        raise UsageError("a stretch per model of the mix is needed", hint="measure every model of the mix")
    if max(measured_stretch, default=1.0) < 1.02 or len(members) < 2:
        return 0.0
    scale = list(own) if own is not None else [1.0] * len(members)
    want = sum(measured_stretch)

    def simulated(g: float) -> float:
        figs = simulate_mix(shared_device(members, g, scale), total_rps, requests=requests, arrival=arrival)
        return sum(f.stretch for f in figs)

    if simulated(1.0) <= want:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(8):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if simulated(mid) < want else (lo, mid)
    return (lo + hi) / 2


def shared_device(members: Sequence[MixMember], g: float, own: Sequence[float]) -> list[MixMember]:
    """The members as the mix's contention `g` places them (fit_mix_contention): g > 0, all on one
    device, each with g x own_m of its executions there; g = 0, each on a device of its own with
    own_m (its own instances' shared fraction) of its executions there."""
    if g > 0:
        return [dataclasses.replace(m, device_fraction=g * d, device=0) for m, d in zip(members, own, strict=True)]
    return [
        dataclasses.replace(m, device_fraction=d, device=k) for k, (m, d) in enumerate(zip(members, own, strict=True))
    ]
