"""What a tune run leaves behind: trials.csv, tune.json (TuneRecord), best/config.pbtxt,
best.diff, and the --apply step. Everything is rebuilt from the study, so a shared study's
outputs include every worker's trials."""

from __future__ import annotations

import difflib
import json
import shutil
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from perfkit.records import TrialRecord, TuneRecord, to_dict
from perfkit.server.modelconfig import write_bytes_atomic
from perfkit.tuner import _trial_state
from perfkit.tuner._space import param_order

_STATE: dict[TrialState, Literal["complete", "pruned", "failed", "running"]] = {
    TrialState.COMPLETE: "complete",
    TrialState.PRUNED: "pruned",
    TrialState.FAIL: "failed",
    TrialState.RUNNING: "running",
}


def trial_record(t: FrozenTrial) -> TrialRecord:
    """A study trial as perfkit's TrialRecord (from the user attributes the tuner set)."""
    st = _trial_state.read(t)
    metrics = {k: float(v) for k, v in st.metrics.items() if isinstance(v, (int, float))}
    if st.duplicate_of is not None:
        metrics["duplicate_of"] = float(st.duplicate_of)  # answered from that trial, not measured again
    if st.predicted_rps is not None:
        metrics["predicted_rps"] = float(st.predicted_rps)  # --search predict: what the simulator said
    start, end = t.datetime_start, t.datetime_complete
    duration = float(st.duration_s or ((end - start).total_seconds() if start and end else 0.0))
    return TrialRecord(
        number=t.number,
        state=_STATE.get(t.state, "running"),
        params=st.params or dict(t.params),
        load=st.load,
        throughput_infer_per_s=st.throughput_infer_per_s,
        latency_us=st.latency_us,
        feasible=st.feasible,
        fail_reason=st.fail_reason,
        config_pbtxt_sha256=st.config_pbtxt_sha256,
        served_config_sha256=st.served_config_sha256,
        duration_s=duration,
        is_original=st.is_original,
        metrics=metrics,
    )


def study_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The trials worth reporting: every trial that started (not queued ones)."""
    return [t for t in study.get_trials(deepcopy=False) if t.state != TrialState.WAITING]


def trials_frame(records: Sequence[TrialRecord], percentile: float, budget_metric: str = "latency") -> pd.DataFrame:
    """One row per trial, columns named for its parameters and metrics; the budget's column for
    what it holds (p99_latency_ms, or p99_ttft_ms / p99_itl_ms under a stream budget)."""
    param_keys = [k for k in param_order() if any(k in r.params for r in records)]
    param_keys += sorted({k for r in records for k in r.params} - set(param_keys))
    metric_keys = sorted({k for r in records for k in r.metrics})
    rows = []
    pct = f"{percentile:g}".replace(".", "")
    for r in records:
        row: dict[str, Any] = {"trial": r.number, "state": r.state, "original": r.is_original}
        for k in param_keys:
            row[k] = r.params.get(k)
        row["feasible"] = r.feasible
        row["concurrency"] = int(r.load.value) if r.load and r.load.mode == "concurrency" else None
        if any(x.load is not None and x.load.mode == "request_rate" for x in records):
            row["rate_rps"] = r.load.value if r.load and r.load.mode == "request_rate" else None
        row["throughput_infer_per_s"] = r.throughput_infer_per_s
        c = r.confirmation
        if any(x.confirmation is not None for x in records):
            row["confirmed"] = None if c is None else ("held" if c.held else "DEMOTED")
            row["confirmed_infer_per_s"] = c.throughput_infer_per_s if c is not None and c.held else None
            row["confirmed_ci_low"] = c.throughput_low if c is not None and c.held else None
            row["confirmed_ci_high"] = c.throughput_high if c is not None and c.held else None
            row["confirmed_load"] = c.load.label if c is not None else None
            row["confirmed_worst_ms"] = c.latency_us / 1e3 if c is not None and c.repeats else None
            row["confirmation_note"] = c.note if c is not None else None
        row[f"p{pct}_{budget_metric}_ms"] = None if r.latency_us is None else r.latency_us / 1e3
        for k in metric_keys:
            row[k] = r.metrics.get(k)
        row["duration_s"] = r.duration_s
        row["config_pbtxt_sha256"] = r.config_pbtxt_sha256
        row["fail_reason"] = r.fail_reason
        rows.append(row)
    return pd.DataFrame(rows)


def unified_diff(original: str, best: str, model: str, best_number: int) -> str:
    """best.diff: the recommendation against the original config.pbtxt as the user wrote it
    (candidates are edits of that file, so the diff shows only the real changes)."""
    return "".join(
        difflib.unified_diff(
            original.splitlines(keepends=True),
            best.splitlines(keepends=True),
            fromfile=f"{model}/config.pbtxt (original)",
            tofile=f"{model}/config.pbtxt (trial {best_number})",
        )
    )


def write_outputs(out_dir: Path, record: TuneRecord, *, trial_configs: dict[int, str]) -> dict[str, Path]:
    """Write tune.json, trials.csv, best/config.pbtxt and best.diff; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    tune_json = out_dir / "tune.json"
    write_bytes_atomic(tune_json, json.dumps(to_dict(record), indent=1).encode())
    paths["tune.json"] = tune_json
    csv = out_dir / "trials.csv"
    trials_frame(record.trials, record.budget.percentile, record.budget.metric).to_csv(csv, index=False)
    paths["trials.csv"] = csv
    if record.best_config is not None and record.best_trial is not None:
        best_dir = out_dir / "best"
        best_dir.mkdir(exist_ok=True)
        write_bytes_atomic(best_dir / "config.pbtxt", record.best_config.encode())
        paths["best"] = best_dir / "config.pbtxt"
        diff = unified_diff(record.original_config, record.best_config, record.model, record.best_trial)
        write_bytes_atomic(out_dir / "best.diff", diff.encode())
        paths["best.diff"] = out_dir / "best.diff"
    configs = out_dir / "configs"
    for number, text in trial_configs.items():
        configs.mkdir(exist_ok=True)
        target = configs / f"trial-{number:03d}.pbtxt"
        if not target.exists():
            write_bytes_atomic(target, text.encode())
    return paths


def apply_best(config_path: Path, best_text: str) -> Path | None:
    """Write the recommendation into the repository, keeping a backup of what was there
    (config.pbtxt.bak-<timestamp>); returns the backup path, or None when nothing changed."""
    current = config_path.read_bytes()
    if current == best_text.encode():
        return None
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    backup = config_path.with_name(f"{config_path.name}.bak-{stamp}")
    shutil.copy2(config_path, backup)
    write_bytes_atomic(config_path, best_text.encode())
    return backup
