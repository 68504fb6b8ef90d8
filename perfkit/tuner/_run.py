"""The search loop: ask a candidate, write it, reload, check what the server applied,
measure, judge against the budget, tell. The user's config is guarded throughout."""

from __future__ import annotations

import itertools
import math
import os
import platform
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import optuna
from optuna.trial import FrozenTrial, TrialState

from perfkit import __version__
from perfkit.errors import (
    ConfigError,
    InputError,
    MeasurementError,
    ModelLoadError,
    ModelNotFoundError,
    PerfkitError,
    ServerError,
    UsageError,
)
from perfkit.records import RunRecord, TrialRecord, TuneRecord
from perfkit.server.base import Server
from perfkit.server.modelconfig import (
    ConfigGuard,
    ModelConfig,
    config_from_dict,
    config_sha256,
    format_config,
    parse_config,
    read_config,
    write_config,
)
from perfkit.tuner import _outputs, _study
from perfkit.tuner._judge import JudgeSettings, Verdict, check_percentile, judge, parse_duration_s, parse_latency_ms
from perfkit.tuner._space import (
    P_DB,
    P_KIND,
    P_PREF,
    TuneSpace,
    apply_params,
    extract_params,
    grid_points,
    log_clamp,
    normalize_params,
    resolve,
)

Measure = Callable[..., RunRecord]
MAX_REPEATS = 25
Echo = Callable[[str], None]

SETTINGS_KEYS = (
    "latency_budget",
    "percentile",
    "trials",
    "max_time",
    "objective",
    "seed",
    "min_throughput",
    "max_gpu_memory",
    "max_concurrency",
    "measurement_interval_ms",
    "protocol",
    "sampler",
)


@dataclass(frozen=True)
class TuneSettings:
    """How to search: budget, objective, bounds, where results and the study go."""

    model: str
    latency_budget_ms: float
    percentile: float = 99.0
    objective: Literal["throughput", "pareto"] = "throughput"
    trials: int | None = 20
    max_time_s: float | None = None
    min_throughput: float | None = None  # infer/s
    max_gpu_memory_bytes: float | None = None
    seed: int = 0
    output_dir: Path | None = None
    storage: str | None = None  # default: sqlite:///<output_dir>/study.db
    study_name: str | None = None
    resume: bool = False
    apply: bool = False
    protocol: Literal["http", "grpc"] = "http"
    max_concurrency: int = 64
    measurement_interval_ms: float = 800.0
    min_windows: int = 3
    max_windows: int = 6
    stability_percentage: float = 15.0
    warmup_s: float = 0.5
    sampler: Literal["auto", "grid", "random"] = "auto"  # auto: TPE, or NSGA-II for pareto
    command: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_percentile(self.percentile)
        if self.latency_budget_ms <= 0:
            raise UsageError("--latency-budget must be positive")
        if self.trials is not None and self.trials < 1:
            raise UsageError("--trials must be at least 1")
        if self.trials is None and self.max_time_s is None:
            raise UsageError("give --trials N or --max-time (or both) to bound the search")
        if self.sampler not in ("auto", "grid", "random"):
            raise UsageError(f"--sampler {self.sampler!r}: choose auto, grid or random")
        if self.max_concurrency < 1:
            raise UsageError("--max-concurrency must be at least 1")

    @classmethod
    def from_mapping(
        cls, model: str, data: Mapping[str, Any], *, source: str = "[tune]", **overrides: Any
    ) -> TuneSettings:
        """Settings from a sweep file's [tune] table (keys in SETTINGS_KEYS; space keys are
        TuneSpace's). Raises InputError/UsageError naming the key."""
        kw: dict[str, Any] = {}
        if "latency_budget" not in data and "latency_budget_ms" not in overrides:
            raise InputError(f"{source}: latency_budget is required", hint='e.g. latency_budget = "20ms"')
        if "latency_budget" in data:
            kw["latency_budget_ms"] = parse_latency_ms(data["latency_budget"])
        if "max_time" in data:
            kw["max_time_s"] = parse_duration_s(data["max_time"], what=f"{source} max_time")
        for key, conv in (
            ("percentile", float),
            ("trials", int),
            ("seed", int),
            ("min_throughput", float),
            ("max_concurrency", int),
            ("measurement_interval_ms", float),
        ):
            if key in data:
                try:
                    kw[key] = conv(data[key])
                except (TypeError, ValueError):
                    raise InputError(f"{source}: {key} = {data[key]!r} is not a number") from None
        if "max_gpu_memory" in data:
            kw["max_gpu_memory_bytes"] = parse_bytes(data["max_gpu_memory"])
        for key in ("objective", "protocol", "sampler"):
            if key in data:
                kw[key] = str(data[key])
        if kw.get("objective", "throughput") not in ("throughput", "pareto"):
            raise InputError(f'{source}: objective must be "throughput" or "pareto"')
        kw.update(overrides)
        return cls(model=model, **kw)

    def judge_settings(self, metrics_url: str | None) -> JudgeSettings:
        return JudgeSettings(
            latency_budget_ms=self.latency_budget_ms,
            percentile=self.percentile,
            max_concurrency=self.max_concurrency,
            protocol=self.protocol,
            measurement_interval_ms=self.measurement_interval_ms,
            stability_percentage=self.stability_percentage,
            min_windows=self.min_windows,
            max_windows=self.max_windows,
            warmup_s=self.warmup_s,
            collect_metrics=self.max_gpu_memory_bytes is not None,
            metrics_url=metrics_url,
        )


def parse_bytes(text: str | float) -> float:
    """'8GiB', '500MB', '1e9' in bytes; raises UsageError."""
    if isinstance(text, (int, float)):
        return float(text)
    units = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 2**10, "mib": 2**20, "gib": 2**30}
    raw = str(text).strip().lower().replace(" ", "")
    num = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = raw[len(num) :]
    try:
        return float(num) * units[unit]
    except (ValueError, KeyError):
        raise UsageError(f"--max-gpu-memory {text!r} is not a size", hint="e.g. 8GiB, 500MB") from None


@dataclass(frozen=True)
class TuneResult:
    """The tune record and where its files went."""

    record: TuneRecord
    output_dir: Path
    paths: dict[str, Path] = field(default_factory=dict)
    applied_backup: Path | None = None

    @property
    def best(self) -> TrialRecord | None:
        return next((t for t in self.record.trials if t.number == self.record.best_trial), None)

    @property
    def original(self) -> TrialRecord | None:
        return _outputs.original_trial(self.record.trials)


def default_output_dir(model: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"tune-{model}-{stamp}"


def _gpu_available() -> bool:
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
    return profile  # type: ignore[no-any-return]


def _fmt_params(params: Mapping[str, Any]) -> str:
    short = {
        "max_batch_size": "mbs",
        "dynamic_batching": "db",
        "max_queue_delay_us": "delay_us",
        "preferred_batch_sizes": "pref",
        "instance_count": "inst",
        "instance_kind": "kind",
        "precision": "prec",
    }
    parts = []
    for k, v in params.items():
        shown = ("on" if v else "off") if isinstance(v, bool) else v
        parts.append(f"{short.get(k, k)}={shown}")
    return " ".join(parts)


class _Tuner:
    """One worker's search (state shared by the steps of the loop)."""

    def __init__(  # noqa: PLR0917
        self,
        server: Server,
        settings: TuneSettings,
        space: TuneSpace,
        model_repository: Path,
        measure: Measure | None,
        echo: Echo,
    ) -> None:
        self.server = server
        self.s = settings
        self.echo = echo
        self.measure = measure
        self.model = settings.model
        self.model_dir = Path(model_repository) / self.model
        self.config_path = self.model_dir / "config.pbtxt"
        if not self.model_dir.is_dir():
            raise InputError(f"model {self.model!r} is not in the model repository {model_repository}", hint="check -m")
        self.original_cfg = read_config(self.config_path)
        self.original_text = self.config_path.read_bytes().decode("utf-8")
        self.space = resolve(
            space,
            self.original_cfg,
            self.model_dir,
            latency_budget_us=settings.latency_budget_ms * 1e3,
            gpu_available=_gpu_available(),
        )
        self.out_dir = Path(settings.output_dir or default_output_dir(self.model))
        self.storage_url = settings.storage or f"sqlite:///{(self.out_dir / 'study.db').resolve()}"
        self.study_name = settings.study_name or f"tune-{self.model}"
        self.judge = settings.judge_settings(server.endpoints.metrics_url)
        self.trial_configs: dict[int, str] = {}
        self.started = time.monotonic()
        self.done_here = 0
        self.dup_streak = 0
        self.sampler: optuna.samplers.BaseSampler | None = None
        # Leading comment lines of the original are kept on every candidate (text format drops comments).
        lines = self.original_text.splitlines(keepends=True)
        self.header = "".join(itertools.takewhile(lambda ln: ln.lstrip().startswith("#"), lines))

    # -- set-up ----------------------------------------------------------------------------
    def open_study(self) -> optuna.Study:
        nothing_to_resume = UsageError(
            f"--resume: no study {self.study_name!r} in {_study._redact(self.storage_url)}",
            hint="pass the -o DIR (or --storage and --study-name) of the run to continue",
        )
        if self.s.resume and self.s.storage is None and not (self.out_dir / "study.db").is_file():
            raise nothing_to_resume
        self.out_dir.mkdir(parents=True, exist_ok=True)
        storage = _study.make_storage(self.storage_url)
        sampler = _study.make_sampler(
            self.s.objective, self.s.seed, self.s.trials, kind=self.s.sampler, grid=grid_points(self.space)
        )
        self.sampler = sampler
        join = self.s.resume or self.s.study_name is not None
        study, created = _study.open_study(
            storage,
            self.study_name,
            objective=self.s.objective,
            sampler=sampler,
            join=join,
            storage_label=_study._redact(self.storage_url),
        )
        if created and self.s.resume:
            optuna.delete_study(study_name=self.study_name, storage=storage)
            raise nothing_to_resume
        sha = config_sha256(self.original_cfg)
        known = study.user_attrs.get("original_sha256")
        if known is None:
            study.set_user_attr("original_sha256", sha)
            study.set_user_attr("model", self.model)
            study.set_user_attr("latency_budget_ms", self.s.latency_budget_ms)
            study.set_user_attr("percentile", self.s.percentile)
        elif known != sha:
            raise UsageError(
                f"{self.config_path} differs from the config study {self.study_name!r} started from",
                hint="restore that config, or start a new study (another -o DIR or --study-name)",
            )
        elif (
            study.user_attrs.get("latency_budget_ms") != self.s.latency_budget_ms
            or study.user_attrs.get("percentile") != self.s.percentile
        ):
            raise UsageError(
                f"study {self.study_name!r} was run with --latency-budget "
                f"{study.user_attrs.get('latency_budget_ms')}ms --percentile {study.user_attrs.get('percentile')}",
                hint="resume with the same budget, or start a new study",
            )
        _study.fail_stale(study)
        if created or (self.s.resume and not study.get_trials(deepcopy=False)):
            study.enqueue_trial(
                self._original_fixed_params(), user_attrs={_study.A_ORIGINAL: True}, skip_if_exists=True
            )
        return study

    def _original_fixed_params(self) -> dict[str, Any]:
        """The original's parameters, fitted to the distributions (trial 0 applies the file as is)."""
        orig = self.space.original_params
        out: dict[str, Any] = {}
        db_on = bool(orig.get(P_DB))
        for d in self.space.dimensions:
            if d.when_dynamic_batching and not db_on:
                continue
            value = orig.get(d.name)
            if d.is_range:
                assert d.low is not None and d.high is not None
                out[d.name] = log_clamp(float(value or 0), d.low, d.high)
            elif value in d.choices:
                out[d.name] = value
        return out

    # -- one trial -------------------------------------------------------------------------
    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        params: dict[str, Any] = {}
        db_dim = self.space.dimension(P_DB)
        for d in self.space.dimensions:
            if d.when_dynamic_batching:
                on = params.get(P_DB) if db_dim is not None else self.space.original_params.get(P_DB)
                if not on:
                    continue
            if d.is_range:
                assert d.low is not None and d.high is not None
                params[d.name] = trial.suggest_int(d.name, d.low, d.high, log=True)
            else:
                params[d.name] = trial.suggest_categorical(d.name, list(d.choices))
        return params

    def _searched(self, cfg: ModelConfig) -> dict[str, Any]:
        """The searched parameters as a config holds them (for records and the applied check)."""
        full = extract_params(
            cfg,
            backend=self.space.backend,
            precision_parameter=self.space.precision_parameter,
            engine_files=self.space.engine_files,
        )
        names = {d.name for d in self.space.dimensions}
        return normalize_params({k: v for k, v in full.items() if k in names})

    def _check_applied(self, candidate: ModelConfig) -> str | None:
        """None when the server applied what was written; else what differs."""
        applied = config_from_dict(self.server.model_config(self.model), source=f"applied config of {self.model}")
        want, got = self._searched(candidate), self._searched(applied)
        for params in (want, got):
            if params.get(P_PREF) == "max":
                params[P_PREF] = "none"  # the server reports [max_batch_size] for no preferred sizes
        diffs = [
            f"{k}: wrote {want[k]!r}, server applied {got.get(k)!r}"
            for k in want
            if not (k == P_KIND and want[k] == "auto") and got.get(k) != want[k]
        ]
        return "; ".join(diffs) or None

    def _restore_original(self) -> None:
        """Put the original back and reload it; a server that cannot reload it ends the search."""
        write_config(self.config_path, self.original_text)
        try:
            self.server.load_model(self.model)
        except ModelLoadError as err:
            raise ServerError(
                f"the original config of {self.model!r} no longer loads after a failed trial: {err.message}",
                hint="check the server log",
            ) from err

    def _fail(self, study: optuna.Study, trial: optuna.Trial, reason: str, *, interrupted: bool = False) -> None:
        trial.set_user_attr(_study.A_FAIL_REASON, reason[:2000])
        if interrupted:
            trial.set_user_attr(_study.A_INTERRUPTED, True)
        study.tell(trial, state=TrialState.FAIL)

    def run_trial(self, study: optuna.Study, trial: optuna.Trial) -> None:
        t0 = time.monotonic()
        number = trial.number
        is_original = bool(trial.user_attrs.get(_study.A_ORIGINAL, False))
        params = self.suggest(trial)
        if is_original:
            candidate, text = self.original_cfg, self.original_text
        else:
            candidate = apply_params(self.original_cfg, params, self.space)
            text = self.header + format_config(candidate)
            # What we print must parse back to the same config (no field lost on the way).
            if config_sha256(parse_config(text, source=f"trial {number} config")) != config_sha256(candidate):
                raise ConfigError(f"trial {number}: the candidate config does not round-trip through text format")
        record_params = self._searched(candidate)
        sha = config_sha256(candidate)
        trial.set_user_attr("params", record_params)
        trial.set_user_attr("config_sha256", sha)
        trial.set_user_attr("config_pbtxt", text)
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
        self.trial_configs[number] = text
        label = "original" if is_original else _fmt_params(record_params)
        of = f"/{self.s.trials}" if self.s.trials else ""
        same = None if is_original else self._measured_before(study, sha, number)
        if same is not None:
            self._repeat(study, trial, same)
            self.echo(f"trial {number}{of}: {label}: same config as trial {same.number}, not measured again")
            return
        self.dup_streak = 0
        self.echo(f"trial {number}{of}: {label}")
        try:
            with _study.heartbeat(study, trial):
                verdict, reload_s, measure_s = self._evaluate(study, trial, candidate, text, number)
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
        if verdict is None:
            return
        duration = time.monotonic() - t0
        metrics = dict(verdict.metrics)
        metrics.update({"reload_s": reload_s, "measure_s": measure_s})
        trial.set_user_attr("duration_s", duration)
        trial.set_user_attr("metrics", metrics)
        trial.set_user_attr("lowest_latency_us", verdict.lowest_latency_us)
        feasible, constraints = self._constraints(verdict)
        trial.set_user_attr("feasible", feasible)
        _study.set_constraints(trial, constraints)
        if verdict.feasible_load is not None:
            trial.set_user_attr("load", {"mode": verdict.feasible_load.mode, "value": verdict.feasible_load.value})
            trial.set_user_attr("throughput_infer_per_s", verdict.throughput_infer_per_s)
            trial.set_user_attr("latency_us", verdict.latency_us)
        pct = f"p{self.s.percentile:g}"
        if verdict.lowest_over_budget and self.s.objective == "throughput":
            trial.report(verdict.lowest_throughput, step=0)
            reason = f"{pct} {verdict.lowest_latency_us / 1e3:.2f} ms at concurrency 1 is over the budget"
            trial.set_user_attr(_study.A_FAIL_REASON, reason)
            study.tell(trial, state=TrialState.PRUNED)
            self.echo(f"  pruned: {reason} ({duration:.1f} s)")
            return
        tput = (
            verdict.throughput_infer_per_s if verdict.throughput_infer_per_s is not None else verdict.lowest_throughput
        )
        lat = verdict.latency_us if verdict.latency_us is not None else verdict.lowest_latency_us
        if self.s.objective == "pareto":
            study.tell(trial, [tput, lat / 1e3])
        else:
            study.tell(trial, tput)
        status = "within budget" if feasible else "INFEASIBLE"
        load = f"concurrency {int(verdict.feasible_load.value)}" if verdict.feasible_load else "lowest load"
        self.echo(
            f"  {tput:.1f} infer/s at {load}, {pct} {lat / 1e3:.2f} ms: {status} "
            f"(reload {reload_s:.1f} s, measure {measure_s:.1f} s)"
        )

    def _constraints(self, v: Verdict) -> tuple[bool, dict[str, float]]:
        """Constraint values (<= 0 is satisfied), relative so they mix on one scale."""
        budget_us = self.s.latency_budget_ms * 1e3
        lat = v.latency_us if v.latency_us is not None else v.lowest_latency_us
        rel = (lat - budget_us) / budget_us
        cons = {"latency": rel if v.within_budget else max(1e-6, rel)}
        if self.s.min_throughput is not None:
            tput = v.throughput_infer_per_s or 0.0
            cons["min_throughput"] = (self.s.min_throughput - tput) / self.s.min_throughput
        if self.s.max_gpu_memory_bytes is not None:
            mem = v.gpu_memory_bytes
            limit = self.s.max_gpu_memory_bytes
            cons["gpu_memory"] = 0.0 if mem is None else (mem - limit) / limit
        cons = {k: (c if math.isfinite(c) else 1e6) for k, c in cons.items()}
        return all(c <= 0 for c in cons.values()), cons

    def _evaluate(
        self, study: optuna.Study, trial: optuna.Trial, candidate: ModelConfig, text: str, number: int
    ) -> tuple[Verdict | None, float, float]:
        t0 = time.monotonic()
        write_config(self.config_path, text)
        try:
            self.server.load_model(self.model)
        except ModelLoadError as err:
            reload_s = time.monotonic() - t0
            self.echo(f"  failed to load: {err.message.splitlines()[0][:300]}")
            self._restore_original()
            self._fail(study, trial, err.message)
            return None, reload_s, 0.0
        reload_s = time.monotonic() - t0
        try:
            mismatch = self._check_applied(candidate)
        except ModelNotFoundError as err:
            mismatch = f"config not readable after load: {err.message}"
        if mismatch:
            self.echo(f"  failed: {mismatch}")
            self._fail(study, trial, f"server did not apply the candidate: {mismatch}")
            return None, reload_s, 0.0
        measure = self.measure or _default_measure()
        record_path = self.out_dir / "runs" / f"trial-{number:03d}.json"
        t1 = time.monotonic()
        try:
            record = measure(
                self.server,
                self.judge.spec(self.model),
                command=self.s.command,
                record_path=record_path,
            )
        except MeasurementError as err:
            self.echo(f"  measurement failed: {err.one_line()}")
            if not self.server.is_ready():
                raise ServerError(
                    f"the server stopped answering during trial {number}: {err.one_line()}",
                    log_tail=self.server.log_tail(),
                ) from err
            self._fail(study, trial, f"measurement failed: {err.one_line()}")
            return None, reload_s, time.monotonic() - t1
        measure_s = time.monotonic() - t1
        if not record_path.exists():
            record.save(record_path)
        if record.status != "ok" and not record.levels:
            self._fail(study, trial, f"measurement {record.status}: {record.error or ''}")
            return None, reload_s, measure_s
        verdict = judge(record, latency_budget_ms=self.s.latency_budget_ms, percentile=self.s.percentile)
        return verdict, reload_s, measure_s

    def _measured_before(self, study: optuna.Study, sha: str, number: int) -> FrozenTrial | None:
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
            if (
                t.number != number
                and t.user_attrs.get("config_sha256") == sha
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

    # -- the loop --------------------------------------------------------------------------
    def should_stop(self, study: optuna.Study) -> str | None:
        if self.s.trials is not None and _study.trials_used(study) >= self.s.trials:
            return f"{self.s.trials} trials done"
        if isinstance(self.sampler, optuna.samplers.GridSampler) and self.sampler.is_exhausted(study):
            return "every point of the grid measured"
        if self.dup_streak >= MAX_REPEATS:
            return f"{MAX_REPEATS} repeated configs in a row: the search space looks exhausted"
        if self.s.max_time_s is not None and time.monotonic() - self.started >= self.s.max_time_s:
            return f"--max-time {self.s.max_time_s:g} s reached"
        return None

    def record(
        self, study: optuna.Study, status: Literal["ok", "failed", "interrupted"], error: str | None
    ) -> TuneRecord:
        frozen = _outputs.study_trials(study)
        trials = tuple(_outputs.trial_record(t) for t in frozen)
        configs = {t.number: str(t.user_attrs.get("config_pbtxt", "")) for t in frozen}
        best = _outputs.best_trial(trials)
        front = _outputs.pareto_front(trials)  # informative in both modes: throughput vs latency
        return TuneRecord(
            perfkit_version=__version__,
            created_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            command=self.s.command,
            machine={
                "hostname": socket.gethostname(),
                "platform": platform.platform(),
                "cpu_count": os.cpu_count(),
                "python": platform.python_version(),
            },
            server=self._server_info(),
            model=self.model,
            latency_budget_ms=self.s.latency_budget_ms,
            percentile=self.s.percentile,
            objective=self.s.objective,
            original_config=self.original_text,
            best_config=configs.get(best.number) if best else None,
            best_trial=best.number if best else None,
            trials=trials,
            pareto_trials=tuple(r.number for r in front),
            importances=_study.param_importances(study, self.s.objective),
            status=status,
            error=error,
        )

    def _server_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"url": self.server.endpoints.http_url, "mode": self.server.mode}
        try:
            info["version"] = self.server.version()
        except ServerError:
            info["version"] = "unknown (unreachable)"
        info["study"] = {"storage": _study._redact(self.storage_url), "name": self.study_name}
        info["space"] = [d.describe() for d in self.space.dimensions]
        return info


def tune(
    server: Server,
    settings: TuneSettings,
    space: TuneSpace,
    *,
    model_repository: Path,
    measure: Measure | None = None,
    echo: Echo = print,
) -> TuneResult:
    """Search configs of settings.model for the most throughput within the latency budget.

    Writes each candidate into model_repository/<model>/config.pbtxt, reloads it on the server
    (explicit model control), measures, and always puts the original back (even on Ctrl-C).
    Outputs go to settings.output_dir. Raises UsageError/InputError for bad settings or config,
    ServerError when the server dies or the original no longer loads, KeyboardInterrupt after
    cleanup and partial outputs.
    """
    t = _Tuner(server, settings, space, model_repository, measure, echo)
    echo(f"perfkit tune: {t.model} ({t.space.backend}), p{settings.percentile:g} <= {settings.latency_budget_ms:g} ms")
    for d in t.space.dimensions:
        echo(f"  search {d.describe()}")
    for note in t.space.notes:
        echo(f"  note: {note}")
    if not t.space.dimensions:
        raise UsageError(f"nothing to search for {t.model!r}", hint="widen the space with the search-space flags")
    study = t.open_study()
    echo(f"  study {t.study_name!r} in {_study._redact(t.storage_url)} ({len(study.trials)} trials so far)")
    status: Literal["ok", "failed", "interrupted"] = "ok"
    error: str | None = None
    result_paths: dict[str, Path] = {}
    with ConfigGuard(t.config_path, server, t.model):
        try:
            while (why := t.should_stop(study)) is None:
                _study.fail_stale(study)
                trial = study.ask()
                t.run_trial(study, trial)
            echo(f"stopping: {why}")
        except KeyboardInterrupt:
            status, error = "interrupted", "interrupted by the user"
            raise
        except PerfkitError as err:
            status, error = "failed", err.one_line()
            raise
        finally:
            rec = t.record(study, status, error)
            result_paths = _outputs.write_outputs(t.out_dir, rec, trial_configs=t.trial_configs)
            _summarize(rec, t.out_dir, echo)
    backup = None
    if settings.apply and rec.best_config is not None:
        backup = _outputs.apply_best(t.config_path, rec.best_config)
        if backup is None:
            echo("--apply: the original is already the best config; nothing written")
        else:
            server.load_model(t.model)
            echo(f"--apply: wrote trial {rec.best_trial} to {t.config_path} (backup {backup.name}) and reloaded")
    return TuneResult(record=rec, output_dir=t.out_dir, paths=result_paths, applied_backup=backup)


def _summarize(rec: TuneRecord, out_dir: Path, echo: Echo) -> None:
    done = [r for r in rec.trials if r.state != "running"]
    counts = {s: sum(1 for r in done if r.state == s) for s in ("complete", "pruned", "failed")}
    echo(
        f"{len(done)} trials: {counts['complete']} complete, {counts['pruned']} pruned, {counts['failed']} failed"
        f" (status {rec.status})"
    )
    best = next((r for r in rec.trials if r.number == rec.best_trial), None)
    orig = _outputs.original_trial(rec.trials)
    if best is None:
        echo("no config met the budget: nothing to recommend")
    else:
        gain = ""
        if orig is not None and orig.feasible and orig.throughput_infer_per_s:
            pct = 100.0 * ((best.throughput_infer_per_s or 0) / orig.throughput_infer_per_s - 1)
            gain = f", {pct:+.0f}% vs the original ({orig.throughput_infer_per_s:.1f} infer/s)"
        elif orig is not None:
            gain = ", the original did not meet the budget"
        echo(
            f"best: trial {best.number} {_fmt_params(best.params)}: {best.throughput_infer_per_s:.1f} infer/s, "
            f"p{rec.percentile:g} {(best.latency_us or 0) / 1e3:.2f} ms{gain}"
        )
        if rec.pareto_trials:
            echo(f"pareto front: trials {', '.join(map(str, rec.pareto_trials))}")
    if rec.importances:
        echo("importance: " + ", ".join(f"{k} {v:.2f}" for k, v in rec.importances.items()))
    echo(f"results in {out_dir}")
