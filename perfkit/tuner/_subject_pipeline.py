"""A pipeline as the subject of a tune: one trial serves every step's candidate config (then
the ensemble, which Triton re-validates against them), the pipeline's entry model is measured
under the end-to-end budget with the one trial trial_load, and each step's queue and compute time and
the batches Triton formed are recorded. The step that costs most steers the next trial. Every
config the search touches is held by the route's guard; --apply installs the whole winning set
or nothing. A traffic mix (_subject_mix) is this subject over the models of the mix.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import optuna

from perfkit.errors import CandidateNotAppliedError, ConfigError, ModelLoadError, ServerError
from perfkit.records import LevelResult, ProfileSpec, RunRecord, ServerStats, TuneRecord
from perfkit.server.base import Server
from perfkit.tuner import _outputs, _pipeline, _trial_state
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._route import ConfigRoute
from perfkit.tuner._seed import batching_seed
from perfkit.tuner._space import P_COUNT, P_DB, P_MBS, Dimension, TuneSpace
from perfkit.tuner._subject import Candidate, gpu_available

if TYPE_CHECKING:
    from perfkit.tuner._settings import TuneSettings
    from perfkit.tuner._trial import TrialRunner
    from perfkit.tuner._verdict import TrialVerdict

log = logging.getLogger(__name__)
STEP_METRICS = ("queue_us", "compute_us", "batch")


@dataclass(frozen=True)
class StepBreakdown(TuneEvent):
    """Where a trial's time went, step by step, and the step it points the search at."""

    number: int
    rows: tuple[tuple[str, float, float, float], ...]  # (step, queue us, compute us, mean batch)
    bottleneck: str | None
    next_try: str | None = None

    def line(self) -> str:
        cells = [f"{m} queue {q / 1e3:.2f} ms compute {c / 1e3:.2f} ms batch {b:.1f}" for m, q, c, b in self.rows]
        out = "  steps: " + "; ".join(cells)
        if self.bottleneck:
            out += f"\n  bottleneck: {self.bottleneck}" + (f" -> next: {self.next_try}" if self.next_try else "")
        return out


@dataclass(frozen=True)
class PipelineApplied(TuneEvent):
    trial: int | None
    backups: tuple[tuple[str, Path], ...]

    def line(self) -> str:
        if not self.backups:
            return "applied: the repository already holds the best configs"
        return f"applied trial {self.trial}: " + ", ".join(f"{m} (backup {b.name})" for m, b in self.backups)


def step_rows(level: LevelResult | None, steps: Sequence[str]) -> list[tuple[str, float, float, float]]:
    """(step, queue us, compute us, mean batch) of each step Triton reported for the level."""
    if level is None:
        return []
    # a traffic mix's level holds each model's own statistics
    by_name: dict[str, ServerStats] = {m.model: m.result.server for m in level.models if m.result.server is not None}
    if level.server is not None:
        by_name.update({c.model: c for c in level.server.composing})
        if level.server.model in steps:
            by_name[level.server.model] = level.server
    rows = []
    for m in steps:
        st = by_name.get(m)
        if st is None:
            continue
        compute = st.compute_input_avg_us + st.compute_infer_avg_us + st.compute_output_avg_us
        batch = st.inference_count / st.execution_count if st.execution_count else 0.0
        rows.append((m, st.queue_avg_us, compute, batch))
    return rows


class PipelineSubject:
    """The configs of several models searched as one joint point: a pipeline's steps, or (built
    by _subject_mix) the models of a traffic mix. Every searched step's config is held by the
    route's guard; a candidate is the bundle of every step's config."""

    def __init__(
        self,
        pipeline: _pipeline.Pipeline,
        *,
        route: ConfigRoute,
        title: str | None = None,
        study_name: str | None = None,
        also: Callable[[TrialRunner, int, LevelResult | None], None] | None = None,
    ) -> None:
        """`also` reads each measured trial's level after the per-step breakdown (a mix's models)."""
        p = self.pipeline = pipeline
        self.model = p.model
        self.title = title or p.model
        self.default_study_name = study_name or f"tune-{p.model}"
        self.repository = p.repository
        self.route = route
        self.config_path = p.config_path
        self.original_cfg = p.original_cfg
        self.original_text = p.original_bundle
        self.space = p.space
        self.step_names = [s.model for s in p.steps]
        self._also = also
        self._served: dict[str, str] = {}  # step -> the text last served (known to be served)
        self._served_on: Server | None = None  # the server _served is of

    @property
    def kind(self) -> Literal["ensemble", "bls", "mix"]:
        return self.pipeline.kind

    @property
    def paths(self) -> Mapping[str, Path]:
        return self.pipeline.paths

    @property
    def reload_last(self) -> Sequence[str]:
        return (self.model,) if self.pipeline.kind == "ensemble" else ()

    def applies(self, d: Dimension, params: Mapping[str, Any]) -> bool:
        step = d.name.rpartition(_pipeline.SEP)[0]
        return not d.when_dynamic_batching or _pipeline.db_on(self.pipeline, step, params)

    def candidate(self, params: Mapping[str, Any], *, is_original: bool, number: int) -> Candidate:
        p = self.pipeline
        cand = _pipeline.original_candidate(p) if is_original else _pipeline.candidate(p, params)
        return Candidate(cand.text, cand.params, cand.sha256)

    # -- the server -----------------------------------------------------------------------------
    def serve(self, server: Server, text: str) -> None:
        texts = _pipeline.unbundle(text)
        if server is not self._served_on:
            # what one server serves says nothing of another's (a subject's grid re-measured on a fresh
            # server skipped every step the tune had last served, and measured the originals)
            self._served, self._served_on = {}, server
        for s in self.pipeline.searched_steps:
            want = texts.get(s.model, s.original_text)
            # what the server serves, not the file (a route may write none): re-served when unknown
            if self._served.get(s.model) != want:
                self._served.pop(s.model, None)
                self.route.serve(server, s.model, s.config_path, want)
                self._served[s.model] = want
        if self.pipeline.kind == "ensemble":
            server.load_model(self.model)  # Triton checks the ensemble against its steps here

    def restore(self, server: Server) -> None:
        try:
            self.serve(server, self.original_text)
        except (CandidateNotAppliedError, ModelLoadError) as err:
            raise ServerError(
                f"the pipeline {self.model!r} no longer loads after a failed trial even with its original configs:"
                f" {err.message}",
                hint=self.route.restore_hint(server, list(dict.fromkeys([*self.step_names, self.model]))),
            ) from err

    def profile_spec(self, spec: ProfileSpec) -> ProfileSpec:
        """Measure with every step's statistics snapshotted (a BLS model names no steps itself)."""
        extra = tuple(m for m in self.step_names if m != spec.model)
        return dataclasses.replace(spec, bls_composing_models=extra)

    def extra_seeds(self, original: Mapping[str, Any]) -> list[dict[str, Any]]:
        point = joint_seed(self.pipeline, original)
        return [point] if point is not None else []

    # -- what Triton tells: per-step breakdown and the next step to spend a trial on ---------------
    def observe(
        self, t: TrialRunner, study: optuna.Study, trial: optuna.Trial, record: RunRecord, verdict: TrialVerdict
    ) -> None:
        load = verdict.feasible_load
        level = next((lv for lv in record.levels if load is not None and lv.load == load), None)
        level = level or (record.levels[0] if record.levels else None)
        rows = step_rows(level, self.step_names)
        for m, q, c, b in rows:
            verdict.metrics.update({f"{m}.queue_us": q, f"{m}.compute_us": c, f"{m}.batch": b})
        if rows:
            bottleneck = max((r for r in rows if self._searched(r[0])), key=lambda r: r[1] + r[2], default=None)
            # Only a new best is worth a neighbour: a steered trial that does not improve ends the
            # chain and the sampler draws again.
            nxt = None
            if bottleneck and t.search.steer and _new_best(study, verdict):
                nxt = self._steer(t, study, trial, bottleneck[0])
            t.emit(StepBreakdown(trial.number, tuple(rows), bottleneck[0] if bottleneck else None, nxt))
        if self._also is not None:
            self._also(t, trial.number, level)

    def _searched(self, model: str) -> bool:
        return any(s.model == model for s in self.pipeline.searched_steps)

    def _steer(self, t: TrialRunner, study: optuna.Study, trial: optuna.Trial, step: str) -> str | None:
        """Queue the current point with the bottleneck step given more room: dynamic batching
        on, else one more instance, else the next max_batch_size. Returns what was queued."""
        base = dict(trial.params)
        # Batching first: where a step pays a fixed cost per execution it is the big lever.
        for knob, bump in ((P_DB, _turn_on), (P_COUNT, _next_choice), (P_MBS, _next_choice)):
            name = f"{step}{_pipeline.SEP}{knob}"
            d = self.space.dimension(name)
            if d is None or name not in base:
                continue
            value = bump(d.choices, base[name])
            if value is None:
                continue
            point = {**base, name: value}
            if knob == P_DB:
                point.update({k: v for k, v in t.original_fixed_params().items() if k.startswith(step + ".")})
                point[name] = True
            study.enqueue_trial(point, skip_if_exists=True)
            return f"{name}={value}"
        return None

    # -- the best -----------------------------------------------------------------------------
    def write_best(self, out_dir: Path, rec: TuneRecord) -> tuple[dict[str, Path], tuple[TuneEvent, ...]]:
        after = (side_by_side(rec),) if rec.best_trial is not None else ()
        return write_best(out_dir, self.pipeline, rec.best_config, rec.best_trial), after

    def best_changes(self, best_text: str) -> dict[str, tuple[Path, str]]:
        return {m: (self.pipeline.step(m).config_path, text) for m, text in _pipeline.unbundle(best_text).items()}

    def applied(self, trial: int | None, backups: Mapping[str, Path]) -> TuneEvent:
        return PipelineApplied(trial, tuple(backups.items()))


def pipeline_subject(
    settings: TuneSettings, space: TuneSpace, repository: Path, *, composing: Sequence[str], route: ConfigRoute
) -> PipelineSubject:
    """An ensemble (its steps read from its config) or a BLS model and `composing`, searched
    jointly under the end-to-end budget. Raises ConfigError when no step can be tuned or Triton
    would not load the pipeline as it is, InputError/UsageError as _pipeline.build does."""
    p = _pipeline.build(
        space, repository, settings.model, composing=composing,
        latency_budget_us=settings.budget.latency_budget_us, gpu_available=gpu_available(),
    )  # fmt: skip
    if p.refused:
        raise ConfigError(p.refused, hint="see perfkit tune --dry-run for each step's reasons")
    return PipelineSubject(p, route=route)


def _new_best(study: optuna.Study, verdict: TrialVerdict) -> bool:
    if verdict.throughput_infer_per_s is None:
        return False
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    best = max((_trial_state.read(t).throughput_infer_per_s or 0.0 for t in done), default=0.0)
    return verdict.throughput_infer_per_s >= best


def _next_choice(choices: Sequence[Any], value: Any) -> Any:
    ordered = sorted(choices)
    bigger = [c for c in ordered if c > value]
    return bigger[0] if bigger else None


def _turn_on(choices: Sequence[Any], value: Any) -> Any:
    return True if (not value and True in choices) else None


def joint_seed(p: _pipeline.Pipeline, original: Mapping[str, Any]) -> dict[str, Any] | None:
    """Every searched step pushed to its batching corner at once (the single-model seed, per step):
    a step that gains from large batches pays off only once the steps before it batch as well."""
    per = _pipeline.split(original)
    out: dict[str, dict[str, Any]] = {}
    for s in p.searched_steps:
        seed = batching_seed(s.space, per.get(s.model, {}))
        out[s.model] = seed if seed is not None else per.get(s.model, {})
    joined = {f"{m}{_pipeline.SEP}{k}": v for m, params in out.items() for k, v in params.items()}
    return None if joined == dict(original) else joined


def write_best(out_dir: Path, p: _pipeline.Pipeline, best: str | None, number: int | None) -> dict[str, Path]:
    """best/<model>/config.pbtxt and best/<model>.diff for each step whose config changed (the
    bundle of every step stays in best/config.pbtxt and best.diff)."""
    if best is None or number is None:
        return {}
    out: dict[str, Path] = {}
    for model, text in _pipeline.unbundle(best).items():
        original = p.step(model).original_text
        if text == original:
            continue
        folder = out_dir / "best" / model
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.pbtxt").write_text(text, encoding="utf-8")
        diff = out_dir / "best" / f"{model}.diff"
        diff.write_text(_outputs.unified_diff(original, text, model, number), encoding="utf-8")
        out[f"best/{model}"] = folder / "config.pbtxt"
    return out


@dataclass(frozen=True)
class StepsSideBySide(TuneEvent):
    lines: tuple[str, ...]

    def line(self) -> str:
        return "\n".join(self.lines)


def side_by_side(rec: Any) -> TuneEvent:
    """The per-step breakdown of the original and the best pipeline, side by side."""
    orig, best = rec.original(), rec.trial(rec.best_trial)
    steps = sorted({k.rpartition(".")[0] for t in (orig, best) if t for k in t.metrics if k.endswith(".queue_us")})
    lines = [f"{'step':<20} {'queue ms (orig -> best)':>26} {'compute ms':>22} {'batch':>14}"]
    for m in steps:

        def cell(key: str, scale: float, m: str = m) -> str:
            a = orig.metrics.get(f"{m}.{key}") if orig else None
            b = best.metrics.get(f"{m}.{key}") if best else None
            fa = "-" if a is None else f"{a / scale:.2f}"
            fb = "-" if b is None else f"{b / scale:.2f}"
            return f"{fa} -> {fb}"

        lines.append(f"{m:<20} {cell('queue_us', 1e3):>26} {cell('compute_us', 1e3):>22} {cell('batch', 1):>14}")
    return StepsSideBySide(tuple(lines))
