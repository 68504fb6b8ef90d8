"""A pipeline to tune as one: an ensemble (its steps, nested ensembles flattened) or a python BLS
model with the models it calls (--composing-models). Its search space is the product of one
sub-space per step, each from the same knob registry as a single model's; a joint point names
each parameter "<step>.<knob>". Every candidate is checked step by step (the single-model rules)
and across the pipeline (the repository guard: every ensemble must still load).
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from perfkit.errors import CandidateRejectedError, ConfigError, InputError, UsageError
from perfkit.server.modelconfig import ModelConfig, config_pbtxt_sha256, read_config, render_config
from perfkit.tuner._repo_guard import broken_by, ensemble_problems, is_ensemble, repository_configs
from perfkit.tuner._space import (
    P_DB,
    Dimension,
    ResolvedSpace,
    TuneSpace,
    apply_params,
    candidate_points,
    extract_params,
    normalize_params,
    resolve,
)

SEP = "."  # joint parameter names: "<step>.<knob>"
BUNDLE_HEADER = "# ==== perfkit pipeline: {model}/config.pbtxt ====\n"
MAX_DEPTH = 8  # nested ensembles deeper than this are refused (Triton has no limit; a cycle would loop)


@dataclass(frozen=True)
class Step:
    """One model of the pipeline: its config, its sub-space, or why it is held fixed."""

    model: str
    config_path: Path
    original_text: str
    original_cfg: ModelConfig
    space: ResolvedSpace
    fixed: str | None = None  # why it is not searched (None: searched)
    ensembles: tuple[str, ...] = ()  # the ensembles of this pipeline that call it directly

    @property
    def searched(self) -> bool:
        return self.fixed is None and bool(self.space.dimensions)


@dataclass(frozen=True)
class Pipeline:
    """What is measured (the ensemble or BLS model) and the steps searched jointly."""

    model: str
    kind: Literal["ensemble", "bls", "mix"]  # mix: models sharing a server under a traffic mix (tuner/_mix)
    repository: Path
    config_path: Path
    original_text: str
    original_cfg: ModelConfig
    steps: tuple[Step, ...]
    space: ResolvedSpace  # the joint space: dimension names "<step>.<knob>"
    notes: tuple[str, ...] = ()
    refused: str | None = None
    nested: tuple[str, ...] = ()  # ensembles inside the pipeline (flattened into their steps)

    def step(self, model: str) -> Step:
        return next(s for s in self.steps if s.model == model)

    @property
    def searched_steps(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.searched)

    @property
    def paths(self) -> dict[str, Path]:
        """Every config file the search may write (the searched steps')."""
        return {s.model: s.config_path for s in self.searched_steps}

    @property
    def original_bundle(self) -> str:
        return bundle({s.model: s.original_text for s in self.searched_steps})


def is_pipeline(repository: Path | None, model: str) -> bool:
    """Whether repository/model is an ensemble (which perfkit tunes as a pipeline)."""
    if repository is None:
        return False
    path = Path(repository) / model / "config.pbtxt"
    try:
        return is_ensemble(read_config(path))
    except ConfigError:
        return False


def bundle(texts: Mapping[str, str]) -> str:
    """Several configs as one text (a trial's configs in the study and the tune record)."""
    return "".join(BUNDLE_HEADER.format(model=m) + t + ("" if t.endswith("\n") else "\n") for m, t in texts.items())


def unbundle(text: str) -> dict[str, str]:
    """The configs of a bundle, by model (the inverse of bundle)."""
    out: dict[str, str] = {}
    model: str | None = None
    lines: list[str] = []
    prefix, suffix = BUNDLE_HEADER.split("{model}")
    for line in text.splitlines(keepends=True):
        if line.startswith(prefix) and line.endswith(suffix):
            if model is not None:
                out[model] = "".join(lines)
            model, lines = line[len(prefix) : -len(suffix)], []
        else:
            lines.append(line)
    if model is not None:
        out[model] = "".join(lines)
    return out


def _read(repository: Path, model: str, used_by: str) -> tuple[Path, str, ModelConfig]:
    path = Path(repository) / model / "config.pbtxt"
    if not path.is_file():
        raise InputError(
            f"{used_by} calls model {model!r}, which is not in the model repository {repository}",
            hint="tune the pipeline in the repository that holds every step",
        )
    return path, path.read_bytes().decode("utf-8"), read_config(path)


def _flatten(
    repository: Path, name: str, cfg: ModelConfig, depth: int, seen: list[str]
) -> tuple[dict[str, list[str]], list[str]]:
    """Leaf steps of an ensemble (nested ensembles flattened): model -> ensembles calling it."""
    if depth > MAX_DEPTH or name in seen:
        raise ConfigError(f"ensemble {name!r} nests ensembles in a cycle or deeper than {MAX_DEPTH}")
    leaves: dict[str, list[str]] = {}
    nested: list[str] = []
    for st in cfg.ensemble_scheduling.step:
        _, _, sub = _read(repository, st.model_name, f"ensemble {name!r}")
        if is_ensemble(sub):
            nested.append(st.model_name)
            more, deeper = _flatten(repository, st.model_name, sub, depth + 1, [*seen, name])
            nested += deeper
            for m, ens in more.items():
                leaves.setdefault(m, []).extend(e for e in ens if e not in leaves.get(m, []))
        else:
            leaves.setdefault(st.model_name, [])
            if name not in leaves[st.model_name]:
                leaves[st.model_name].append(name)
    return leaves, nested


def build(
    space: TuneSpace,
    repository: Path,
    model: str,
    *,
    composing: Sequence[str] = (),
    latency_budget_us: float,
    gpus: int | None = None,
    gpu_available: bool = False,
    cpu_cores: int | None = None,
) -> Pipeline:
    """The pipeline of `model`: an ensemble's steps, or a BLS model and `composing`. Raises
    InputError/ConfigError for a step missing from the repository or unreadable, UsageError for
    --composing-models on an ensemble."""
    repository = Path(repository)
    top_path, top_text, top_cfg = _read(repository, model, "-m")
    kind: Literal["ensemble", "bls"] = "ensemble" if is_ensemble(top_cfg) else "bls"
    nested: list[str] = []
    notes: list[str] = []
    if kind == "ensemble" and not top_cfg.ensemble_scheduling.step:
        raise ConfigError(
            f"ensemble {model!r} has no steps: Triton refuses it (must specify 'step' for ensemble;"
            " triton-inference-server/core src/model_config_utils.cc ValidateEnsembleSchedulingConfig)",
            hint="list its steps in ensemble_scheduling",
        )
    if kind == "ensemble":
        if composing:
            raise UsageError(
                f"--composing-models: {model!r} is an ensemble, its steps are read from its config",
                hint="give --composing-models for a python (BLS) model that calls other models",
            )
        leaves, nested = _flatten(repository, model, top_cfg, 0, [])
        members = set(nested) | {model}
        order = list(leaves)
    else:
        if not composing:
            raise UsageError(f"{model!r} is not an ensemble: name the models it calls with --composing-models a,b")
        leaves = {m: [] for m in dict.fromkeys([model, *composing])}
        members = {model}
        order = list(leaves)
    steps: list[Step] = []
    # The budget is the pipeline's, end to end: each step's queue delay is bounded by its share.
    step_budget_us = latency_budget_us / max(1, len(order))
    for name in order:
        path, text, cfg = _read(repository, name, f"pipeline {model!r}")
        rs = resolve(
            space, cfg, path.parent, latency_budget_us=step_budget_us, gpus=gpus,
            gpu_available=gpu_available, cpu_cores=cpu_cores, refuse=False,
        )  # fmt: skip
        fixed = rs.refused
        others = [e for e in _callers(repository, name) if e not in members]
        if fixed is None and others:
            fixed = (
                f"also a step of ensemble {', '.join(others)}: a setting tuned for {model!r}'s traffic would"
                f" change that pipeline too (tune {others[0]!r} on its own to search it there)"
            )
        if fixed is None and not rs.dimensions:
            fixed = "nothing to search for it (see its knobs with perfkit tune -m " + name + " --dry-run)"
        steps.append(Step(name, path, text, cfg, rs, fixed, tuple(leaves.get(name, ()))))
    for n in nested:
        notes.append(f"nested ensemble {n!r}: its steps are searched as steps of {model!r}")
    for s in steps:
        if s.fixed:
            notes.append(f"step {s.model!r} held at its config: {s.fixed}")
        notes += [f"{s.model}: {n}" for n in s.space.notes]
    joint = _joint_space(model, kind, steps, notes)
    refused = None
    repo_cfgs = repository_configs(repository)
    for ens in (model, *nested) if kind == "ensemble" else ():
        problems = ensemble_problems(ens, repo_cfgs.get(ens, top_cfg), repo_cfgs)
        if problems:
            refused = f"Triton would not load the pipeline as it is: {problems[0].one_line()}"
            break
    if refused:
        joint = replace(joint, refused=refused)
    elif not any(s.searched for s in steps):
        refused = f"no step of {model!r} can be tuned: " + "; ".join(f"{s.model}: {s.fixed}" for s in steps)
        joint = replace(joint, refused=refused)
    return Pipeline(model, kind, repository, top_path, top_text, top_cfg, tuple(steps), joint, tuple(notes),
                    refused, tuple(nested))  # fmt: skip


def _callers(repository: Path, model: str) -> list[str]:
    """Every ensemble of the repository with a step on `model`."""
    out = []
    for name, cfg in repository_configs(repository).items():
        if is_ensemble(cfg) and any(st.model_name == model for st in cfg.ensemble_scheduling.step):
            out.append(name)
    return out


def _joint_space(model: str, kind: str, steps: Sequence[Step], notes: Sequence[str]) -> ResolvedSpace:
    dims: list[Dimension] = []
    orig: dict[str, Any] = {}
    reasons: dict[str, str] = {}
    for s in steps:
        if not s.searched:
            continue
        for d in s.space.dimensions:
            dims.append(replace(d, name=f"{s.model}{SEP}{d.name}"))
        for k, v in s.space.original_params.items():
            orig[f"{s.model}{SEP}{k}"] = v
        for k, v in s.space.reasons.items():
            reasons[f"{s.model}{SEP}{k}"] = v
    first = next((s.space for s in steps if s.searched), steps[0].space if steps else None)
    return ResolvedSpace(
        model=model,
        backend={"ensemble": "ensemble", "bls": "python (BLS)", "mix": "traffic mix"}[kind],
        precision_via="",
        dimensions=tuple(dims),
        original_params=orig,
        notes=tuple(notes),
        reasons=reasons,
        gpus=first.gpus if first else 0,
        cpu_cores=first.cpu_cores if first else 1,
    )


def split(params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A joint point as one point per step."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in params.items():
        step, _, knob = key.rpartition(SEP)
        out.setdefault(step, {})[knob] = value
    return out


def join(per_step: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One point per step as a joint point (keys in each step's knob order)."""
    return {f"{m}{SEP}{k}": v for m, p in per_step.items() for k, v in normalize_params(p).items()}


@dataclass(frozen=True)
class JointCandidate:
    """The configs of one joint point: every searched step's config and its text."""

    configs: dict[str, ModelConfig]
    texts: dict[str, str]
    params: dict[str, Any] = field(default_factory=dict)  # as the configs hold them, joint names

    @property
    def text(self) -> str:
        return bundle(self.texts)

    @property
    def sha256(self) -> str:
        joined = "".join(f"{m}:{config_pbtxt_sha256(c)};" for m, c in sorted(self.configs.items()))
        return hashlib.sha256(joined.encode()).hexdigest()


def original_candidate(p: Pipeline) -> JointCandidate:
    """The pipeline as the repository holds it."""
    steps = p.searched_steps
    configs = {s.model: s.original_cfg for s in steps}
    return JointCandidate(configs, {s.model: s.original_text for s in steps}, searched_params(p, configs))


def searched_params(p: Pipeline, configs: Mapping[str, ModelConfig]) -> dict[str, Any]:
    """The searched parameters as the step configs hold them (joint names)."""
    per: dict[str, dict[str, Any]] = {}
    for s in p.searched_steps:
        rs = s.space
        full = extract_params(
            configs[s.model], backend=rs.backend, precision_parameter=rs.precision_parameter,
            engine_files=rs.engine_files, parameter_keys=rs.parameter_keys,
        )  # fmt: skip
        names = {d.name for d in rs.dimensions}
        per[s.model] = {k: v for k, v in full.items() if k in names}
    return join(per)


def candidate(p: Pipeline, params: Mapping[str, Any]) -> JointCandidate:
    """The step configs of a joint point, each validated on its own and the set across the
    pipeline (every ensemble of the repository must still load). Raises CandidateRejectedError."""
    per = split(params)
    configs: dict[str, ModelConfig] = {}
    texts: dict[str, str] = {}
    for s in p.searched_steps:
        try:
            cfg = apply_params(s.original_cfg, per.get(s.model, {}), s.space)
        except CandidateRejectedError as err:
            raise CandidateRejectedError(f"step {s.model}: {err.message}") from None
        configs[s.model] = cfg
        texts[s.model] = render_config(s.original_text, cfg)
    broken = broken_by(configs, p.repository)
    if broken:
        raise CandidateRejectedError(f"candidate rejected: {broken[0].one_line()}")
    return JointCandidate(configs, texts, searched_params(p, configs))


def joint_points(p: Pipeline, *, limit: int = 200, seed: int = 0) -> list[dict[str, Any]]:
    """The joint points a search would try: the product of every step's points when it holds at
    most `limit`, else `limit` drawn at random (seeded)."""
    per = {s.model: candidate_points(s.space, limit=limit, seed=seed) for s in p.searched_steps}
    names = list(per)
    total = 1
    for n in names:
        total *= max(1, len(per[n]))
    if total <= limit:
        return [join(dict(zip(names, combo))) for combo in itertools.product(*(per[n] for n in names))]
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for _ in range(limit * 3):
        point = join({n: rng.choice(per[n]) for n in names})
        key = tuple(sorted(point.items()))
        if key not in seen:
            seen.add(key)
            out.append(point)
        if len(out) >= limit:
            break
    return out


def db_on(p: Pipeline, step: str, params: Mapping[str, Any]) -> bool:
    """Whether a step's dynamic batcher is on at this (partial) joint point."""
    key = f"{step}{SEP}{P_DB}"
    if key in params:
        return bool(params[key])
    return bool(p.step(step).space.original_params.get(P_DB))
