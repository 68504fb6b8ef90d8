"""The search loop: open (or join) the study, ask a candidate, run the trial, tell, until a
stopping rule holds; then the record, the outputs, and --apply. The user's config is
guarded throughout (ConfigGuard puts it back on every ending)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Literal

import optuna

from perfkit.errors import PerfkitError, UsageError
from perfkit.records import TuneRecord
from perfkit.server.base import Server
from perfkit.server.modelconfig import ConfigGuard, apply_config, config_pbtxt_sha256
from perfkit.tuner import _outputs, _predict, _study
from perfkit.tuner._confirm import ConfirmSettings, confirm_picks
from perfkit.tuner._events import Applied, OnEvent, SearchStarted, SearchStopped, StudyOpened, TuneEvent
from perfkit.tuner._loadplan import Measure
from perfkit.tuner._record import build_record, summary
from perfkit.tuner._repo_guard import refuse_if_breaks
from perfkit.tuner._seed import batching_seed
from perfkit.tuner._settings import TuneResult, TuneSettings
from perfkit.tuner._space import TuneSpace, grid_points
from perfkit.tuner._trial import TrialRunner

log = logging.getLogger(__name__)


def search(t: TrialRunner, study: optuna.Study, stop: Callable[[optuna.Study], str | None] | None = None) -> None:
    """The search, then the confirmation of its pick: trials until a stop rule says enough, then
    the best and its rivals re-measured before anything is claimed (one judgment for a model
    and for a pipeline). The candidate last measured may be left serving: the caller's guard puts
    the original back. `stop` is one more stop rule (the predicted search's). Raises as
    run_trial and confirm_picks do."""
    t.capture_reference()
    while (why := (stop and stop(study)) or t.should_stop(study)) is None:
        _study.fail_stale(study)
        t.run_trial(study, study.ask())
    t.emit(SearchStopped(why))
    confirm_picks(t, study, ConfirmSettings(repeats=t.s.confirm_repeats, min_repeat_s=t.s.confirm_time_s))


def run_search(
    t: TrialRunner,
    guard: AbstractContextManager[Any],
    *,
    seed: Callable[[optuna.Study], None] | None = None,
    more_outputs: Callable[[TuneRecord], tuple[dict[str, Path], Sequence[TuneEvent]]] | None = None,
    stop: Callable[[optuna.Study], str | None] | None = None,
) -> tuple[TuneRecord, dict[str, Path]]:
    """One tune from its announcement to its outputs, for a model and for a pipeline: the study
    opened (`seed` may queue more points), the search run inside `guard`, and on every ending the
    record and its outputs written (`more_outputs` adds files, and events told after the summary).
    Raises UsageError for an empty space, and as search does (after the outputs are written)."""
    s = t.s
    t.emit(SearchStarted(t.title, t.space.backend, s.percentile, s.latency_budget_ms,
                         tuple(d.describe() for d in t.space.dimensions), tuple(t.space.notes),
                         s.budget_metric, t.judge.load_line(default=s.load is None)))  # fmt: skip
    if not t.space.dimensions:
        raise UsageError(f"nothing to search for {t.model!r}", hint="widen the space with the search-space flags")
    study = open_study(t)
    if seed is not None:
        seed(study)
    t.emit(StudyOpened(t.study_name, _study._redact(t.storage_url), len(study.trials)))
    status: Literal["ok", "failed", "interrupted"] = "ok"
    error: str | None = None
    with guard:
        try:
            search(t, study, stop)
        except KeyboardInterrupt:
            status, error = "interrupted", "interrupted by the user"
            raise
        except PerfkitError as err:
            status, error = "failed", err.one_line()
            raise
        finally:
            rec = build_record(t, study, status, error)
            paths = _outputs.write_outputs(t.out_dir, rec, trial_configs=t.trial_configs)
            after: Sequence[TuneEvent] = ()
            if more_outputs is not None:
                more, after = more_outputs(rec)
                paths.update(more)
            t.emit(summary(rec, t.out_dir))
            for event in after:
                t.emit(event)
    return rec, paths


def open_study(t: TrialRunner) -> optuna.Study:
    """Create, join or resume the study; check it was started from this config and budget.
    Raises UsageError."""
    nothing_to_resume = UsageError(
        f"--resume: no study {t.study_name!r} in {_study._redact(t.storage_url)}",
        hint="pass the -o DIR (or --storage and --study-name) of the run to continue",
    )
    if t.s.resume and t.s.storage is None and not (t.out_dir / "study.db").is_file():
        raise nothing_to_resume
    t.out_dir.mkdir(parents=True, exist_ok=True)
    storage = _study.make_storage(t.storage_url)
    sampler = _study.make_sampler(t.s.objective, t.s.seed, t.s.trials, kind=t.s.sampler, grid=grid_points(t.space))
    t.sampler = sampler
    join = t.s.resume or t.s.study_name is not None
    study, created = _study.open_study(
        storage, t.study_name, objective=t.s.objective, sampler=sampler, join=join,
        storage_label=_study._redact(t.storage_url),
    )  # fmt: skip
    if created and t.s.resume:
        optuna.delete_study(study_name=t.study_name, storage=storage)
        raise nothing_to_resume
    sha = config_pbtxt_sha256(t.original_cfg)
    known = study.user_attrs.get("original_sha256")
    if known is None:
        study.set_user_attr("original_sha256", sha)
        study.set_user_attr("model", t.model)
        study.set_user_attr("latency_budget_ms", t.s.latency_budget_ms)
        study.set_user_attr("percentile", t.s.percentile)
        study.set_user_attr("budget_metric", t.s.budget_metric)
    elif known != sha:
        raise UsageError(
            f"{t.config_path} differs from the config study {t.study_name!r} started from",
            hint="restore that config, or start a new study (another -o DIR or --study-name)",
        )
    elif (
        study.user_attrs.get("latency_budget_ms") != t.s.latency_budget_ms
        or study.user_attrs.get("percentile") != t.s.percentile
        or study.user_attrs.get("budget_metric", "latency") != t.s.budget_metric
    ):
        metric = study.user_attrs.get("budget_metric", "latency")
        prefix = "" if metric == "latency" else f"{metric}:"
        raise UsageError(
            f"study {t.study_name!r} was run with --latency-budget "
            f"{prefix}{study.user_attrs.get('latency_budget_ms')}ms --percentile {study.user_attrs.get('percentile')}",
            hint="resume with the same budget, or start a new study",
        )
    _study.fail_stale(study)
    if created or (t.s.resume and not study.get_trials(deepcopy=False)):
        original = t.original_fixed_params()
        study.enqueue_trial(original, user_attrs={_study.A_ORIGINAL: True}, skip_if_exists=True)
        # The sampler's own draws follow; a grid or random search walks its points unseeded.
        # (--search predict queues its predicted configs instead.)
        seed = batching_seed(t.space, original) if t.s.sampler == "auto" and t.s.search == "measure" else None
        if seed is not None and (t.s.trials is None or t.s.trials > 1):
            study.enqueue_trial(seed, skip_if_exists=True)
    return study


def _ignore(event: TuneEvent) -> None:
    """Default event sink: events are logged by the runner already."""


def tune(
    server: Server,
    settings: TuneSettings,
    space: TuneSpace,
    *,
    model_repository: Path,
    measure: Measure | None = None,
    on_event: OnEvent | None = None,
    echo: Callable[[str], None] | None = None,
) -> TuneResult:
    """Search configs of settings.model for the most throughput within the latency budget.

    Writes each candidate into model_repository/<model>/config.pbtxt (an edit of the user's
    file: comments and layout kept), reloads it on the server (explicit model control),
    verifies what the server applied, checks its outputs against the original's, measures,
    and always puts the original back (even on Ctrl-C). Progress goes to on_event as typed
    events (and to logging). Outputs go to settings.output_dir. Raises UsageError/InputError
    for bad settings or config, ServerError when the server dies or the original no longer
    loads, KeyboardInterrupt after cleanup and partial outputs. `echo`, a shorthand for
    on_event, receives each event's line().
    """
    sink = on_event or _ignore

    def emit_to(event: TuneEvent) -> None:
        sink(event)
        if echo is not None:
            echo(event.line())

    t = TrialRunner(server, settings, space, model_repository, measure, emit_to)
    if settings.search == "predict":
        rec, result_paths = _predict.run_predicted(t, run_search)
    else:
        rec, result_paths = run_search(t, ConfigGuard(t.config_path, server, t.model))
    backup = None
    if settings.apply and rec.best_config is not None:
        refuse_if_breaks(t.model, rec.best_config, model_repository)  # never leave an ensemble unloadable
        backup = _outputs.apply_best(t.config_path, rec.best_config)
        if backup is not None:
            apply_config(server, t.model, t.config_path, rec.best_config)  # same bytes: reload and verify
        t.emit(Applied(rec.best_trial, t.config_path, backup))
    return TuneResult(record=rec, output_dir=t.out_dir, paths=result_paths, applied_backup=backup)
