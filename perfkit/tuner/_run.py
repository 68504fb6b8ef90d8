"""The one search loop, over any subject: open (or join) the study, ask a candidate, run the
trial, tell, until a stopping rule holds; then the record, the outputs, and --apply. The user's
configs are guarded throughout (the route's guard puts them back on every ending)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import optuna
from optuna.trial import TrialState

from perfkit.errors import MeasurementError, PerfkitError, UsageError
from perfkit.records import TuneRecord
from perfkit.server.api_route import check_explicit_model_control
from perfkit.server.base import Server
from perfkit.server.modelconfig import config_pbtxt_sha256
from perfkit.tuner import _outputs, _study, _trial_state
from perfkit.tuner._confirm import ConfirmSettings, confirm_picks
from perfkit.tuner._events import OnEvent, SearchStarted, SearchStopped, StudyOpened, TuneEvent
from perfkit.tuner._find_load import Measure
from perfkit.tuner._record import build_record, summary
from perfkit.tuner._repo_guard import apply_all
from perfkit.tuner._route import ConfigRoute
from perfkit.tuner._route_api import ApiRoute
from perfkit.tuner._search import choose
from perfkit.tuner._seed import batching_seed
from perfkit.tuner._settings import TuneResult, TuneSettings
from perfkit.tuner._space import TuneSpace, grid_points
from perfkit.tuner._subject import open_subject
from perfkit.tuner._trial import TrialRunner
from perfkit.tuner._trial_load import trial_load_of

log = logging.getLogger(__name__)


def search(t: TrialRunner, study: optuna.Study) -> None:
    """The search, then the confirmation of its pick: trials until a stop rule says enough (the
    search strategy's, then the runner's), then the best and its rivals re-measured before
    anything is claimed (one judgment for a model and for a pipeline). The candidate last measured
    may be left serving: the caller's guard puts the original back. Raises as run_trial and
    confirm_picks do, and MeasurementError when --max-time ran out before any trial was measured."""
    t.capture_reference()
    while (why := t.search.stop(study) or t.should_stop(study)) is None:
        _study.fail_stale(study)
        t.run_trial(study, study.ask())
    t.emit(SearchStopped(why))
    deadline = t.search_deadline(study)
    out_of_time = t.out_of_time or (deadline is not None and time.monotonic() >= deadline)
    if out_of_time and not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        raise MeasurementError(
            f"--max-time {t.s.max_time_s:g} s ran out before any trial was measured",
            hint="give more time: a trial measures its load levels one after another, each for several windows",
        )
    confirm_picks(t, study, ConfirmSettings(repeats=t.s.confirm_repeats, min_repeat_s=t.s.confirm_time_s))


def run_search(t: TrialRunner) -> tuple[TuneRecord, dict[str, Path]]:
    """One tune from its announcement to its outputs, for any subject: the study opened and
    seeded by the search strategy (the subject's seeds, or a calibration's predictions), the
    search run inside the route's guard of the subject's configs, and on every ending the record
    and its outputs written (the subject's own files too); the strategy's line (--search auto's
    choice) told under the announcement. Raises UsageError for an empty space, and as search does
    (after the outputs are written)."""
    s, subject = t.s, t.subject
    t.emit(SearchStarted(subject.title, t.space.backend, s.budget.percentile, s.budget.latency_budget_ms,
                         tuple(d.describe() for d in t.space.dimensions), tuple(t.space.notes),
                         s.budget.metric, t.trial_load.load_line(default=s.load is None)))  # fmt: skip
    if t.search.told is not None:
        t.emit(t.search.told)
    if not t.space.dimensions:
        raise UsageError(f"nothing to search for {t.model!r}", hint="widen the space with the search-space flags")
    study = open_study(t)
    status: Literal["ok", "failed", "interrupted"] = "ok"
    error: str | None = None
    with subject.route.guard(t.server, subject.paths, reload_last=subject.reload_last):
        try:
            t.search.seed(t, study)  # inside: a seed that measures (a calibration) cut short still leaves a record
            t.emit(StudyOpened(t.study_name, _study._redact(t.storage_url), len(study.trials)))
            search(t, study)
        except KeyboardInterrupt:
            status, error = "interrupted", "interrupted by the user"
            raise
        except PerfkitError as err:
            status, error = "failed", err.one_line()
            raise
        finally:
            rec = build_record(t, study, status, error)
            paths = _outputs.write_outputs(t.out_dir, rec, trial_configs=t.trial_configs)
            more, after = subject.write_best(t.out_dir, rec)
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
    sha = config_pbtxt_sha256(t.subject.original_cfg)
    known = study.user_attrs.get("original_sha256")
    if known is None:
        study.set_user_attr("original_sha256", sha)
        study.set_user_attr("model", t.model)
        study.set_user_attr("latency_budget_ms", t.s.budget.latency_budget_ms)
        study.set_user_attr("percentile", t.s.budget.percentile)
        study.set_user_attr("budget_metric", t.s.budget.metric)
    elif known != sha:
        raise UsageError(
            f"{t.subject.config_path} differs from the config study {t.study_name!r} started from",
            hint="restore that config, or start a new study (another -o DIR or --study-name)",
        )
    elif (
        study.user_attrs.get("latency_budget_ms") != t.s.budget.latency_budget_ms
        or study.user_attrs.get("percentile") != t.s.budget.percentile
        or study.user_attrs.get("budget_metric", "latency") != t.s.budget.metric
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
        study.enqueue_trial(original, user_attrs={_trial_state.A_ORIGINAL: True}, skip_if_exists=True)
        # The sampler's own draws follow; a grid or random search walks its points unseeded.
        # (the predicted search queues its predicted configs instead.)
        seed = batching_seed(t.space, original) if t.s.sampler == "auto" and t.search.queues_batching_seed else None
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
    model_repository: Path | None,
    composing: Sequence[str] = (),
    measure: Measure | None = None,
    on_event: OnEvent | None = None,
    echo: Callable[[str], None] | None = None,
    route: ConfigRoute | None = None,
    shared_study: bool = False,
) -> TuneResult:
    """Search the configs of what settings name for the most throughput within the latency budget:
    one model, a pipeline (settings.model an ensemble, or a BLS model with `composing`), or the
    models of a traffic mix (settings.mix), searched jointly.

    Each candidate is served through `route` (default: the file route, which edits
    model_repository/<model>/config.pbtxt, comments and layout kept, reloads the model with
    explicit model control and verifies what the server applied); its outputs are checked against
    the original's, it is measured, and every original is always put back (even on Ctrl-C).
    --apply installs the best config(s) all or nothing. Progress goes to on_event as typed events
    (and to logging); `echo`, a shorthand for on_event, receives each event's line(). Outputs go
    to settings.output_dir. Raises UsageError/InputError/ConfigError for bad settings or configs,
    ServerError when the server dies or an original no longer loads, MeasurementError when
    --max-time ran out before any trial was measured (after the outputs), KeyboardInterrupt after
    cleanup and partial outputs.

    shared_study: the study is shared by --ray's workers (--search auto measures; the launcher said so).

    model_repository None: candidates go through the API route (perfkit.tuner._route_api; route
    defaults to it) and the original is the config the server serves; --apply is refused there
    (UsageError: no file to write), as with any route but the file one.
    """
    sink = on_event or _ignore

    def emit_to(event: TuneEvent) -> None:
        sink(event)
        if echo is not None:
            echo(event.line())

    served_text = None
    if model_repository is None:
        route = route or ApiRoute()
        if not isinstance(route, ApiRoute):
            raise UsageError("tuning without --model-repository goes through the API route: give --apply-via api")
    if settings.apply and route is not None and getattr(route, "name", "file") != "file":
        raise UsageError(
            "--apply writes the best config into the model repository: nothing to write with --apply-via api",
            hint="drop --apply and install -o DIR's best/config.pbtxt in the server's repository yourself",
        )
    if model_repository is None:
        assert isinstance(route, ApiRoute)
        check_explicit_model_control(server)
        served_text = route.original_text(server, settings.model)
    subject = open_subject(settings, space, model_repository, composing=composing, route=route, served_text=served_text)
    trial_load = trial_load_of(server, settings, subject)
    chosen = choose(settings, subject, trial_load, shared=shared_study)
    t = TrialRunner(server, settings, subject, measure, emit_to, search=chosen, trial_load=trial_load)
    if chosen.told_before is not None:
        t.emit(chosen.told_before)
    rec, result_paths = run_search(t)
    chosen.finish(t, rec)
    backup = None
    if settings.apply and rec.best_config is not None:
        backup = apply_best(t, rec)
    return TuneResult(record=rec, output_dir=t.out_dir, paths=result_paths, applied_backup=backup)


def apply_best(t: TrialRunner, rec: TuneRecord) -> Path | None:
    """--apply: the best config(s) written into the repository all or nothing (refused when another
    model would stop loading; each file changed keeps a backup), then served; returns the first
    backup (None: nothing changed). Raises ConfigError."""
    assert rec.best_config is not None
    subject = t.subject
    changes = subject.best_changes(rec.best_config)
    backups = apply_all(changes, subject.repository)
    for model in backups:
        path, text = changes[model]
        subject.route.serve(t.server, model, path, text)  # same bytes: reload and verify
    if backups:
        for model in subject.reload_last:
            t.server.load_model(model)
    t.emit(subject.applied(rec.best_trial, backups))
    return next(iter(backups.values()), None)
