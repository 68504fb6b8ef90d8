"""The search space: what the user asks to search (TuneSpace), what applies to one model
(ResolvedSpace, through the knob registry in _knobs), and how a point of the space becomes a
config (apply_params, validated) and back (extract_params).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfkit.errors import ConfigError, InputError
from perfkit.server.modelconfig import ModelConfig
from perfkit.tuner._space._core import (
    DECOUPLED_MEASURABLE,
    DEFAULT_INSTANCE_COUNTS,
    DEFAULT_MAX_BATCH_SIZE_LIMIT,
    DEFAULT_PRECISIONS,
    DEFAULT_PREFERRED,
    GPU_INSTANCES_PER_GPU,
    KINDS,
    P_COUNT,
    P_DB,
    P_DELAY,
    P_KIND,
    P_MBS,
    P_PREC,
    P_PREF,
    P_SEQ_CANDIDATES,
    P_SEQ_DELAY,
    P_SEQ_IDLE,
    P_SEQ_PREF,
    P_SEQ_STRATEGY,
    PARAM_ORDER,
    PREFERRED_CHOICES,
    SEQUENCE_MEASURABLE,
    TRT_PRECISION_MODE,
    Dimension,
    ResolvedSpace,
    TuneSpace,
    grid_points,
    log_clamp,
    normalize_params,
    param_order,
    parse_delay_range,
    parse_trt_engines,
)
from perfkit.tuner._space._fixed import fixed_dimension as _fixed
from perfkit.tuner._space._knobs import ABSENT, KNOB_BY_NAME, KNOBS, Ctx, ExtractInfo, pow2_sizes, pref_label
from perfkit.tuner._space._model import KIND_CPU, Machine, ModelFacts, backend_of, model_facts
from perfkit.tuner._validate import Context, check_candidate, validate

__all__ = [
    "DECOUPLED_BACKENDS",
    "DEFAULT_INSTANCE_COUNTS",
    "DEFAULT_MAX_BATCH_SIZE_LIMIT",
    "DEFAULT_PRECISIONS",
    "DEFAULT_PREFERRED",
    "GPU_INSTANCES_PER_GPU",
    "KINDS",
    "KNOBS",
    "P_COUNT",
    "P_DB",
    "P_DELAY",
    "P_KIND",
    "P_MBS",
    "P_PREC",
    "P_PREF",
    "P_SEQ_CANDIDATES",
    "P_SEQ_DELAY",
    "P_SEQ_IDLE",
    "P_SEQ_PREF",
    "P_SEQ_STRATEGY",
    "PARAM_ORDER",
    "param_order",
    "PREFERRED_CHOICES",
    "TRT_PRECISION_MODE",
    "Dimension",
    "Machine",
    "ResolvedSpace",
    "TuneSpace",
    "apply_params",
    "backend_of",
    "candidate_points",
    "extract_params",
    "grid_points",
    "log_clamp",
    "normalize_params",
    "parse_delay_range",
    "parse_trt_engines",
    "pow2_sizes",
    "is_decoupled",
    "resolve",
    "validation_context",
]


def _engine_files(space: TuneSpace, facts: ModelFacts) -> dict[str, str]:
    """The engines the user declared per precision; each must exist in the served version folder."""
    engines = dict(space.trt_engines)
    for precision, name in engines.items():
        if facts.version_dir is not None and name not in facts.files:
            raise InputError(
                f"--trt-engines {precision}={name}: no such file in {facts.version_dir}",
                hint="name engine files of the served version folder",
            )
    return engines


def extract_params(
    cfg: ModelConfig,
    *,
    backend: str,
    precision_parameter: str = "precision",
    engine_files: Mapping[str, str] | None = None,
    parameter_keys: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The tuner's parameters as a config holds them (the inverse of apply_params)."""
    info = ExtractInfo(
        backend=backend,
        precision_parameter=precision_parameter,
        engine_files=engine_files or {},
        parameter_keys=parameter_keys,
    )
    out: dict[str, Any] = {}
    for knob in KNOBS:
        value = knob.extract(cfg, info)
        if value is not ABSENT:
            out[knob.name] = value
    return out


# Backends whose auto-complete makes every model decoupled, whatever its config.pbtxt says.
DECOUPLED_BACKENDS = {
    "vllm": "the vLLM backend sets decoupled in auto-complete (triton-inference-server/vllm_backend src/model.py)",
}
# Decoupled backends whose throughput config.pbtxt does not govern, and why they stay refused.
ENGINE_TUNED_BACKENDS = {
    "vllm": (
        "its throughput is set by vLLM's engine arguments in model.json (continuous batching, max_num_seqs,"
        " gpu_memory_utilization), which perfkit tune does not search; each extra instance starts another"
        " engine claiming its own share of GPU memory, and Triton's batchers do not apply to it"
    ),
}


def is_decoupled(cfg: ModelConfig, backend: str) -> bool:
    """Whether the model streams its responses (its config says so, or its backend makes it so)."""
    return bool(cfg.model_transaction_policy.decoupled) or backend in DECOUPLED_BACKENDS


def _refusal(cfg: ModelConfig, facts: ModelFacts) -> str | None:
    """Why this model cannot be tuned at all (None: it can)."""
    if facts.backend == "ensemble" or cfg.platform == "ensemble" or cfg.HasField("ensemble_scheduling"):
        # An ensemble has no instances or batcher of its own: its speed is its steps' configs,
        # each a model of its own that perfkit tune can search.
        return f"model {facts.name!r} is an ensemble: it has no instances or batcher of its own"
    if facts.backend in ENGINE_TUNED_BACKENDS:
        return f"model {facts.name!r} is served by the {facts.backend} backend: {ENGINE_TUNED_BACKENDS[facts.backend]}"
    if facts.backend in DECOUPLED_BACKENDS and not DECOUPLED_MEASURABLE:
        why = DECOUPLED_BACKENDS[facts.backend]
        return f"model {facts.name!r} is decoupled: {why}; perfkit profile cannot measure response streams yet"
    if cfg.model_transaction_policy.decoupled and not DECOUPLED_MEASURABLE:
        return (
            f"model {facts.name!r} is decoupled (model_transaction_policy {{ decoupled: true }}):"
            " perfkit profile cannot measure response streams yet"
        )
    if cfg.HasField("sequence_batching") and not SEQUENCE_MEASURABLE:
        return (
            f"model {facts.name!r} uses the sequence batcher: perfkit profile cannot send correlation IDs yet"
            " (its sequence batcher knobs are shown by --dry-run as not yet measurable)"
        )
    return None


_HINTS = {
    "ensemble": "perfkit tune -m ENSEMBLE --model-repository DIR searches its composing models jointly",
    "backend:": "tune vLLM's engine arguments in model.json; profile it with perfkit profile --streaming",
    "decoupled": "tune it once perfkit profile measures streams",
    "sequence": "tune it once perfkit profile sends sequences",
}


def resolve(
    space: TuneSpace,
    cfg: ModelConfig,
    model_dir: Path,
    *,
    latency_budget_us: float,
    gpu_available: bool = False,
    gpus: int | None = None,
    cpu_cores: int | None = None,
    refuse: bool = True,
    max_error_rate: float = 0.0,
    repeat_fraction: float = 0.0,
) -> ResolvedSpace:
    """The dimensions that apply to this model (defaults filled in, original values added).

    gpus: the GPUs the server will have (default: 1 if gpu_available else 0); when given, the
    model's own config is checked against them too. refuse=False (for --dry-run) returns the
    space of a model that cannot be tuned, with the reason in `refused`, instead of raising.
    max_error_rate: the error budget (above 0 the queue policy is searched).
    Raises ConfigError for what cannot be tuned (ensemble, decoupled, sequence batcher, a config
    Triton would reject), UsageError for flags that contradict the model.
    """
    facts = model_facts(cfg, Path(model_dir))
    machine = Machine.here(gpus=gpus, gpu_available=gpu_available)
    if cpu_cores is not None:
        machine = Machine(cpu_cores=cpu_cores, gpus=machine.gpus)
    refused = _refusal(cfg, facts)
    if refused and refuse:
        key = next((k for k in _HINTS if k in refused), "ensemble")
        raise ConfigError(refused, hint=_HINTS[key])
    engines = _engine_files(space, facts) if facts.backend == "tensorrt" else {}
    parameter_keys = tuple(k for k, _ in space.parameters)
    orig = extract_params(
        cfg,
        backend=facts.backend,
        precision_parameter=space.precision_parameter,
        engine_files=engines,
        parameter_keys=parameter_keys,
    )
    ctx = Ctx(
        space,
        cfg,
        facts,
        machine,
        latency_budget_us,
        orig,
        engine_files=engines,
        max_error_rate=max_error_rate,
        repeat_fraction=repeat_fraction,
    )
    if cfg.model_transaction_policy.decoupled:
        # A decoupled model keeps the usual space: Triton core schedules it with the dynamic
        # batcher like any other (triton-inference-server/server docs/user_guide/decoupled_models.md
        # warns only that a backend returning early from execute makes batching eager), and a
        # python model's decoupled `execute` receives "a batch of pb_utils.InferenceRequest"
        # (triton-inference-server/python_backend README.md, "Decoupled mode").
        ctx.notes.append(
            f"{facts.name!r} is decoupled: trials stream over gRPC (perfkit profile --streaming); a ttft: or itl:"
            " budget holds that stream's percentile"
        )
    if cfg.HasField("sequence_batching"):
        ctx.notes.append(
            f"{facts.name!r} uses the sequence batcher: trials send sequences (one per concurrency slot);"
            " searched instead of dynamic batching, which Triton's config allows only in its place"
        )
    # A candidate must leave every ensemble of the repository that calls this model loadable
    # (unless the original already breaks it: then the repository is the user's to fix).
    mbs = cfg.max_batch_size
    holds = bool(facts.ensemble_max_batch) and (mbs == 0 or mbs >= facts.ensemble_max_batch)
    ctx_check = Context(
        facts.backend,
        gpus,
        sequence=cfg.HasField("sequence_batching"),
        ensemble_max_batch=facts.ensemble_max_batch if holds else 0,
        ensembles=facts.ensembles if holds else (),
    )
    broken = [v for v in validate(cfg, ctx_check) if not v.rule.startswith("onnxruntime-int8")]
    if broken and not refused:
        refused = f"the model's own config would be rejected: {broken[0].one_line()}"
        if refuse:
            raise ConfigError(refused, hint="fix the config.pbtxt (or plan for the server it needs: --assume-gpu)")
    dims: list[Dimension] = []
    unmeasurable: list[Dimension] = []
    reasons: dict[str, str] = {}
    fixed = dict(space.fixed)
    unknown = sorted(set(fixed) - set(KNOB_BY_NAME))
    if unknown:
        raise InputError(f"--fix {', '.join(unknown)}: no such knob", hint=f"knobs: {', '.join(KNOB_BY_NAME)}")
    for knob in KNOBS:
        dim, why = knob.resolve(ctx)
        if knob.name in fixed:
            dim, why = _fixed(knob.name, fixed[knob.name], dim, why, orig)
        reasons[knob.name] = why
        if dim is None:
            continue
        if knob.measurable:
            dims.append(dim)
        else:
            unmeasurable.append(dim)
            reasons[knob.name] = "not yet measurable: " + why
    order = param_order()
    dims.sort(key=lambda d: order.index(d.name))
    rs = ResolvedSpace(
        model=facts.name,
        backend=facts.backend,
        precision_via=ctx.precision_via,
        dimensions=tuple(dims),
        original_params=orig,
        engine_files=engines,
        precision_parameter=space.precision_parameter,
        parameter_keys=parameter_keys,
        notes=tuple(ctx.notes),
        reasons=reasons,
        unmeasurable=tuple(unmeasurable),
        gpus=machine.gpus,
        cpu_cores=machine.cpu_cores,
        refused=refused,
        validation=ctx_check,
    )
    return rs


def validation_context(space: ResolvedSpace) -> Context:
    """The validator's context for candidates of this space."""
    return space.validation or Context(space.backend)


def apply_params(original: ModelConfig, params: Mapping[str, Any], space: ResolvedSpace) -> ModelConfig:
    """A copy of the original config with the given parameters set; other fields untouched.

    Raises CandidateRejectedError (one line, citing the rule) when Triton would reject the result.
    """
    cfg = ModelConfig()
    cfg.CopyFrom(original)
    for knob in KNOBS:
        if knob.name in params:
            knob.apply(cfg, params[knob.name], space)
    if P_MBS in params and P_PREF not in params:
        # The original's own preferred sizes: keep those that still fit the new max_batch_size.
        KNOB_BY_NAME[P_PREF].apply(cfg, None, space)
    _make_consistent(cfg, params, space)
    check_candidate(cfg, validation_context(space))
    return cfg


def _make_consistent(cfg: ModelConfig, params: Mapping[str, Any], space: ResolvedSpace) -> None:
    """Settings that cannot have an effect are written as their neutral value, so two candidates
    that behave the same are the same config (and no trial is mislabelled)."""
    if cfg.max_batch_size == 1 and cfg.HasField("dynamic_batching") and P_MBS in params:
        # Nothing to batch: waiting for a second request only adds latency.
        cfg.dynamic_batching.max_queue_delay_microseconds = 0
        del cfg.dynamic_batching.preferred_batch_size[:]
    groups = list(cfg.instance_group)
    if (
        space.precision_via == "trt_accelerator"
        and groups
        and all(g.kind == KIND_CPU for g in groups)
        and cfg.HasField("optimization")
    ):
        # ONNX Runtime and TensorFlow ignore GPU accelerators on CPU instances.
        KNOB_BY_NAME[P_PREC].apply(cfg, "none", space)


def candidate_points(space: ResolvedSpace, *, limit: int = 200, seed: int = 0) -> list[dict[str, Any]]:
    """The points a search would try: every grid point (ranges at 4 log-spaced values) when there
    are at most `limit`, else `limit` points drawn at random (seeded). Original's point first."""
    grid = grid_points(space)
    names = list(grid)
    points: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()

    def add(point: dict[str, Any]) -> None:
        kept = {k: v for k, v in point.items() if (d := space.dimension(k)) is None or space.applies(d, point)}
        key = tuple(sorted(kept.items()))
        if key not in seen:
            seen.add(key)
            points.append(kept)

    total = 1
    for n in names:
        total *= len(grid[n])
    if total <= limit:
        for combo in itertools.product(*(grid[n] for n in names)):
            add(dict(zip(names, combo)))
    else:
        rng = random.Random(seed)
        for _ in range(limit * 3):
            add({n: rng.choice(grid[n]) for n in names})
            if len(points) >= limit:
                break
    return points


__all__ += ["pref_label"]
