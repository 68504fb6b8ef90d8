"""Progress events of a measurement: typed, so a caller (the CLI, a tuner, a notebook) decides what to show."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from perfkit.records import LevelResult, LoadLevel, Precision


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


@dataclass(frozen=True)
class LevelDone:
    """A level is measured (stable or not); its result is final."""

    level: LoadLevel
    result: LevelResult


ProgressEvent = LevelStarted | WindowMeasured | LevelDone
Progress = Callable[[ProgressEvent], None]
