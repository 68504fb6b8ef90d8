"""History stage: each metric's series over the runs in the results store, and its change points.

Layer "history" (above the gate, below the report): reads run records from the store only,
like gates and reports, so a history can be re-made and tested without a server. Series
carry the gate's own per-run intervals (window noise and the job-to-job noise it allows for);
change points come from E-divisive means (Matteson & James 2014, as in MongoDB's CI and
Hunter/Otava), kept only when larger than the metric's job-to-job noise.
"""

from __future__ import annotations

from perfkit.history._changes import ChangeOptions, ChangePoint, detect, detect_all
from perfkit.history._edivisive import Split, e_divisive
from perfkit.history._series import (
    DEFAULT_HISTORY_METRICS,
    HISTORY_METRICS,
    HistoryFilter,
    Point,
    Series,
    read_store,
    series_of,
)

__all__ = [
    "DEFAULT_HISTORY_METRICS",
    "HISTORY_METRICS",
    "ChangeOptions",
    "ChangePoint",
    "HistoryFilter",
    "Point",
    "Series",
    "Split",
    "detect",
    "detect_all",
    "e_divisive",
    "read_store",
    "series_of",
]
