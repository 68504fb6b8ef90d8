"""Progress events of a measurement: typed, so a caller (the CLI, a tuner, a notebook) decides what to show."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from perfkit.records import LevelCounts, LevelResult, LoadLevel, Precision


@dataclass(frozen=True)
class LevelStarted:
    """A load level starts (warm-up included)."""

    level: LoadLevel


@dataclass(frozen=True)
class WindowMeasured:
    """One more measurement window of the level is in, with the precision reached so far."""

    level: LoadLevel
    window: int  # 1-based
    infer_per_s: float  # this window's throughput
    p99_us: float  # the level's p99 so far
    precision: Precision
    # What a live exporter needs, computed only when called, during the callback (this runs between
    # windows, sharing the GIL with the sender thread): the level's exact counts so far (offered,
    # errors by kind, late, dropped: the recorder's own rule, so they end equal to the level's result)
    # and this window's latencies in us (service, and corrected or None), numpy arrays.
    level_counts: Callable[[], LevelCounts] | None = field(default=None, repr=False, compare=False)
    window_latencies_us: Callable[[], tuple[Any, Any]] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class LevelDone:
    """A level is measured (stable or not); its result is final."""

    level: LoadLevel
    result: LevelResult


@dataclass(frozen=True)
class PlacedWorker:
    """Where one distributed load worker runs."""

    worker: int
    host: str
    pid: int
    node_id: str  # the Ray node id ("" outside Ray)


@dataclass(frozen=True)
class WorkersPlaced:
    """Distributed runs: the load workers are placed, before the first level."""

    workers: tuple[PlacedWorker, ...]


ProgressEvent = WorkersPlaced | LevelStarted | WindowMeasured | LevelDone
Progress = Callable[[ProgressEvent], None]
