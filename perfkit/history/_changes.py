"""Change points of history series: where, how large, how significant, and whether worse."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from perfkit.history._edivisive import e_divisive
from perfkit.history._series import Series

DEFAULT_ALPHA = 0.01
DEFAULT_MIN_RUNS = 3  # fewest runs on each side of a change


@dataclass(frozen=True)
class ChangeOptions:
    """How changes are detected: the permutation test's level, the fewest runs a side, the smallest size.

    min_change_pct None: the metric's job-to-job noise (one job's sd): a shift smaller than what
    one CI job's neighbours move a figure by is not reported, however significant.
    """

    alpha: float = DEFAULT_ALPHA
    min_runs: int = DEFAULT_MIN_RUNS
    permutations: int = 199
    min_change_pct: float | None = None
    seed: int = 0


@dataclass(frozen=True)
class ChangePoint:
    """One change in a series: the first run after it, the means before and after, and the verdict."""

    model: str
    level: str
    metric: str
    index: int  # of the first point after the change
    run_id: str
    created_utc: str
    commit: str
    before: float
    after: float
    change_pct: float  # (after - before) / before, in percent
    p_value: float
    direction: Literal["regression", "improvement"]

    def line(self) -> str:
        """The change as one line of `perfkit history` output."""
        commit = f" commit {self.commit[:10]}" if self.commit else ""
        return (
            f"{self.direction.upper()}: {self.model} {self.level} {self.metric} {self.change_pct:+.1f}% "
            f"({self.before:.4g} -> {self.after:.4g}) from run {self.run_id} ({self.created_utc}{commit}), "
            f"p={self.p_value:.3f}"
        )


def detect(series: Series, opts: ChangeOptions | None = None) -> list[ChangePoint]:
    """The change points of one series, oldest first; each compared with the segment before it."""
    opts = opts or ChangeOptions()
    values = series.values
    if len(values) < 2 * opts.min_runs:
        return []
    splits = e_divisive(
        values, alpha=opts.alpha, permutations=opts.permutations, min_size=opts.min_runs, seed=opts.seed
    )
    min_pct = series.job_noise_pct if opts.min_change_pct is None else opts.min_change_pct
    bounds = [0, *(s.index for s in splits), len(values)]
    out = []
    for i, split in enumerate(splits):
        # Each side's median over its whole segment: one outlying run does not move it.
        before = float(np.median(values[bounds[i] : bounds[i + 1]]))
        after = float(np.median(values[bounds[i + 1] : bounds[i + 2]]))
        if before <= 0:
            continue
        change_pct = (after - before) / before * 100.0
        if abs(change_pct) < min_pct:
            continue
        worse = change_pct < 0 if series.higher_is_better else change_pct > 0
        point = series.points[split.index]
        out.append(
            ChangePoint(
                series.model, series.level, series.metric, split.index, point.run_id, point.created_utc,
                point.commit, before, after, change_pct, split.p_value, "regression" if worse else "improvement",
            )
        )  # fmt: skip
    return out


def detect_all(series: Sequence[Series], opts: ChangeOptions | None = None) -> list[ChangePoint]:
    """The change points of every series, in series order."""
    return [c for s in series for c in detect(s, opts)]
