"""The tune record of a search (rebuilt from the study, so a shared study's record holds
every worker's trials) and its closing summary."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import optuna

from perfkit import __version__
from perfkit.errors import ServerError
from perfkit.measure import machine_info
from perfkit.records import TuneRecord
from perfkit.tuner import _outputs, _study, _trial_state
from perfkit.tuner._claim_stats import describe
from perfkit.tuner._confirm import confirmations
from perfkit.tuner._events import Summary, fmt_params
from perfkit.tuner._importance import summary_line as importance_line
from perfkit.tuner._importance import tune_importances
from perfkit.tuner._trial import TrialRunner


def build_record(
    t: TrialRunner, study: optuna.Study, status: Literal["ok", "failed", "interrupted"], error: str | None
) -> TuneRecord:
    """The TuneRecord of the search so far."""
    frozen = _outputs.study_trials(study)
    cal = t.search.calibration  # the predicted search's: importances over its predictions of the whole space
    imp, over = tune_importances(study, t.s.objective, t.search.space_predictions(),
                                 cal.stated_error_rel if cal is not None else None)  # fmt: skip
    confirmed = confirmations(study)
    trials = tuple(
        dataclasses.replace(r, confirmation=confirmed.get(r.number))
        for r in (_outputs.trial_record(ft) for ft in frozen)
    )
    configs = {ft.number: _trial_state.read(ft).config_pbtxt for ft in frozen}
    rec = TuneRecord(
        perfkit_version=__version__,
        created_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        command=t.s.command,
        machine=machine_info(),
        server=_server_info(t),
        model=t.model,
        budget=t.s.budget,
        mix=t.s.mix,
        objective=t.s.objective,
        original_config=t.subject.original_text,
        route=getattr(t.subject.route, "name", "file"),
        original_from=getattr(t.subject, "original_from", "repository"),
        best_config=None,
        best_trial=None,
        trials=trials,
        importances=imp.median,
        importance_low=imp.low,
        importance_high=imp.high,
        importance_over=over,
        status=status,
        error=error,
        calibration=t.search.calibration,
        search=t.search.kind,
        search_reason=t.search.reason,
    )
    best = rec.best()
    return dataclasses.replace(
        rec,
        best_config=configs.get(best.number) if best else None,
        best_trial=best.number if best else None,
        pareto_trials=tuple(r.number for r in rec.pareto()),  # informative in both modes: throughput vs latency
    )


def _server_info(t: TrialRunner) -> dict[str, Any]:
    info: dict[str, Any] = {"url": t.server.endpoints.http_url, "mode": t.server.mode}
    try:
        info["version"] = t.server.version()
    except ServerError:
        info["version"] = "unknown (unreachable)"
    info["study"] = {"storage": _study._redact(t.storage_url), "name": t.study_name}
    info["space"] = [d.describe() for d in t.space.dimensions]
    return info


def _unconfirmed_why(rec: TuneRecord) -> str:
    """Why the recommendation stands on its search's one reading: a figure no re-measurement held is
    told as such, so that it is not read as a claim."""
    if any(r.confirmation is not None and not r.confirmation.held for r in rec.trials):
        return (
            "not confirmed: --max-time ended the confirmations before it and every config confirmed was demoted;"
            " the search's one reading, no interval"
        )
    return "not confirmed (no confirmation ran before the tune ended): the search's one reading, no interval"


def summary(rec: TuneRecord, out_dir: Path) -> Summary:
    """The closing lines: counts, the best trial against the original, front, importances."""
    lines: list[str] = []
    done = [r for r in rec.trials if r.state != "running"]
    counts = {s: sum(1 for r in done if r.state == s) for s in ("complete", "pruned", "failed")}
    rejected = sum(1 for r in done if r.fail_reason.startswith("rejected:"))
    rej = f" ({rejected} rejected before loading)" if rejected else ""
    lines.append(
        f"{len(done)} trials: {counts['complete']} complete, {counts['pruned']} pruned, {counts['failed']} failed"
        f"{rej} (status {rec.status})"
    )
    best = rec.trial(rec.best_trial)
    orig = rec.original()
    if best is None:
        lines.append("no config met the budget: nothing to recommend")
    else:
        claimed = best.claimed_throughput or 0.0
        gain = ""
        if orig is not None and orig.feasible and orig.throughput_infer_per_s:
            base = orig.claimed_throughput or orig.throughput_infer_per_s
            pct = 100.0 * (claimed / base - 1)
            gain = f", {pct:+.0f}% vs the original ({base:.1f} infer/s)"
            if orig.rate_is_lower_bound:
                gain = f", at most {pct:+.0f}% vs the original (at least {base:.1f} infer/s: held where predicted)"
        elif orig is not None:
            gain = ", the original did not meet the budget"
        tokens_per_s = best.metrics.get("output_tokens_per_s")
        tokens = f" ({tokens_per_s:.1f} output tokens/s)" if tokens_per_s is not None else ""
        stat = rec.budget.label
        c = best.confirmation
        if c is not None and not c.held:
            # every confirmation failed: your own config stands (Objective.best), its figure unconfirmed
            where = f" at {best.load.label}" if best.load is not None else ""
            lines.append(
                f"keep your config (trial {best.number}): no confirmation held; the search read "
                f"{best.throughput_infer_per_s:.1f} infer/s{where}, {stat} {(best.latency_us or 0) / 1e3:.2f} ms, "
                f"once, and its own confirmation did not hold it ({c.note or 'not confirmed'})"
            )
        elif c is not None:
            # The headline is the confirmed figure; the search's single reading follows it.
            told = describe(c, rec.budget.percentile, rec.budget.metric)
            lines.append(f"best: trial {best.number} {fmt_params(best.params)}: {told}{tokens}{gain}")
            where = f" at {best.load.label}" if best.load is not None else ""
            lines.append(
                f"  (the search read {best.throughput_infer_per_s:.1f} infer/s{where}, {stat} "
                f"{(best.latency_us or 0) / 1e3:.2f} ms, once)"
            )
        else:
            where = f" at {best.load.label}" if best.load is not None else ""
            lines.append(
                f"best: trial {best.number} {fmt_params(best.params)}: {claimed:.1f} infer/s{tokens}{where}, "
                f"{stat} {(best.latency_us or 0) / 1e3:.2f} ms{gain} ({_unconfirmed_why(rec)})"
            )
        demoted = [r.number for r in rec.trials if r.confirmation is not None and not r.confirmation.held]
        if demoted:
            lines.append(f"demoted (confirmation failed): trial(s) {', '.join(map(str, demoted))}")
        if rec.pareto_trials:
            lines.append(f"pareto front: trials {', '.join(map(str, rec.pareto_trials))}")
    if (said := importance_line(rec)) is not None:
        lines.append(said)
    lines.append(f"results in {out_dir}")
    return Summary(tuple(lines), out_dir)
