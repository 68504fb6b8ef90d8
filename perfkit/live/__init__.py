"""Live metrics: perfkit's client-side view of a run as Prometheus series, served while it runs.

Layer "live" (beside history, above measure and the tuner): a subscriber of the typed progress
events (measure's LevelStarted/WindowMeasured/LevelDone, the tuner's events, finished run records);
the load generator knows nothing of it.
"""

from __future__ import annotations

from perfkit.live._exporter import LATENCY_BUCKETS_S, LiveMetrics

__all__ = ["LATENCY_BUCKETS_S", "LiveMetrics"]
