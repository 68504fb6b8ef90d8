"""One trial, whatever the subject: ask a candidate, put it on the server (through the subject's
route), check its outputs against the original's, find its highest load within budget, trial_load,
tell. The search state shared by the trials lives in TrialRunner; what the config search's
strategy knows of a trial (a prediction, a ceiling) it asks of its Search (tuner/_search)."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from perfkit import objectives
from perfkit.errors import (
    CandidateNotAppliedError,
    CandidateRejectedError,
    MeasurementError,
    ModelLoadError,
    PerfkitError,
    ServerError,
)
from perfkit.records import M_LOWER_BOUND, ProfileSpec, RunRecord
from perfkit.server.base import Server
from perfkit.server.modelconfig import parse_config
from perfkit.tuner import _accuracy, _exhausted, _output_check, _study, _trial_state
from perfkit.tuner._events import (
    AccuracyNote,
    OnEvent,
    TrialFailed,
    TrialLoaded,
    TrialMeasured,
    TrialPruned,
    TrialRejected,
    TrialRepeated,
    TrialStarted,
    TuneEvent,
    fmt_params,
)
from perfkit.tuner._find_load import Measure, OutOfTime, TrialLoadSettings, find_load, start_concurrency
from perfkit.tuner._load_start import load_start
from perfkit.tuner._objective import hardware_units, study_values
from perfkit.tuner._settings import TuneSettings, default_output_dir
from perfkit.tuner._space import is_decoupled, log_clamp, normalize_params
from perfkit.tuner._subject import Subject
from perfkit.tuner._trial_cut import answered, cut_note, cut_record, cut_verdict
from perfkit.tuner._trial_load import _default_measure
from perfkit.tuner._verdict import TrialVerdict, constraints, judge_trial

if TYPE_CHECKING:
    from perfkit.tuner._search import Search

log = logging.getLogger(__name__)
MAX_REPEATS = 25


class TrialRunner:
    """One worker's search over a subject: its space, how its trials are loaded (trial_load), the
    config search's strategy (`search`: measured or predicted, chosen before the runner), and what
    earlier trials learned."""

    def __init__(
        self,
        server: Server,
        settings: TuneSettings,
        subject: Subject,
        measure: Measure | None,
        on_event: OnEvent,
        *,
        search: Search,
        trial_load: TrialLoadSettings,
    ) -> None:
        """`trial_load`: trial_load_of(server, settings, subject)."""
        self.server = server
        self.s = settings
        self.subject = subject
        self.search = search
        self.on_event = on_event
        self.inner_measure = measure
        self.model = subject.model
        self.space = subject.space
        self.out_dir = Path(settings.output_dir or default_output_dir(self.model))
        self.storage_url = settings.storage or f"sqlite:///{(self.out_dir / 'study.db').resolve()}"
        self.study_name = settings.study_name or subject.default_study_name
        self.decoupled = is_decoupled(subject.original_cfg, self.space.backend)
        self.trial_load = trial_load
        self.trial_configs: dict[int, str] = {}
        self.started = time.monotonic()
        self.out_of_time = False  # a trial's load search reached the search's deadline (--max-time)
        self.done_here = 0
        self.dup_streak = 0
        self._space_configs: frozenset[str] | None = None  # listed once the sampler repeats a config
        self._space_listed = False
        self.sampler: optuna.samplers.BaseSampler | None = None
        self.probe: _accuracy.Probe | None = None
        self.reference: dict[str, Any] | None = None
        # A config was put on the server since the last measurement (measure warms up longer).
        self.reloaded = False

    def measure(self, server: Server, spec: ProfileSpec, **kw: Any) -> RunRecord:
        """Measure one spec as the subject wants it measured (a pipeline snapshots its steps); the
        first measurement after a config was put warms up for at least the settings' reload_warmup_s."""
        inner = self.inner_measure or _default_measure()
        if self.reloaded:
            self.reloaded = False
            spec = dataclasses.replace(spec, warmup_s=max(spec.warmup_s, self.s.reload_warmup_s))
        return inner(server, self.subject.profile_spec(spec), **kw)

    def put_candidate(self, text: str) -> None:
        """Serve a candidate (ModelLoadError / CandidateNotAppliedError)."""
        self.reloaded = True  # also when it fails: a failed load may have reloaded the model
        self.subject.serve(self.server, text)

    def emit(self, event: TuneEvent) -> None:
        log.info("%s", event.line())
        self.on_event(event)

    # -- the accuracy reference ----------------------------------------------------------------
    def capture_reference(self) -> None:
        """The original config's outputs on fixed inputs (the model must be serving the original)."""
        tol = self.s.max_output_diff or _accuracy.OutputTolerance()
        cfg = self.subject.original_cfg
        self.probe, self.reference, note = _output_check.capture(self.server, self.model, cfg, self.decoupled, tol)
        if note is not None:
            self.emit(AccuracyNote(note))

    def _accuracy_failure(self, trial: optuna.Trial) -> str | None:
        if self.probe is None or self.reference is None:
            return None
        tol = self.s.max_output_diff or _accuracy.OutputTolerance()
        diffs, why = _output_check.check(self.server, self.probe, self.reference, tol)
        if diffs is not None:
            _trial_state.store(trial, output_diff=diffs)
        return why

    # -- set-up ---------------------------------------------------------------------------------
    def original_fixed_params(self) -> dict[str, Any]:
        """The original's parameters, fitted to the distributions (trial 0 applies the file as is)."""
        orig = self.space.original_params
        out: dict[str, Any] = {}
        for d in self.space.dimensions:
            if not self.subject.applies(d, orig):
                continue
            value = orig.get(d.name)
            if d.is_range:
                assert d.low is not None and d.high is not None
                out[d.name] = log_clamp(float(value or 0), d.low, d.high)
            elif value in d.choices:
                out[d.name] = value
        return out

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for d in self.space.dimensions:
            if not self.subject.applies(d, params):
                continue
            if d.is_range:
                assert d.low is not None and d.high is not None
                params[d.name] = trial.suggest_int(d.name, d.low, d.high, log=True)
            else:
                params[d.name] = trial.suggest_categorical(d.name, list(d.choices))
        return params

    # -- one trial ------------------------------------------------------------------------------
    def _fail(self, study: optuna.Study, trial: optuna.Trial, reason: str, *, interrupted: bool = False) -> None:
        _trial_state.store(trial, fail_reason=reason[:2000])
        if interrupted:
            _trial_state.store(trial, interrupted=True)
        study.tell(trial, state=TrialState.FAIL)

    def run_trial(self, study: optuna.Study, trial: optuna.Trial) -> None:
        t0 = time.monotonic()
        number = trial.number
        is_original = _trial_state.read(trial).is_original
        params = self.suggest(trial)
        of = self.s.trials
        try:
            cand = self.subject.candidate(params, is_original=is_original, number=number)
        except CandidateRejectedError as err:
            self._reject(study, trial, params, err)
            return
        text, record_params, sha = cand.text, cand.params, cand.sha256
        worker = f"{socket.gethostname()}:{os.getpid()}"
        _trial_state.store(trial, params=record_params, config_pbtxt_sha256=sha, config_pbtxt=text, worker=worker)
        self.trial_configs[number] = text
        label = "original" if is_original else fmt_params(record_params)
        same = None if is_original else _study.measured_before(study, sha, number)
        if same is not None:
            self.dup_streak += 1
            _study.answer_repeat(study, trial, same, self.s.objective)
            self.emit(TrialRepeated(number, of, label, same.number))
            return
        self.dup_streak = 0
        self.emit(TrialStarted(number, of, label))
        try:
            with _study.heartbeat(study, trial):
                outcome = self._evaluate(study, trial, text, number, is_original, record_params)
        except KeyboardInterrupt:
            self._fail(study, trial, "interrupted", interrupted=True)
            self._queue_again(study, trial, is_original)
            raise
        except OutOfTime as ended:
            # --max-time came during the load search: the trial ends there, recorded with the levels it
            # measured, not judged on them (a search cut short would understate the candidate), and
            # queued again like an interrupted one; the search stops at the next check.
            self.out_of_time = True
            n = len(ended.record.levels) if ended.record is not None else 0
            during = f"during the load search ({n} level{'s' if n != 1 else ''} measured)"
            reason = f"out of time: --max-time {self.s.max_time_s:g} s reached {during}"
            self.emit(TrialFailed(number, reason))
            self._fail(study, trial, reason, interrupted=True)
            self._queue_again(study, trial, is_original)
            return
        except ServerError as err:
            self._fail(study, trial, f"server error: {err.one_line()}")
            raise
        self.done_here += 1
        if outcome is None:
            return
        verdict, reload_s, measure_s = outcome
        self._tell(study, trial, verdict, reload_s, measure_s, time.monotonic() - t0)

    @staticmethod
    def _queue_again(study: optuna.Study, trial: optuna.Trial, is_original: bool) -> None:
        """Queue a trial cut short again, so --resume measures its candidate instead of losing it."""
        study.enqueue_trial(
            trial.params, user_attrs={_trial_state.A_ORIGINAL: True} if is_original else None, skip_if_exists=False
        )

    def _reject(self, study: optuna.Study, trial: optuna.Trial, params: dict[str, Any], err: PerfkitError) -> None:
        """A candidate Triton would reject: recorded as failed (not counted against --trials),
        never written nor loaded."""
        self.dup_streak += 1  # a sampler stuck on rejected points ends the search like repeats do
        _trial_state.store(trial, params=normalize_params(params), rejected=True)
        self._fail(study, trial, f"rejected: {err.message}")
        self.emit(TrialRejected(trial.number, fmt_params(params), err.message))

    def _tell(self, study: optuna.Study, trial: optuna.Trial, verdict: TrialVerdict, reload_s: float, measure_s: float,
              duration: float) -> None:  # fmt: skip
        metrics = dict(verdict.metrics)
        metrics.update({"reload_s": reload_s, "measure_s": measure_s})
        objective = objectives.get(self.s.objective)
        if objective.per_hardware:
            cfg = parse_config(_trial_state.read(trial).config_pbtxt, source=f"trial {trial.number}")
            metrics["hardware_units"] = hardware_units(cfg, self.s.objective, self.space.gpus)
        _trial_state.store(trial, duration_s=duration, metrics=metrics, lowest_latency_us=verdict.lowest_latency_us)
        feasible, cons = constraints(self.s, verdict)
        _trial_state.store(trial, feasible=feasible)
        _study.set_constraints(trial, cons)
        if verdict.feasible_load is not None:
            _trial_state.store(trial, load=verdict.feasible_load, throughput_infer_per_s=verdict.throughput_infer_per_s,
                               latency_us=verdict.latency_us)  # fmt: skip
        pct = self.s.budget.label
        if verdict.lowest_over_budget and not objective.front:
            trial.report(verdict.lowest_throughput, step=0)
            lowest = "the lowest rate tried" if self.trial_load.open_loop else "concurrency 1"
            lowest = "the lowest load tried" if verdict.search_cut else lowest  # its search ended above the floor
            reason = f"{pct} {verdict.lowest_latency_us / 1e3:.2f} ms at {lowest} is over the budget"
            if verdict.search_cut:
                reason += f" ({verdict.search_cut})"
            if verdict.held_elsewhere_rps is not None:
                reason += (
                    f", where another config holds {verdict.held_elsewhere_rps:.0f} req/s: lower could not beat it"
                )
            _trial_state.store(trial, fail_reason=reason)
            study.tell(trial, state=TrialState.PRUNED)
            self.emit(TrialPruned(trial.number, reason, duration))
            return
        tput = (
            verdict.throughput_infer_per_s if verdict.throughput_infer_per_s is not None else verdict.lowest_throughput
        )
        lat = verdict.latency_us if verdict.latency_us is not None else verdict.lowest_latency_us
        values = study_values(self.s.objective, tput, lat, metrics)
        study.tell(trial, values if objective.front else values[0])
        fl = verdict.feasible_load
        conc = int(fl.value) if fl is not None and fl.mode == "concurrency" else None
        label = fl.label if fl is not None and fl.mode != "concurrency" else None
        b = self.s.budget
        self.emit(TrialMeasured(trial.number, tput, conc, b.percentile, lat / 1e3, feasible, reload_s, measure_s,
                                verdict.levels_measured, b.metric, verdict.metrics.get("output_tokens_per_s"),
                                label, verdict.search_cut, verdict.metrics.get("rejection_rate", 0.0)))  # fmt: skip

    def _load_history(self, study: optuna.Study) -> list[tuple[dict[str, Any], float]]:
        mode = self.trial_load.level(1).mode
        out = []
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            st = _trial_state.read(t)
            if st.load is not None and st.load.mode == mode and not st.duplicate_of:
                out.append((st.params, st.load.value))
        return out

    def _evaluate(self, study: optuna.Study, trial: optuna.Trial, text: str, number: int, is_original: bool,
                  params: dict[str, Any]) -> tuple[TrialVerdict, float, float] | None:  # fmt: skip
        t0 = time.monotonic()
        try:
            self.put_candidate(text)
        except (ModelLoadError, CandidateNotAppliedError) as err:
            not_applied = isinstance(err, CandidateNotAppliedError)
            first = err.message.splitlines()[0][:300]
            self.emit(TrialFailed(number, first if not_applied else f"failed to load: {first}"))
            self.subject.restore(self.server)
            self._fail(study, trial, err.message)
            return None
        reload_s = time.monotonic() - t0
        if not is_original:
            why = self._accuracy_failure(trial)
            if why is not None:
                self.emit(TrialFailed(number, why))
                _trial_state.store(trial, feasible=False)
                self._fail(study, trial, why)
                return None
        record_path = self.out_dir / "runs" / f"trial-{number:03d}.json"
        queued = _trial_state.read(trial).predicted_rps  # the predicted search queued it: start near the answer
        hints = self.search.load_hints(study, params, is_original=is_original, queued=queued is not None)
        how = load_start(
            self.trial_load,
            history_start=start_concurrency(self._load_history(study), params) if self.s.adaptive_load else None,
            queued_rps=queued,
            predicted_rps=hints.predicted_rps,
            is_original=is_original,
            original_at_prediction_only=hints.original_at_prediction_only,
            at_path_ceiling=hints.at_path_ceiling,
            held_elsewhere_rps=hints.held_elsewhere_rps,
        )
        self.emit(TrialLoaded(number, reload_s))
        t1 = time.monotonic()
        try:
            record = find_load(self.measure, self.server, how.trial_load, self.model, how.start, command=self.s.command,
                               record_path=record_path, deadline=self.search_deadline(study),
                               start_suffices=how.start_suffices, predicted=how.from_prediction,
                               first_warmup_s=self.s.reload_warmup_s if self.reloaded else 0.0,
                               held_elsewhere=how.held_elsewhere)  # fmt: skip
        except OutOfTime as ended:
            if ended.record is not None:
                ended.record.save(record_path)
            kept = cut_record(ended.record, self.trial_load)
            if kept is None:
                raise
            # --max-time cut the load search after levels of the trial's own mode: they answer for it
            self.out_of_time = True
            cut = self._verdict(study, trial, kept, reload_s, time.monotonic() - t1)
            if cut is None:
                raise
            return cut_verdict(cut[0], cut_note(self.s.max_time_s, len(kept.levels))), *cut[1:]
        except MeasurementError as err:
            self.emit(TrialFailed(number, f"measurement failed: {err.one_line()}"))
            if not self.server.is_ready():
                raise ServerError(
                    f"the server stopped answering during trial {number}: {err.one_line()}",
                    log_tail=self.server.log_tail(),
                ) from err
            self._fail(study, trial, f"measurement failed: {err.one_line()}")
            return None
        measure_s = time.monotonic() - t1
        if not record_path.exists():
            record.save(record_path)
        out = self._verdict(study, trial, record, reload_s, measure_s)
        if out is not None:  # why no load holds, where its lowest level shows it
            out = (answered(out[0], record, self.trial_load), *out[1:])
        if out is not None and how.held_elsewhere is not None:
            out = (dataclasses.replace(out[0], held_elsewhere_rps=how.held_elsewhere), *out[1:])
        if out is not None and how.start_suffices and len(record.levels) == 1 and out[0].feasible_load is not None:
            # held at its start, nothing above measured: the figure is a lower bound
            out = (dataclasses.replace(out[0], metrics={**out[0].metrics, M_LOWER_BOUND: 1.0}), *out[1:])
        return out

    def _verdict(self, study: optuna.Study, trial: optuna.Trial, record: RunRecord, reload_s: float,
                 measure_s: float) -> tuple[TrialVerdict, float, float] | None:  # fmt: skip
        if record.status != "ok" and not record.levels:
            self._fail(study, trial, f"measurement {record.status}: {record.error or ''}")
            return None
        _trial_state.store(trial, served_config_sha256=record.model.served_config_sha256)  # pairs trial and run
        verdict = judge_trial(record, self.s.budget)
        self.subject.observe(self, study, trial, record, verdict)
        return verdict, reload_s, measure_s

    def should_stop(self, study: optuna.Study) -> str | None:
        if self.s.trials is not None and _study.trials_used(study) >= self.s.trials:
            return f"{self.s.trials} trials done"
        if isinstance(self.sampler, optuna.samplers.GridSampler):
            # a grid walks each of its points (a rejected one recorded with its reason): its own rule
            if self.sampler.is_exhausted(study):
                return "every point of the grid measured"
        else:
            if not self._space_listed and self.dup_streak > 0:  # exhausted only once a repeat is drawn
                self._space_configs, self._space_listed = _exhausted.space_configs(self.subject), True
            if self._space_configs is not None and _exhausted.exhausted(study, self._space_configs):
                return f"every config of the space measured ({len(self._space_configs)})"
        if self.dup_streak >= MAX_REPEATS:
            return f"{MAX_REPEATS} repeated or rejected configs in a row: the search space looks exhausted"
        deadline = self.search_deadline(study)
        if deadline is not None and (self.out_of_time or time.monotonic() >= deadline):
            reserve = self.started + (self.s.max_time_s or 0.0) - deadline
            left = f" ({reserve:.0f} s left for confirmation)" if reserve > 0 else ""
            return f"--max-time {self.s.max_time_s:g} s reached{left}"
        return None

    def search_deadline(self, study: optuna.Study) -> float | None:
        """When the search must end (time.monotonic() seconds; None without --max-time): --max-time
        bounds the whole tune, so the search, the trial in flight included, leaves time to confirm
        the pick (at most half the time) and the claim is not made after the user's deadline. Until
        a trial is measured there is no pick to confirm: the search may take the whole time (a
        calibration that took the search's share still leaves a config measured)."""
        search_s = self.s.search_time_s()
        if search_s is None:
            return None
        measured = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        return self.started + (search_s if measured else float(self.s.max_time_s or search_s))
