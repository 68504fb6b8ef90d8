"""HTML reports: one self-contained file per run that answers questions at a glance and holds every number.

Layer "report": reads records (perfkit.records); a comparison renders the comparison core's
results (perfkit.gate.compare_runs), so a report and the gate never disagree.
Figures are computed as data first (perfkit.report._figures, _tune, _compare), drawn second
(_draw: matplotlib -> inline SVG), and laid out in one jinja2 page (_page, _template).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfkit.capacity import CapacityPlan, PredictedPlan
from perfkit.errors import InputError
from perfkit.gate import GateOptions, GateResult
from perfkit.history import ChangePoint, Series
from perfkit.records import RunRecord, TuneRecord
from perfkit.report._history import history_page
from perfkit.report._inputs import load_inputs
from perfkit.report._other_pages import comparison_page, tune_page
from perfkit.report._page import write
from perfkit.report._plan_page import plan_page
from perfkit.report._profile_page import profile_page

# Where HTML reports go unless told otherwise: the top-level reports/ folder (its README says what lands there).
DEFAULT_REPORTS_DIR = Path("reports")

__all__ = [
    "DEFAULT_REPORTS_DIR",
    "load_inputs",
    "write_comparison_report",
    "write_history_report",
    "write_plan_report",
    "write_profile_report",
    "write_tune_report",
]


def write_plan_report(
    plan: CapacityPlan,
    path: Path | str,
    verification: dict[str, Any] | None = None,
    predicted: PredictedPlan | None = None,
) -> Path:
    """Write the capacity plan page (replicas, evidence, the fleet check if one ran, the plan from
    a predicted rate beside it if given); returns path.

    Raises InputError when path cannot be written.
    """
    return write(plan_page(plan, verification, predicted), path)


def write_profile_report(records: list[RunRecord], path: Path | str) -> Path:
    """Write the profile report of one or more runs to path; returns path.

    Raises InputError when records is empty, a histogram cannot be decoded, or path cannot be written.
    """
    if not records:
        raise InputError("a profile report needs at least one run record")
    return write(profile_page(list(records)), path)


def write_tune_report(tune: TuneRecord, path: Path | str, runs: list[RunRecord] | None = None) -> Path:
    """Write the tune report (recommendation, trials, Pareto front, importances, config diff); returns path.

    runs: the trial runs saved with the tune (runs/*.json), drawn as curves when given.
    Raises InputError when path cannot be written.
    """
    return write(tune_page(tune, list(runs or [])), path)


def write_comparison_report(
    baseline: list[RunRecord],
    current: list[RunRecord],
    path: Path | str,
    results: Sequence[GateResult] | None = None,
    options: GateOptions | None = None,
) -> Path:
    """Write the baseline-vs-current report; returns path.

    results: the gate's results when it already judged these runs; otherwise they are judged
    here by the same comparison core with `options` (the gate's defaults when None).
    Raises InputError when either side is empty, repeated runs cannot be pooled exactly, or
    path cannot be written.
    """
    if not baseline or not current:
        raise InputError("a comparison report needs at least one baseline and one current run record")
    return write(comparison_page(list(baseline), list(current), results, options), path)


def write_history_report(series: Sequence[Series], changes: Sequence[ChangePoint], path: Path | str) -> Path:
    """Write the history report (each series with its intervals and change points); returns path.

    Raises InputError when there is no series or path cannot be written.
    """
    if not series:
        raise InputError("a history report needs at least one series (no runs matched)")
    return write(history_page(series, changes), path)
