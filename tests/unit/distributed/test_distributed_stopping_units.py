"""The distributed coordinator's level loop stops by the local loop's rule (perfkit.measure.LevelStop),
driven here in-process: real LoadWorker objects behind a stand-in for Ray, their engines replaced by
synthetic closed-loop senders whose completions slow down at a known time. A level whose windows
shift ends early with the drift recorded; a steady one whose precision is out of reach ends at its
budget's look saying so; a steady, precise one ends stable."""

from __future__ import annotations

import math
from time import perf_counter_ns
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from perfkit.changepoints import window_drift
from perfkit.distributed import _run, _worker
from perfkit.distributed._cluster import Placed
from perfkit.distributed._worker import LoadWorker, Unit
from perfkit.measure import _stopping
from perfkit.records import STATUS_OK, LoadLevel, ProfileSpec, Samples
from tests.support.stand_in_server import StandInServer

WINDOW_MS = 60.0


class SyntheticEngine:
    """Closed-loop completions at `rate` per second with `latency_us`, both x `slow` from `slow_at_s` on
    (seconds after the level's start); seeded noise on each request's latency."""

    def __init__(self, rate: float, latency_us: float, slow: float, slow_at_s: float, seed: int) -> None:
        self.rate, self.latency_us, self.slow, self.slow_at_s = rate, latency_us, slow, slow_at_s
        self.rng = np.random.default_rng(seed)
        self.t0 = self.made_to = 0

    def start(self, level: LoadLevel, t0_ns: int, share: int, index: int, count: int) -> None:
        self.t0 = self.made_to = t0_ns

    def _until(self, end_ns: int) -> Samples:
        cut = self.t0 + int(self.slow_at_s * 1e9)
        parts = []
        for a, b, f in ((self.made_to, min(end_ns, cut), 1.0), (max(self.made_to, cut), end_ns, self.slow)):
            if b > a:
                n = int((b - a) / 1e9 * self.rate / f)
                done = np.sort(self.rng.integers(a, b, size=n)).astype(np.int64)
                lat = (self.latency_us * f * self.rng.lognormal(0.0, 0.1, size=n) * 1e3).astype(np.int64)
                parts.append((done - lat, done))
        self.made_to = max(self.made_to, end_ns)
        sent = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
        done = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
        return Samples(np.full(len(sent), -1, np.int64), sent, done, np.full(len(sent), STATUS_OK, np.int32))

    def drain(self) -> Samples:
        return self._until(perf_counter_ns())

    def stop(self, drain_timeout_s: float = 30.0) -> Samples:
        return self._until(perf_counter_ns())

    def close(self) -> None:
        pass


class Handle:
    """An in-process stand-in for a Ray actor handle: handle.method.remote(*args) runs the method."""

    def __init__(self, worker: LoadWorker) -> None:
        self._worker = worker

    def __getattr__(self, name: str) -> Any:
        return SimpleNamespace(remote=getattr(self._worker, name))


class NoRay(Exception):
    pass


RAY = SimpleNamespace(
    get=lambda ref, timeout=None: ref,
    exceptions=SimpleNamespace(RayActorError=NoRay, GetTimeoutError=NoRay, RayTaskError=NoRay),
)


def _measure(monkeypatch: pytest.MonkeyPatch, slow: float, slow_at_s: float, **spec_kw: Any):
    engines = iter(SyntheticEngine(2000.0, 1000.0, slow, slow_at_s, seed) for seed in range(2))
    monkeypatch.setattr(_worker, "make_engine", lambda cfg: next(engines))
    units = [Unit(server=0, cfg=None, index=i, count=2, worker=i) for i in range(2)]  # type: ignore[arg-type]  # the engine is a stand-in
    workers = [Placed(index=i, handle=Handle(LoadWorker(i, [units[i]])), units=[units[i]], unit_ids=[i])
               for i in range(2)]  # fmt: skip
    level = LoadLevel("concurrency", 2)
    kw = {"measurement_interval_ms": WINDOW_MS, "warmup_s": 0.0, "tail_percentiles": (), "max_trials": 30, **spec_kw}
    spec = ProfileSpec(model="m", levels=(level,), **kw)  # type: ignore[arg-type]  # test kwargs
    result, died = _run._measure_level(
        RAY, [StandInServer(keeps_stats=False)], workers, units, spec, level, ["m"], None
    )
    assert not died
    return result


def test_a_distributed_level_whose_windows_shift_ends_early_with_the_drift(monkeypatch):
    monkeypatch.setattr(_stopping, "FUTILITY_FACTOR", math.inf)  # the drift alone may end it
    # half the throughput, twice the latency from window 5 on; +-0.2% is out of reach and there is no
    # time budget: without the drift rule the level would run its 30 windows
    r = _measure(monkeypatch, 2.0, 4.5 * WINDOW_MS / 1e3, stability_percentage=0.2, level_budget_s=0.0)
    assert not r.stable and r.drift is not None, r.note
    # the local loop's rule on the windows the coordinator stopped with. Which of its two readings
    # that is (a shift, or a fitted trend whose ends outsize a mid-series step) depends on how many
    # windows it has by its look, which a busy machine delays: the rule's own tests hold the kinds
    # (tests/unit/measure/test_stopping_rule.py); this one holds that the coordinator applies it.
    spec = ProfileSpec(model="m", levels=(LoadLevel("concurrency", 2),), stability_percentage=0.2)
    tput_rel, lat_rel = _stopping.target_rel(spec)
    assert r.drift == window_drift(r.windows, {"throughput": tput_rel, "mean": lat_rel}), r.note
    assert len(r.windows) < 30
    assert r.drift.after / r.drift.before == pytest.approx(0.5 if r.drift.metric == "throughput" else 2.0, rel=0.3)
    assert r.note.startswith("ended early, the windows drifted: ") and "precision reached" in r.note


def test_a_steady_distributed_level_out_of_reach_ends_at_window_5_saying_so(monkeypatch):
    r = _measure(monkeypatch, 1.0, 0.0, stability_percentage=0.05)
    assert not r.stable and r.drift is None and len(r.windows) == 5, r.note
    assert r.note.startswith("ended early: the precision asked would take about ")
    assert "past the level's budget of 10" in r.note


def test_a_steady_precise_distributed_level_ends_stable(monkeypatch):
    r = _measure(monkeypatch, 1.0, 0.0, stability_percentage=20.0)
    assert r.stable and r.drift is None and 3 <= len(r.windows) < 10 and "ended early" not in r.note
