"""Tuning several models that share a server, under a traffic mix, as one search.

`perfkit tune -m A -m B --mix A:3,B:1 --latency-budget A:20ms,B:50ms` is the pipeline subject over
a different set and a different measurement: the models of the mix are the "steps" (one
sub-space each, the same knob registry, every config held by one RepoGuard, --apply all or
nothing, best/<model>/config.pbtxt and a diff for each), and a trial measures the mix profile
(one engine drawing each request's model by weight). A level is within budget only when every
model's percentile is within that model's own budget (`level_budget_us` with the mix's scale),
so the search finds the highest total throughput at the mix that keeps every model in budget.
The models compete for the device: instance counts and batch sizes of one change the other's
latency, which is why they are searched jointly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfkit.errors import ConfigError, UsageError
from perfkit.records import Budget, LevelResult
from perfkit.tuner import _pipeline
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._repo_guard import is_ensemble
from perfkit.tuner._route import ConfigRoute
from perfkit.tuner._space import TuneSpace, resolve
from perfkit.tuner._subject import gpu_available
from perfkit.tuner._subject_model import ModelSubject
from perfkit.tuner._subject_pipeline import PipelineSubject

if TYPE_CHECKING:
    from perfkit.tuner._settings import TuneSettings
    from perfkit.tuner._trial import TrialRunner


def build_mix(
    space: TuneSpace,
    repository: Path,
    models: Sequence[str],
    budgets_ms: Mapping[str, float],
    *,
    gpus: int | None = None,
    gpu_available: bool = False,
) -> _pipeline.Pipeline:
    """The mix as a pipeline of kind "mix": each model a step with its own sub-space (its queue
    delays bounded by its own budget). Raises InputError/ConfigError for a model missing from the
    repository or unreadable."""
    repository = Path(repository)
    steps: list[_pipeline.Step] = []
    notes: list[str] = []
    for name in models:
        path, text, cfg = _pipeline._read(repository, name, "-m")
        mine = dataclasses.replace(space, shared_with=tuple(m for m in models if m != name))
        rs = resolve(
            mine, cfg, path.parent, latency_budget_us=budgets_ms[name] * 1e3, gpus=gpus,
            gpu_available=gpu_available, refuse=False,
        )  # fmt: skip
        fixed = rs.refused
        if fixed is None and is_ensemble(cfg):
            fixed = f"an ensemble is measured in the mix but not searched (tune its steps with perfkit tune -m {name})"
        if fixed is None and not rs.dimensions:
            fixed = f"nothing to search for it (see its knobs with perfkit tune -m {name} --dry-run)"
        steps.append(_pipeline.Step(name, path, text, cfg, rs, fixed))
        if fixed:
            notes.append(f"model {name!r} held at its config: {fixed}")
        notes += [f"{name}: {n}" for n in rs.notes]
    own = ", ".join(f"{m} {budgets_ms[m]:g} ms" for m in models)
    notes.insert(
        0,
        f"traffic mix of {', '.join(models)}: every model within its own budget ({own}); a trial's latency"
        f" figure is the model nearest its budget, against {models[0]}'s",
    )
    joint = _pipeline._joint_space(models[0], "mix", steps, notes)
    refused = None
    if not any(s.searched for s in steps):
        refused = "no model of the mix can be tuned: " + "; ".join(f"{s.model}: {s.fixed}" for s in steps)
    first = steps[0]
    return _pipeline.Pipeline(models[0], "mix", repository, first.config_path, first.original_text, first.original_cfg,
                              tuple(steps), joint, tuple(notes), refused)  # fmt: skip


@dataclass(frozen=True)
class MixBreakdown(TuneEvent):
    """Each model's throughput and percentile against its own budget, at the load a trial reached."""

    number: int
    percentile: float
    rows: tuple[tuple[str, float, float, float], ...]  # (model, infer/s, percentile us, budget ms)

    def line(self) -> str:
        cells = [
            f"{m} {t:,.1f} infer/s p{self.percentile:g} {lat / 1e3:.2f} ms of {b:g} ms"
            + (" OVER" if lat > b * 1e3 else "")
            for m, t, lat, b in self.rows
        ]
        return "  models: " + "; ".join(cells)


class MixSubject(PipelineSubject):
    """The models of a mix as one subject (PipelineSubject's), which can also stand each model
    alone, held to its own budget: what the predicted search calibrates one model at a time
    (tuner/_search/_mix_calibrate.py)."""

    def __init__(
        self, pipeline: _pipeline.Pipeline, *, space: TuneSpace, budget: Budget, weights: Mapping[str, int],
        **kw: Any,
    ) -> None:  # fmt: skip
        super().__init__(pipeline, **kw)
        self._tune_space = space
        self.budget = budget
        self.weights = dict(weights)

    def member(self, model: str) -> ModelSubject:
        """One model of the mix as a subject of its own: its config, the same knobs, its own budget,
        the mix's route. Raises InputError/ConfigError as ModelSubject does."""
        return ModelSubject(model, self._tune_space, self.repository, budget=self.member_budget(model),
                            route=self.route)  # fmt: skip

    def member_budget(self, model: str) -> Budget:
        """A model's own budget, at the mix's percentile and metric."""
        ms = dict(self.budget.per_model_ms)[model]
        return Budget(ms, self.budget.percentile, self.budget.metric)


def mix_subject(settings: TuneSettings, space: TuneSpace, repository: Path, *, route: ConfigRoute) -> MixSubject:
    """The models of settings.mix as one subject, each held to its own budget (settings.budget.per_model_ms).
    Raises UsageError without a mix, ConfigError when no model of the mix can be tuned."""
    if not settings.mix or not settings.budget.per_model_ms:
        raise UsageError("a traffic mix needs settings.mix and settings.budget.per_model_ms")
    budgets = dict(settings.budget.per_model_ms)
    p = build_mix(space, repository, [m for m, _ in settings.mix], budgets, gpu_available=gpu_available())
    if p.refused:
        raise ConfigError(p.refused, hint="see each model's reason above")
    pct = settings.budget.percentile

    def breakdown(t: TrialRunner, number: int, level: LevelResult | None) -> None:
        """Each model's throughput and percentile against its own budget, at the level judged."""
        if level is not None and level.models:
            rows = tuple(
                (s.model, s.result.throughput_infer_per_s, s.result.latency().percentile_us(pct), budgets[s.model])
                for s in level.models
            )
            t.emit(MixBreakdown(number, pct, rows))

    return MixSubject(
        p,
        space=space,
        budget=settings.budget,
        weights=dict(settings.mix),
        route=route,
        title="mix " + ",".join(f"{m}:{w}" for m, w in settings.mix),
        study_name="tune-mix-" + "+".join(m for m, _ in settings.mix),
        also=breakdown,
    )
