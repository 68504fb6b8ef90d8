"""One trial: ask a candidate, put it on the server (write, reload, verify what the server
applied), check its outputs against the original's, find its highest load within budget,
judge, tell. The search state shared by the trials lives in TrialRunner."""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from perfkit.errors import (
    CandidateNotAppliedError,
    CandidateRejectedError,
    ConfigError,
    InputError,
    MeasurementError,
    ModelLoadError,
    PerfkitError,
    ServerError,
    UsageError,
)
from perfkit.records import RunRecord
from perfkit.server.base import Server
from perfkit.server.modelconfig import (
    ModelConfig,
    apply_config,
    config_pbtxt_sha256,
    parse_config,
    read_config,
    render_config,
)
from perfkit.tuner import _accuracy, _study
from perfkit.tuner._events import (
    AccuracyNote,
    OnEvent,
    TrialFailed,
    TrialMeasured,
    TrialPruned,
    TrialRejected,
    TrialRepeated,
    TrialStarted,
    TuneEvent,
    fmt_params,
)
from perfkit.tuner._judge import TrialVerdict, budget_label, check_budget_metric, constraints, judge_trial
from perfkit.tuner._loadplan import Measure, find_load, start_concurrency
from perfkit.tuner._objective import PER_HARDWARE, hardware_units, objective_value
from perfkit.tuner._settings import CONFIRM_MIN_WINDOWS, TuneSettings, default_output_dir
from perfkit.tuner._space import (
    Dimension,
    ResolvedSpace,
    TuneSpace,
    apply_params,
    extract_params,
    is_decoupled,
    log_clamp,
    normalize_params,
    resolve,
)

log = logging.getLogger(__name__)
MAX_REPEATS = 25


def gpu_available() -> bool:
    """Whether NVML sees a GPU on this machine."""
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount()) > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library, no device: all mean "no GPU here"
        return False


def _default_measure() -> Measure:
    try:
        from perfkit.measure import profile
    except ImportError as err:
        raise PerfkitError(f"perfkit.measure is not available in this build: {err}") from None
    return profile  # type: ignore[no-any-return]  # measure's module is typed; the lazy import is not


class TrialRunner:
    """One worker's search: the model, its space, the guard, and what earlier trials learned."""

    def __init__(  # noqa: PLR0917
        self,
        server: Server,
        settings: TuneSettings,
        space: TuneSpace,
        model_repository: Path,
        measure: Measure | None,
        on_event: OnEvent,
    ) -> None:
        self.server = server
        self.s = settings
        self.on_event = on_event
        self.measure = measure
        self.model = settings.model
        self.model_dir = Path(model_repository) / self.model
        self.config_path = self.model_dir / "config.pbtxt"
        if not self.model_dir.is_dir():
            raise InputError(f"model {self.model!r} is not in the model repository {model_repository}", hint="check -m")
        self.original_cfg = read_config(self.config_path)
        self.original_text = self.config_path.read_bytes().decode("utf-8")
        self.space = self.resolve_space(space, model_repository)
        self.out_dir = Path(settings.output_dir or default_output_dir(self.model))
        self.storage_url = settings.storage or f"sqlite:///{(self.out_dir / 'study.db').resolve()}"
        self.study_name = settings.study_name or self.default_study_name()
        self.decoupled = is_decoupled(self.original_cfg, self.space.backend)
        check_budget_metric(settings.budget_metric, self.model, self.decoupled)
        if settings.objective == "goodput" and not self.decoupled:
            raise UsageError(
                f"--objective goodput counts streamed requests meeting TTFT/ITL SLOs: {self.model!r} is not decoupled",
                hint="use --objective throughput",
            )
        self.judge = settings.judge_settings(server.endpoints.metrics_url, streaming=self.decoupled)
        self.trial_configs: dict[int, str] = {}
        self.started = time.monotonic()
        self.done_here = 0
        self.dup_streak = 0
        self.sampler: optuna.samplers.BaseSampler | None = None
        self.probe: _accuracy.Probe | None = None
        self.reference: dict[str, Any] | None = None

    def resolve_space(self, space: TuneSpace, model_repository: Path) -> ResolvedSpace:
        """The space searched (a pipeline's runner makes it the joint space of its steps)."""
        return resolve(
            space,
            self.original_cfg,
            self.model_dir,
            latency_budget_us=self.s.latency_budget_ms * 1e3,
            gpu_available=gpu_available(),
        )

    def make_candidate(self, params: dict[str, Any], is_original: bool, number: int) -> tuple[str, dict[str, Any], str]:
        """(text written, searched params as it holds them, content sha) of a trial's candidate.
        Raises CandidateRejectedError when Triton would reject it."""
        if is_original:
            candidate, text = self.original_cfg, self.original_text
        else:
            candidate = apply_params(self.original_cfg, params, self.space)
            text = render_config(self.original_text, candidate)
            # What we write must parse back to the same config (no field lost on the way).
            if config_pbtxt_sha256(parse_config(text, source=f"trial {number} config")) != config_pbtxt_sha256(
                candidate
            ):
                raise ConfigError(f"trial {number}: the candidate config does not round-trip through text format")
        return text, self.searched(candidate), config_pbtxt_sha256(candidate)

    def put_candidate(self, text: str) -> None:
        """Write a candidate, reload, verify (ModelLoadError / CandidateNotAppliedError)."""
        apply_config(self.server, self.model, self.config_path, text)

    @property
    def title(self) -> str:
        """What the search is of, as its first line names it (a mix names its models)."""
        return self.model

    def default_study_name(self) -> str:
        """The study's name when --study-name is not given."""
        return f"tune-{self.model}"

    def emit(self, event: TuneEvent) -> None:
        log.info("%s", event.line())
        self.on_event(event)

    # -- the accuracy reference ----------------------------------------------------------------
    def capture_reference(self) -> None:
        """The original config's outputs on fixed inputs (the model must be serving the original)."""
        tol = self.s.max_output_diff or _accuracy.OutputTolerance()
        if not tol.enabled:
            self.emit(AccuracyNote("output check off (--max-output-diff off)"))
            return
        if self.decoupled or self.original_cfg.HasField("sequence_batching"):
            # The probe sends one unary request: a decoupled model answers on a stream, and a
            # sequence model's outputs depend on the state its earlier steps built.
            kind = "decoupled" if self.decoupled else "a sequence model"
            self.emit(AccuracyNote(f"output check skipped: {self.model!r} is {kind}; the probe sends unary requests"))
            return
        try:
            metadata = self.server.model_metadata(self.model)
            probe = _accuracy.make_probe(
                self.server.endpoints.http_url, self.model, metadata, self.original_cfg.max_batch_size
            )
            if probe is None:
                self.emit(AccuracyNote("output check skipped: inputs of this model cannot be synthesized"))
                return
            self.reference = probe.run()
            self.probe = probe
        except PerfkitError as err:
            self.emit(
                AccuracyNote(f"output check skipped: the original's outputs could not be read ({err.one_line()})")
            )

    def _accuracy_failure(self, trial: optuna.Trial) -> str | None:
        if self.probe is None or self.reference is None:
            return None
        tol = self.s.max_output_diff or _accuracy.OutputTolerance()
        try:
            got = self.probe.run()
        except ServerError as err:
            if not self.server.is_ready():
                raise
            return f"inference on the candidate failed: {err.one_line()}"
        diffs = _accuracy.compare_outputs(self.reference, got, self.probe.datatypes, tol)
        trial.set_user_attr(
            "output_diff", {d.name: {"max_abs": _finite(d.max_abs), "max_rel": _finite(d.max_rel)} for d in diffs}
        )
        bad = [d for d in diffs if not d.within]
        if not bad:
            return None
        return "outputs differ from the original config's: " + "; ".join(d.describe() for d in bad)

    # -- set-up ---------------------------------------------------------------------------------
    def applies(self, d: Dimension, params: Mapping[str, Any]) -> bool:
        """Whether dimension d is sampled given the values chosen before it (the pipeline runner
        answers for its joint space, whose names carry the step)."""
        return self.space.applies(d, params)

    def original_fixed_params(self) -> dict[str, Any]:
        """The original's parameters, fitted to the distributions (trial 0 applies the file as is)."""
        orig = self.space.original_params
        out: dict[str, Any] = {}
        for d in self.space.dimensions:
            if not self.applies(d, orig):
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
            if not self.applies(d, params):
                continue
            if d.is_range:
                assert d.low is not None and d.high is not None
                params[d.name] = trial.suggest_int(d.name, d.low, d.high, log=True)
            else:
                params[d.name] = trial.suggest_categorical(d.name, list(d.choices))
        return params

    def searched(self, cfg: ModelConfig) -> dict[str, Any]:
        """The searched parameters as a config holds them (for records)."""
        full = extract_params(
            cfg,
            backend=self.space.backend,
            precision_parameter=self.space.precision_parameter,
            engine_files=self.space.engine_files,
        )
        names = {d.name for d in self.space.dimensions}
        return normalize_params({k: v for k, v in full.items() if k in names})

    # -- one trial ------------------------------------------------------------------------------
    def _fail(self, study: optuna.Study, trial: optuna.Trial, reason: str, *, interrupted: bool = False) -> None:
        trial.set_user_attr(_study.A_FAIL_REASON, reason[:2000])
        if interrupted:
            trial.set_user_attr(_study.A_INTERRUPTED, True)
        study.tell(trial, state=TrialState.FAIL)

    def _restore_original(self) -> None:
        """Put the original back and reload it; a server that cannot reload it ends the search."""
        try:
            apply_config(self.server, self.model, self.config_path, self.original_text)
        except CandidateNotAppliedError as err:
            raise ServerError(
                f"the server does not serve {self.config_path} even after restoring it: {err.message}",
                hint="--model-repository must be the folder the server reads",
            ) from err
        except ModelLoadError as err:
            raise ServerError(
                f"the original config of {self.model!r} no longer loads after a failed trial: {err.message}",
                hint="check the server log",
            ) from err

    def run_trial(self, study: optuna.Study, trial: optuna.Trial) -> None:
        t0 = time.monotonic()
        number = trial.number
        is_original = bool(trial.user_attrs.get(_study.A_ORIGINAL, False))
        params = self.suggest(trial)
        of = self.s.trials
        try:
            text, record_params, sha = self.make_candidate(params, is_original, number)
        except CandidateRejectedError as err:
            self._reject(study, trial, params, err)
            return
        trial.set_user_attr("params", record_params)
        trial.set_user_attr("config_pbtxt_sha256", sha)
        trial.set_user_attr("config_pbtxt", text)
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
        self.trial_configs[number] = text
        label = "original" if is_original else fmt_params(record_params)
        same = None if is_original else self._measured_before(study, sha, number)
        if same is not None:
            self._repeat(study, trial, same)
            self.emit(TrialRepeated(number, of, label, same.number))
            return
        self.dup_streak = 0
        self.emit(TrialStarted(number, of, label))
        try:
            with _study.heartbeat(study, trial):
                outcome = self._evaluate(study, trial, text, number, is_original, record_params)
        except KeyboardInterrupt:
            self._fail(study, trial, "interrupted", interrupted=True)
            # Queue the same candidate again so --resume measures it instead of losing it.
            study.enqueue_trial(
                trial.params, user_attrs={_study.A_ORIGINAL: True} if is_original else None, skip_if_exists=False
            )
            raise
        except ServerError as err:
            self._fail(study, trial, f"server error: {err.one_line()}")
            raise
        self.done_here += 1
        if outcome is None:
            return
        verdict, reload_s, measure_s = outcome
        self._tell(study, trial, verdict, reload_s, measure_s, time.monotonic() - t0)

    def _reject(self, study: optuna.Study, trial: optuna.Trial, params: dict[str, Any], err: PerfkitError) -> None:
        """A candidate Triton would reject: recorded as failed (not counted against --trials),
        never written nor loaded."""
        self.dup_streak += 1  # a sampler stuck on rejected points ends the search like repeats do
        trial.set_user_attr("params", normalize_params(params))
        trial.set_user_attr(_study.A_REJECTED, True)
        self._fail(study, trial, f"rejected: {err.message}")
        self.emit(TrialRejected(trial.number, fmt_params(params), err.message))

    def _tell(self, study: optuna.Study, trial: optuna.Trial, verdict: TrialVerdict, reload_s: float, measure_s: float,
              duration: float) -> None:  # fmt: skip
        metrics = dict(verdict.metrics)
        metrics.update({"reload_s": reload_s, "measure_s": measure_s})
        if self.s.objective in PER_HARDWARE:
            cfg = parse_config(str(trial.user_attrs.get("config_pbtxt", "")), source=f"trial {trial.number}")
            metrics["hardware_units"] = hardware_units(cfg, self.s.objective, self.space.gpus)
        trial.set_user_attr("duration_s", duration)
        trial.set_user_attr("metrics", metrics)
        trial.set_user_attr("lowest_latency_us", verdict.lowest_latency_us)
        feasible, cons = constraints(self.s, verdict)
        trial.set_user_attr("feasible", feasible)
        _study.set_constraints(trial, cons)
        if verdict.feasible_load is not None:
            got = verdict.feasible_load
            trial.set_user_attr("load", {"mode": got.mode, "value": got.value, "distribution": got.distribution})
            trial.set_user_attr("throughput_infer_per_s", verdict.throughput_infer_per_s)
            trial.set_user_attr("latency_us", verdict.latency_us)
        pct = budget_label(self.s.budget_metric, self.s.percentile)
        if verdict.lowest_over_budget and self.s.objective != "pareto":
            trial.report(verdict.lowest_throughput, step=0)
            lowest = "the lowest rate tried" if self.judge.open_loop else "concurrency 1"
            reason = f"{pct} {verdict.lowest_latency_us / 1e3:.2f} ms at {lowest} is over the budget"
            trial.set_user_attr(_study.A_FAIL_REASON, reason)
            study.tell(trial, state=TrialState.PRUNED)
            self.emit(TrialPruned(trial.number, reason, duration))
            return
        tput = (
            verdict.throughput_infer_per_s if verdict.throughput_infer_per_s is not None else verdict.lowest_throughput
        )
        lat = verdict.latency_us if verdict.latency_us is not None else verdict.lowest_latency_us
        if self.s.objective == "pareto":
            study.tell(trial, [tput, lat / 1e3])
        else:
            study.tell(trial, objective_value(self.s.objective, tput, metrics))
        fl = verdict.feasible_load
        conc = int(fl.value) if fl is not None and fl.mode == "concurrency" else None
        label = fl.label if fl is not None and fl.mode != "concurrency" else None
        self.emit(TrialMeasured(trial.number, tput, conc, self.s.percentile, lat / 1e3, feasible, reload_s, measure_s,
                                verdict.levels_measured, self.s.budget_metric,
                                verdict.metrics.get("output_tokens_per_s"), label))  # fmt: skip

    def _load_history(self, study: optuna.Study) -> list[tuple[dict[str, Any], float]]:
        mode = self.judge.level(1).mode
        out = []
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            load = t.user_attrs.get("load")
            if load and load.get("mode") == mode and not t.user_attrs.get(_study.A_DUPLICATE_OF):
                out.append((dict(t.user_attrs.get("params") or {}), float(load["value"])))
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
            self._restore_original()
            self._fail(study, trial, err.message)
            return None
        reload_s = time.monotonic() - t0
        if not is_original:
            why = self._accuracy_failure(trial)
            if why is not None:
                self.emit(TrialFailed(number, why))
                trial.set_user_attr("feasible", False)
                self._fail(study, trial, why)
                return None
        measure = self.measure or _default_measure()
        record_path = self.out_dir / "runs" / f"trial-{number:03d}.json"
        start = start_concurrency(self._load_history(study), params) if self.s.adaptive_load else None
        if self.judge.open_loop and isinstance(trial.user_attrs.get("predicted_rps"), float):
            start = trial.user_attrs["predicted_rps"]  # --search predict: the rate search starts at the prediction
        t1 = time.monotonic()
        try:
            record = find_load(measure, self.server, self.judge, self.model, start, command=self.s.command,
                               record_path=record_path)  # fmt: skip
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
        return self._verdict(study, trial, record, reload_s, measure_s)

    def _verdict(self, study: optuna.Study, trial: optuna.Trial, record: RunRecord, reload_s: float,
                 measure_s: float) -> tuple[TrialVerdict, float, float] | None:  # fmt: skip
        if record.status != "ok" and not record.levels:
            self._fail(study, trial, f"measurement {record.status}: {record.error or ''}")
            return None
        trial.set_user_attr("served_config_sha256", record.model.served_config_sha256)  # pairs the trial with its run
        verdict = judge_trial(
            record, latency_budget_ms=self.s.latency_budget_ms, percentile=self.s.percentile,
            metric=self.s.budget_metric, mix_scale=self.judge.mix_scale,
        )  # fmt: skip
        return verdict, reload_s, measure_s

    def _measured_before(self, study: optuna.Study, sha: str, number: int) -> FrozenTrial | None:
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
            if (
                t.number != number
                and t.user_attrs.get("config_pbtxt_sha256") == sha
                and not t.user_attrs.get(_study.A_DUPLICATE_OF)
            ):
                return t
        return None

    def _repeat(self, study: optuna.Study, trial: optuna.Trial, same: FrozenTrial) -> None:
        """Answer a repeated config from its earlier trial (samplers do re-propose points in a
        small space); it does not count against --trials."""
        self.dup_streak += 1
        for key in ("duration_s", "metrics", "feasible", "load", "throughput_infer_per_s", "latency_us"):
            if key in same.user_attrs:
                trial.set_user_attr(key, same.user_attrs[key])
        trial.set_user_attr(_study.A_DUPLICATE_OF, same.number)
        if same.user_attrs.get(_study.A_FAIL_REASON):
            trial.set_user_attr(_study.A_FAIL_REASON, same.user_attrs[_study.A_FAIL_REASON])
        _study.set_constraints(trial, dict(same.user_attrs.get(_study.A_CONSTRAINTS) or {"latency": 0.0}))
        if same.state == TrialState.PRUNED:
            trial.report(float(same.intermediate_values.get(0, 0.0)), step=0)
            study.tell(trial, state=TrialState.PRUNED)
        elif self.s.objective == "pareto":
            study.tell(trial, list(same.values))
        else:
            study.tell(trial, same.value)

    def should_stop(self, study: optuna.Study) -> str | None:
        if self.s.trials is not None and _study.trials_used(study) >= self.s.trials:
            return f"{self.s.trials} trials done"
        if isinstance(self.sampler, optuna.samplers.GridSampler) and self.sampler.is_exhausted(study):
            return "every point of the grid measured"
        if self.dup_streak >= MAX_REPEATS:
            return f"{MAX_REPEATS} repeated or rejected configs in a row: the search space looks exhausted"
        if self.s.max_time_s is not None:
            # --max-time bounds the whole tune: the search leaves time to confirm the pick (at
            # most half the time), so the claim is not made after the user's deadline.
            reserve = min(confirmation_reserve_s(self.s), self.s.max_time_s / 2)
            if time.monotonic() - self.started >= self.s.max_time_s - reserve:
                left = f" ({reserve:.0f} s left for confirmation)" if reserve > 0 else ""
                return f"--max-time {self.s.max_time_s:g} s reached{left}"
        return None


def confirmation_reserve_s(s: TuneSettings) -> float:
    """About how long confirming the pick takes: its repeats, each at least --confirm-time or its
    minimum windows, plus warm-up, for the pick and one more run of repeats (a rival or a step down)."""
    if s.confirm_repeats <= 0:
        return 0.0
    repeat_s = max(s.confirm_time_s, CONFIRM_MIN_WINDOWS * s.measurement_interval_ms / 1000.0) + s.warmup_s + 1.0
    return 2 * s.confirm_repeats * repeat_s


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
