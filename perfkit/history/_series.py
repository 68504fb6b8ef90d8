"""History series read from the results store: per model, load level and metric, one point per run."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist

import numpy as np

from perfkit.gate import DEFAULT_JOB_NOISE_PCT, level_key, level_label
from perfkit.gate.stats import t_quantile
from perfkit.records import PERCENTILE_OF_METRIC, LevelResult, RunRecord
from perfkit.store import Store, StoreEntry

HISTORY_METRICS = ("throughput", *PERCENTILE_OF_METRIC)  # throughput, p50, p90, p95, p99, p999
DEFAULT_HISTORY_METRICS = ("throughput", "p50", "p99")
HIGHER_IS_BETTER = ("throughput",)
UNIT_OF = {"throughput": "infer/s", **dict.fromkeys(PERCENTILE_OF_METRIC, "ms")}


@dataclass(frozen=True)
class Point:
    """One run's figure of a metric at a level, with its ~95% interval (windows and job noise)."""

    run_id: str
    created_utc: str
    commit: str
    machine: str
    value: float  # infer/s for throughput, ms for latency
    low: float
    high: float
    config_sha256: str = ""


@dataclass(frozen=True)
class Series:
    """A metric's history at one load level of one model, oldest run first."""

    model: str
    level: str
    metric: str
    unit: str
    points: tuple[Point, ...]
    job_noise_pct: float

    @property
    def higher_is_better(self) -> bool:
        return self.metric in HIGHER_IS_BETTER

    @property
    def values(self) -> np.ndarray:
        return np.array([p.value for p in self.points], dtype=float)


@dataclass(frozen=True)
class HistoryFilter:
    """Which runs a history reads: models, a machine key (or a prefix of it: the hostname), the branch
    saved from, the sweep file a `perfkit run` measured them with (its name or path), the last N runs."""

    models: tuple[str, ...] = ()
    machine: str | None = None
    branch: str | None = None
    sweep: str | None = None
    last: int | None = None
    metrics: tuple[str, ...] = DEFAULT_HISTORY_METRICS
    job_noise_pct: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_JOB_NOISE_PCT))


def _figure(level: LevelResult, metric: str) -> tuple[float, list[float]]:
    """A level's figure of a metric and its per-window values (the gate's evidence), in the history's unit."""
    if metric == "throughput":
        return level.throughput_infer_per_s, [w.infer_per_s for w in level.windows]
    pct = PERCENTILE_OF_METRIC[metric]
    per_window = [w.percentile_us(pct) for w in level.windows if w.completed > 0]
    windows = [v / 1e3 for v in per_window if v is not None]
    return level.latency().percentile_us(pct) / 1e3, windows


def interval(value: float, windows: Sequence[float], job_noise_pct: float, level: float = 0.95) -> tuple[float, float]:
    """A run's ~`level` interval of a figure: the window means' Student-t interval combined with
    one job factor of sd `job_noise_pct` (the noise between CI jobs the gate allows for)."""
    z = NormalDist().inv_cdf((1 + level) / 2)
    rel_windows = 0.0
    arr = np.asarray(windows, dtype=float)
    if arr.size >= 2 and arr.mean() > 0:
        rel_windows = t_quantile((1 + level) / 2, arr.size - 1) * float(arr.std(ddof=1)) / math.sqrt(arr.size)
        rel_windows /= float(arr.mean())
    rel = math.hypot(rel_windows, z * job_noise_pct / 100.0)
    return value * (1 - rel), value * (1 + rel)


def series_of(runs: Iterable[tuple[StoreEntry, RunRecord]], flt: HistoryFilter | None = None) -> list[Series]:
    """Every (model, level, metric) series of the runs, each oldest first; runs that failed are left out."""
    flt = flt or HistoryFilter()
    ordered = sorted(runs, key=lambda er: (er[1].created_utc, er[0].saved_utc))
    if flt.last is not None:
        by_model: dict[str, list[tuple[StoreEntry, RunRecord]]] = {}
        for er in ordered:
            by_model.setdefault(er[0].model, []).append(er)
        ordered = sorted(
            (er for group in by_model.values() for er in group[-flt.last :]),
            key=lambda er: (er[1].created_utc, er[0].saved_utc),
        )
    points: dict[tuple[str, tuple[object, ...], str], list[Point]] = {}
    labels: dict[tuple[object, ...], str] = {}
    for entry, record in ordered:
        if record.status != "ok":
            continue
        for lv in record.levels:
            key = level_key(lv)
            labels[key] = level_label(lv)
            for metric in flt.metrics:
                value, windows = _figure(lv, metric)
                if not math.isfinite(value) or value <= 0:
                    continue
                noise = flt.job_noise_pct.get(metric, 0.0)
                low, high = interval(value, windows, noise)
                points.setdefault((entry.model, key, metric), []).append(
                    Point(
                        entry.id, record.created_utc, entry.commit, entry.machine, value, low, high,
                        record.model.served_config_sha256,
                    )
                )  # fmt: skip
    order = {m: i for i, m in enumerate(HISTORY_METRICS)}
    return [
        Series(model, labels[key], metric, UNIT_OF[metric], tuple(pts), flt.job_noise_pct.get(metric, 0.0))
        for (model, key, metric), pts in sorted(points.items(), key=lambda kv: (kv[0][0], kv[0][1], order[kv[0][2]]))
    ]


def read_store(store: Store, flt: HistoryFilter | None = None) -> list[tuple[StoreEntry, RunRecord]]:
    """The store's runs that pass the filter (model, machine), each with its entry; one per run id."""
    flt = flt or HistoryFilter()
    seen: set[str] = set()
    out = []
    for entry in store.list():
        if entry.id in seen:
            continue
        if flt.models and entry.model not in flt.models:
            continue
        if flt.machine and not entry.machine.startswith(flt.machine):
            continue
        if flt.branch is not None and entry.branch != flt.branch:
            continue
        record = store.get(entry.id)
        if flt.sweep is not None and sweep_of(record) not in (flt.sweep, Path(flt.sweep).stem):
            continue
        seen.add(entry.id)
        out.append((entry, record))
    return out


def sweep_of(record: RunRecord) -> str | None:
    """The name of the sweep file a run was measured by (`perfkit run sweeps/NAME.toml`), else None."""
    command = record.command
    if len(command) >= 3 and Path(command[0]).name == "perfkit" and command[1] == "run":
        return Path(command[2]).stem
    return None
