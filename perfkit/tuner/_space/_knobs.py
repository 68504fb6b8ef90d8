"""The knobs of the search space, each one unit: how it resolves for a model (its values and why),
how it is read from a config (extract), how it is written (apply), and which validator rules
guard it. A new knob is one Knob in KNOBS.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from perfkit.errors import UsageError
from perfkit.server.modelconfig import ModelConfig
from perfkit.tuner._space._core import (
    DEFAULT_MAX_BATCH_SIZE_LIMIT,
    DEFAULT_PRECISIONS,
    DEFAULT_PREFERRED,
    GPU_INSTANCES_PER_GPU,
    KINDS,
    MIN_CPU_INSTANCE_BOUND,
    P_COUNT,
    P_DB,
    P_DELAY,
    P_KIND,
    P_MBS,
    P_PREC,
    P_PREF,
    P_SEQ_CANDIDATES,
    P_SEQ_DELAY,
    PREFERRED_CHOICES,
    SEQUENCE_MEASURABLE,
    TRT_PRECISION_MODE,
    Dimension,
    TuneSpace,
)
from perfkit.tuner._space._model import KIND_CPU, KIND_GPU, KIND_LABELS, KIND_MODEL, Machine, ModelFacts

# Backends that run on both CPU and GPU (instance kind is a real choice there when a GPU exists).
BOTH_KINDS = frozenset({"onnxruntime", "pytorch", "tensorflow", "python"})
TRT_EP_BACKENDS = frozenset({"onnxruntime", "tensorflow"})
# Backends whose batch ceiling is fixed when the model is built, and why.
FIXED_BATCH_CEILING = {
    "tensorrt": "a TensorRT engine's optimization profile caps the batch, and it cannot be read without TensorRT",
    "tensorrtllm": "a TensorRT-LLM engine is built for its max batch size",
    "dali": "a DALI pipeline is serialized with its max batch size",
}
PARAMETER_PRECISION_BACKENDS = frozenset({"python", "pytorch"})
_ABSENT = object()


@dataclass
class Ctx:
    """What resolving a knob reads: the request, the model, the machine, earlier knobs' results."""

    space: TuneSpace
    cfg: ModelConfig
    facts: ModelFacts
    machine: Machine
    latency_budget_us: float
    orig: dict[str, Any]
    engine_files: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    kinds: tuple[str, ...] = ()  # instance kinds candidates may have (resolved first)
    db_choices: tuple[bool, ...] = ()
    precision_via: str = ""

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def mbs(self) -> int:
        return int(self.cfg.max_batch_size)

    @property
    def sequence(self) -> bool:
        return self.cfg.HasField("sequence_batching")


@dataclass(frozen=True)
class ExtractInfo:
    backend: str
    precision_parameter: str = "precision"
    engine_files: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Knob:
    """One searched setting. resolve -> (dimension or None, why); extract -> value or _ABSENT;
    apply writes a value into a config copy; rules: the validator rules that guard it."""

    name: str
    resolve: Callable[[Ctx], tuple[Dimension | None, str]]
    extract: Callable[[ModelConfig, ExtractInfo], Any]
    apply: Callable[[ModelConfig, Any, Any], None]
    rules: tuple[str, ...] = ()
    measurable: bool = True


def pow2_sizes(mbs: int) -> list[int]:
    """Preferred sizes 'pow2': every power of two from 2 up to mbs, and mbs itself."""
    sizes = [2**i for i in range(1, 31) if 2**i <= mbs]
    if mbs not in sizes and mbs >= 1:
        sizes.append(mbs)
    return sizes


def _with(choices: tuple[Any, ...], *extra: Any) -> tuple[Any, ...]:
    return tuple(dict.fromkeys((*choices, *extra)))


# -- max_batch_size -------------------------------------------------------------------------
def _mbs_floor(ctx: Ctx) -> tuple[int, str]:
    floors = [(ctx.facts.warmup_max_batch, "its model_warmup sends that batch")]
    if ctx.sequence and ctx.cfg.sequence_batching.HasField("oldest"):
        pref = list(ctx.cfg.sequence_batching.oldest.preferred_batch_size)
        floors.append((max(pref, default=0), "its sequence batcher prefers that batch"))
    return max(floors, key=lambda f: f[0])


def _resolve_mbs(ctx: Ctx) -> tuple[Dimension | None, str]:
    mbs = ctx.mbs
    if mbs <= 0:
        if ctx.space.max_batch_sizes:
            ctx.notes.append(f"max_batch_size not searched: {ctx.name!r} has max_batch_size 0 (no batch dimension)")
        return None, "max_batch_size 0: the model takes no batch dimension; it stays 0"
    if ctx.space.max_batch_sizes:
        if 0 in ctx.space.max_batch_sizes:
            raise UsageError(f"--max-batch-sizes: 0 would remove the batch dimension of {ctx.name!r}; use sizes >= 1")
        choices = tuple(sorted(set(ctx.space.max_batch_sizes) | {mbs}))
        why = "the values asked for (and the model's own)"
    else:
        fixed = FIXED_BATCH_CEILING.get(ctx.facts.backend)
        if ctx.space.max_batch_size_limit is not None:
            ceiling, why = (
                ctx.space.max_batch_size_limit,
                f"by doubling up to the limit {ctx.space.max_batch_size_limit}",
            )
        elif fixed:
            ceiling, why = mbs, f"up to the model's {mbs}: {fixed} (raise with --max-batch-size-limit)"
        else:
            ceiling = max(DEFAULT_MAX_BATCH_SIZE_LIMIT, mbs)
            why = (
                f"by doubling up to {ceiling}, above the model's {mbs} (assumes a dynamic batch dimension;"
                " bound with --max-batch-size-limit)"
            )
        values = {2**i for i in range(0, 31) if 2**i <= ceiling} | {mbs, ceiling}
        choices = tuple(sorted(values))
    if ctx.facts.ensemble_max_batch > min(choices):
        # Only binding when the ensemble is loaded too; perfkit loads the model alone.
        ctx.notes.append(
            f"ensemble {', '.join(ctx.facts.ensembles)} batches up to {ctx.facts.ensemble_max_batch}: a smaller"
            " max_batch_size breaks it where it is loaded beside this model"
        )
    floor, because = _mbs_floor(ctx)
    if floor > 1 and any(c < floor for c in choices):
        choices = tuple(c for c in choices if c >= floor) or (mbs,)
        why += f"; none below {floor}: {because}"
    if len(choices) < 2:
        return None, f"only {choices[0]}: " + why
    return Dimension(P_MBS, choices), why


def _extract_mbs(cfg: ModelConfig, info: ExtractInfo) -> Any:
    return int(cfg.max_batch_size)


def _apply_mbs(cfg: ModelConfig, value: Any, space: Any) -> None:
    cfg.max_batch_size = int(value)


# -- dynamic batching -----------------------------------------------------------------------
def _resolve_db(ctx: Ctx) -> tuple[Dimension | None, str]:
    if ctx.mbs <= 0 or ctx.sequence:
        why = "has max_batch_size 0" if ctx.mbs <= 0 else "uses the sequence batcher"
        if ctx.space.dynamic_batching and True in ctx.space.dynamic_batching:
            ctx.notes.append(f"dynamic batching not searched: {ctx.name!r} {why}")
        ctx.db_choices = (bool(ctx.orig[P_DB]),)
        return None, f"not searched: the model {why}"
    choices = ctx.space.dynamic_batching if ctx.space.dynamic_batching is not None else (True, False)
    choices = _with(choices, bool(ctx.orig[P_DB]))
    ctx.db_choices = tuple(choices)
    if len(choices) > 1:
        return Dimension(P_DB, tuple(sorted(choices, reverse=True))), "on and off (Triton batches only with it on)"
    return None, f"fixed {'on' if choices[0] else 'off'}"


def _extract_db(cfg: ModelConfig, info: ExtractInfo) -> Any:
    return cfg.HasField("dynamic_batching")


def _apply_db(cfg: ModelConfig, value: Any, space: Any) -> None:
    if value:
        cfg.dynamic_batching.SetInParent()
    else:
        cfg.ClearField("dynamic_batching")


def _resolve_delay(ctx: Ctx) -> tuple[Dimension | None, str]:
    if True not in ctx.db_choices or ctx.mbs <= 0 or ctx.sequence:
        return None, "not searched: no dynamic batching"
    low, high = ctx.space.queue_delay_us or (50, int(max(200, min(ctx.latency_budget_us / 2, 50_000))))
    if ctx.orig.get(P_DELAY):
        low, high = min(low, ctx.orig[P_DELAY]), max(high, ctx.orig[P_DELAY])
    low = max(low, 1)  # log scale: 0 is "no delay", represented by the range's low end
    why = "log range, never past half the latency budget; 0 when max_batch_size is 1 (nothing to wait for)"
    return Dimension(P_DELAY, low=low, high=max(high, low), when_dynamic_batching=True), why


def _extract_delay(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if not cfg.HasField("dynamic_batching"):
        return _ABSENT
    return int(cfg.dynamic_batching.max_queue_delay_microseconds)


def _apply_delay(cfg: ModelConfig, value: Any, space: Any) -> None:
    if cfg.HasField("dynamic_batching"):
        cfg.dynamic_batching.max_queue_delay_microseconds = int(value)


def _resolve_pref(ctx: Ctx) -> tuple[Dimension | None, str]:
    if True not in ctx.db_choices or ctx.mbs <= 0 or ctx.sequence:
        return None, "not searched: no dynamic batching"
    pref = ctx.space.preferred_batch_sizes or DEFAULT_PREFERRED
    if P_PREF in ctx.orig:
        pref = _with(pref, ctx.orig[P_PREF])  # the user's own sizes (custom:a,b) too: trial 0 fits
        if str(ctx.orig[P_PREF]).startswith("custom:"):
            pref = _with(pref, "max")  # yours cut to a smaller max_batch_size can leave [max_batch_size]
    why = "none (batch up to max_batch_size) or pow2 (powers of two up to each max_batch_size); custom: yours that fit"
    return Dimension(P_PREF, tuple(pref), when_dynamic_batching=True), why


def pref_label(pref: list[int], mbs: int) -> str:
    """The label of preferred sizes: none, pow2, max, or custom:a,b (pow2 wins where they coincide)."""
    if not pref:
        return "none"
    if pref == pow2_sizes(mbs):
        return "pow2"
    if pref == [mbs]:
        return "max"
    return "custom:" + ",".join(map(str, pref))


def _extract_pref(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if not cfg.HasField("dynamic_batching"):
        return _ABSENT
    return pref_label(list(cfg.dynamic_batching.preferred_batch_size), int(cfg.max_batch_size))


def pref_sizes(pref: Any, mbs: int, current: list[int]) -> list[int]:
    """The preferred sizes a label stands for at this max_batch_size. Raises UsageError."""
    if pref is None:
        return [s for s in current if s <= mbs]  # the original's own sizes that still fit
    if pref == "none":
        return []
    if pref == "max":
        return [mbs]
    if pref == "pow2":
        return pow2_sizes(mbs)
    if str(pref).startswith("custom:"):
        return [int(s) for s in str(pref)[7:].split(",") if s and int(s) <= mbs]
    raise UsageError(f"preferred_batch_sizes {pref!r} unknown", hint=f"choose from {', '.join(PREFERRED_CHOICES)}")


def _apply_pref(cfg: ModelConfig, value: Any, space: Any) -> None:
    if not cfg.HasField("dynamic_batching"):
        return
    db = cfg.dynamic_batching
    keep = pref_sizes(value, int(cfg.max_batch_size), list(db.preferred_batch_size))
    del db.preferred_batch_size[:]
    db.preferred_batch_size.extend(keep)


# -- instances ------------------------------------------------------------------------------
def _resolve_kinds(ctx: Ctx) -> tuple[tuple[str, ...], str]:
    """Kinds candidates may have (the first is searched only when there are two or more)."""
    orig = ctx.orig[P_KIND]
    groups = len(ctx.cfg.instance_group)
    if orig == "model":
        return (orig,), "not searched: KIND_MODEL places its instances itself (it is not 'auto')"
    if groups > 1:
        if ctx.space.instance_kinds:
            ctx.notes.append("instance kind not searched: the model has several instance groups")
        return (orig,), "not searched: the model has several instance groups"
    gpus = ctx.machine.gpus
    if ctx.space.instance_kinds is not None:
        kinds = ctx.space.instance_kinds
        if "gpu" in kinds and gpus == 0:
            ctx.notes.append("instance kind gpu requested but no GPU is planned for: dropped (use --assume-gpu)")
            kinds = tuple(k for k in kinds if k != "gpu")
        why = "the kinds asked for"
    elif ctx.facts.backend in BOTH_KINDS and gpus > 0:
        kinds, why = ("gpu", "cpu"), f"{ctx.facts.backend} runs on both; {gpus} GPU(s) planned for"
    else:
        why = (
            "not searched: no GPU planned for (--assume-gpu plans for one)"
            if gpus == 0
            else f"not searched: {ctx.facts.backend} runs on one kind only"
        )
        return (orig,), why
    return _with(tuple(kinds), orig), why


def _resolve_kind(ctx: Ctx) -> tuple[Dimension | None, str]:
    kinds, why = _resolve_kinds(ctx)
    ctx.kinds = kinds
    if len(kinds) > 1:
        return Dimension(P_KIND, kinds), why
    return None, why


def _count_values(bound: int) -> tuple[int, ...]:
    steps = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    return tuple(v for v in steps if v <= bound) or (1,)


def _resolve_count(ctx: Ctx) -> tuple[Dimension | None, str]:
    if not ctx.kinds:
        ctx.kinds = _resolve_kinds(ctx)[0]
    if ctx.space.instance_counts:
        choices = tuple(sorted(set(ctx.space.instance_counts) | {ctx.orig[P_COUNT]}))
        why = "the counts asked for (and the model's own)"
    else:
        bounds = []
        cpu_bound = max(ctx.machine.cpu_cores, MIN_CPU_INSTANCE_BOUND)
        gpu_on = ctx.machine.gpus > 0
        for kind in ctx.kinds:
            if kind == "gpu" or (kind in ("auto", "model") and gpu_on):
                bounds.append((GPU_INSTANCES_PER_GPU, f"{GPU_INSTANCES_PER_GPU} per GPU (count is per GPU)"))
            else:
                bounds.append((cpu_bound, f"{cpu_bound} for KIND_CPU ({ctx.machine.cpu_cores} CPU cores, at least 4)"))
        bound, because = max(bounds)
        choices = tuple(sorted(set(_count_values(bound)) | {ctx.orig[P_COUNT]}))
        why = f"up to {because}"
    if len(choices) < 2:
        return None, f"only {choices[0]}: {why}"
    return Dimension(P_COUNT, choices), why


def _extract_count(cfg: ModelConfig, info: ExtractInfo) -> Any:
    groups = list(cfg.instance_group)
    return int(groups[0].count or 1) if groups else 1


def _apply_count(cfg: ModelConfig, value: Any, space: Any) -> None:
    if not cfg.instance_group:
        cfg.instance_group.add()
    for group in cfg.instance_group:
        group.count = int(value)


def _extract_kind(cfg: ModelConfig, info: ExtractInfo) -> Any:
    groups = list(cfg.instance_group)
    return KIND_LABELS.get(int(groups[0].kind), "auto") if groups else "auto"


def _apply_kind(cfg: ModelConfig, value: Any, space: Any) -> None:
    if value not in KINDS or len(cfg.instance_group) > 1:
        return  # "auto"/"model" are the original's own; several groups keep their kinds
    if not cfg.instance_group:
        cfg.instance_group.add()
    group = cfg.instance_group[0]
    group.kind = KIND_GPU if value == "gpu" else KIND_CPU
    if value == "cpu":
        del group.gpus[:]  # Triton: KIND_CPU must not list GPUs


# -- precision ------------------------------------------------------------------------------
def _trt_accelerator(cfg: ModelConfig) -> Any | None:
    for acc in cfg.optimization.execution_accelerators.gpu_execution_accelerator:
        if acc.name == "tensorrt":
            return acc
    return None


def _has_accelerator(cfg: ModelConfig, name: str) -> bool:
    return any(a.name == name for a in cfg.optimization.execution_accelerators.gpu_execution_accelerator)


def _int8_calibrated(cfg: ModelConfig) -> bool:
    acc = _trt_accelerator(cfg)
    if acc is None:
        return False
    return (
        "int8_calibration_table_name" in acc.parameters
        or acc.parameters.get("int8_use_native_calibration_table") == "1"
    )


def _resolve_precision(ctx: Ctx) -> tuple[Dimension | None, str]:
    backend = ctx.facts.backend
    asked = ctx.space.precisions
    if backend == "tensorrt":
        return _resolve_trt_precision(ctx)
    if backend in TRT_EP_BACKENDS:
        gpu_kinds = [k for k in ctx.kinds if k in ("gpu", "auto")]
        if ctx.machine.gpus == 0 or not gpu_kinds:
            why = "not searched: GPU accelerators (TensorRT) need GPU instances"
            why += " and no GPU is planned for" if ctx.machine.gpus == 0 else "; the instances are KIND_CPU"
            if asked:
                ctx.notes.append(f"precision {','.join(asked)} not searched: {why.removeprefix('not searched: ')}")
            else:
                ctx.notes.append("precision not searched: the TensorRT accelerator needs a GPU and none was found")
            return None, why
        ctx.precision_via = "trt_accelerator"
        allowed: tuple[str, ...]
        default: tuple[str, ...]
        if backend == "onnxruntime":
            allowed = ("none", "fp32", "fp16", "bf16", "int8")
            default = ("none", *DEFAULT_PRECISIONS)
            how = "ONNX Runtime's TensorRT accelerator precision_mode (none: CUDA execution provider)"
        else:
            allowed = ("none", "fp32", "fp16", "amp")
            default = ("none", *DEFAULT_PRECISIONS, "amp")
            how = "TF-TRT precision_mode FP32/FP16, or amp (auto_mixed_precision), never both"
        choices = tuple(asked) if asked else default
        bad = [p for p in choices if p not in allowed]
        if bad:
            raise UsageError(f"--precisions {','.join(bad)}: {backend} takes {', '.join(allowed)}")
        if "int8" in choices and not _int8_calibrated(ctx.cfg):
            ctx.notes.append("precision int8 not searched: no int8_calibration_table_name on the tensorrt accelerator")
            choices = tuple(p for p in choices if p != "int8")
        choices = _with(choices, ctx.orig.get(P_PREC, "none"))
        return (Dimension(P_PREC, choices), how) if len(choices) > 1 else (None, how)
    parameter = ctx.space.precision_parameter
    if parameter in ctx.cfg.parameters or asked:
        ctx.precision_via = "parameter"
        choices = tuple(asked) if asked else DEFAULT_PRECISIONS
        if P_PREC in ctx.orig:
            choices = _with(choices, ctx.orig[P_PREC])
        why = f"the model's parameters {{ key: {parameter!r} }}, which the model reads"
        return (Dimension(P_PREC, choices), why) if len(choices) > 1 else (None, why)
    if backend in PARAMETER_PRECISION_BACKENDS:
        return None, (
            f"not searched: {backend} has no precision setting of its own; declare a parameter the model reads"
            f" (parameters {{ key: {parameter!r} }}) or pass --precisions"
        )
    return None, f"not searched: perfkit knows no precision setting for the {backend} backend"


def _resolve_trt_precision(ctx: Ctx) -> tuple[Dimension | None, str]:
    engines = ctx.engine_files
    if not engines:
        if ctx.space.precisions:
            ctx.notes.append("precision not searched: declare the engine of each precision with --trt-engines")
        return None, (
            "not searched: a TensorRT engine's precision is fixed when it is built and cannot be read without"
            " TensorRT; declare one engine per precision with --trt-engines fp32=model.plan,fp16=model_fp16.plan"
        )
    ctx.precision_via = "engine_file"
    wanted = ctx.space.precisions or tuple(engines)
    missing = [p for p in wanted if p not in engines]
    if missing:
        ctx.notes.append(f"no engine file for precision {', '.join(missing)} in {ctx.name!r}: not searched")
    choices = tuple(p for p in wanted if p in engines)
    if P_PREC in ctx.orig:
        choices = _with(choices, ctx.orig[P_PREC])
    why = "the engine files declared with --trt-engines (one engine per precision)"
    return (Dimension(P_PREC, choices), why) if len(choices) > 1 else (None, why)


def _extract_precision(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if info.backend in TRT_EP_BACKENDS:
        if info.backend == "tensorflow" and _has_accelerator(cfg, "auto_mixed_precision"):
            return "amp"
        acc = _trt_accelerator(cfg)
        return "none" if acc is None else acc.parameters.get("precision_mode", "FP32").lower()
    if info.backend == "tensorrt":
        current = cfg.default_model_filename or "model.plan"
        return next((p for p, f in info.engine_files.items() if f == current), _ABSENT)
    if info.precision_parameter in cfg.parameters:
        return cfg.parameters[info.precision_parameter].string_value.lower()
    return _ABSENT


def _drop_gpu_accelerators(cfg: ModelConfig, names: tuple[str, ...]) -> None:
    accs = cfg.optimization.execution_accelerators.gpu_execution_accelerator
    for acc in [a for a in accs if a.name in names]:
        accs.remove(acc)
    if not accs and not cfg.optimization.execution_accelerators.cpu_execution_accelerator:
        cfg.optimization.ClearField("execution_accelerators")
    if cfg.HasField("optimization") and not cfg.optimization.ListFields():
        cfg.ClearField("optimization")


def _apply_precision(cfg: ModelConfig, value: Any, space: Any) -> None:
    precision = str(value)
    via = space.precision_via
    if via == "parameter":
        cfg.parameters[space.precision_parameter].string_value = precision
    elif via == "engine_file":
        cfg.default_model_filename = space.engine_files[precision]
    elif via == "trt_accelerator":
        if precision in ("none", "amp"):
            _drop_gpu_accelerators(cfg, ("tensorrt",))
            if precision == "amp" and not _has_accelerator(cfg, "auto_mixed_precision"):
                cfg.optimization.execution_accelerators.gpu_execution_accelerator.add(name="auto_mixed_precision")
            return
        _drop_gpu_accelerators(cfg, ("auto_mixed_precision",))  # TF: never both
        accs = cfg.optimization.execution_accelerators.gpu_execution_accelerator
        acc = _trt_accelerator(cfg) or accs.add(name="tensorrt")
        acc.parameters["precision_mode"] = TRT_PRECISION_MODE[precision]


# -- sequence batcher (shown, not searched, until profile sends correlation IDs) ----------------
def _resolve_seq_delay(ctx: Ctx) -> tuple[Dimension | None, str]:
    if not ctx.sequence:
        return None, "not searched: no sequence batcher"
    high = int(max(200, min(ctx.latency_budget_us / 2, 50_000)))
    return Dimension(P_SEQ_DELAY, low=1, high=high), "sequence batcher max_queue_delay_microseconds"


def _seq_strategy(cfg: ModelConfig) -> Any | None:
    sb = cfg.sequence_batching
    if sb.HasField("oldest"):
        return sb.oldest
    if sb.HasField("direct"):
        return sb.direct
    return None


def _extract_seq_delay(cfg: ModelConfig, info: ExtractInfo) -> Any:
    strategy = _seq_strategy(cfg) if cfg.HasField("sequence_batching") else None
    return _ABSENT if strategy is None else int(strategy.max_queue_delay_microseconds)


def _apply_seq_delay(cfg: ModelConfig, value: Any, space: Any) -> None:
    strategy = _seq_strategy(cfg) if cfg.HasField("sequence_batching") else None
    if strategy is not None:
        strategy.max_queue_delay_microseconds = int(value)


def _resolve_seq_candidates(ctx: Ctx) -> tuple[Dimension | None, str]:
    if not (ctx.sequence and ctx.cfg.sequence_batching.HasField("oldest")):
        return None, "not searched: no oldest-first sequence batcher"
    current = int(ctx.cfg.sequence_batching.oldest.max_candidate_sequences) or 1
    choices = tuple(sorted({1, 4, 16, 64, current}))
    return Dimension(P_SEQ_CANDIDATES, choices), "oldest-first max_candidate_sequences"


def _extract_seq_candidates(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if cfg.HasField("sequence_batching") and cfg.sequence_batching.HasField("oldest"):
        return int(cfg.sequence_batching.oldest.max_candidate_sequences)
    return _ABSENT


def _apply_seq_candidates(cfg: ModelConfig, value: Any, space: Any) -> None:
    if cfg.HasField("sequence_batching") and cfg.sequence_batching.HasField("oldest"):
        cfg.sequence_batching.oldest.max_candidate_sequences = int(value)


# Order matters: max_batch_size before what must fit it; kind before count and precision.
KNOBS: tuple[Knob, ...] = (
    Knob(
        P_MBS, _resolve_mbs, _extract_mbs, _apply_mbs, ("mbs-non-negative", "warmup-batch-le-mbs", "ensemble-step-mbs")
    ),
    Knob(P_DB, _resolve_db, _extract_db, _apply_db),
    Knob(P_DELAY, _resolve_delay, _extract_delay, _apply_delay),
    Knob(P_PREF, _resolve_pref, _extract_pref, _apply_pref, ("dynamic-preferred-le-mbs",)),
    Knob(P_KIND, _resolve_kind, _extract_kind, _apply_kind, ("instance-kind-gpus", "instance-gpu-available")),
    Knob(P_COUNT, _resolve_count, _extract_count, _apply_count),
    Knob(
        P_PREC,
        _resolve_precision,
        _extract_precision,
        _apply_precision,
        ("onnxruntime-accelerators", "onnxruntime-int8-calibration", "tensorflow-accelerators"),
    ),
    Knob(P_SEQ_DELAY, _resolve_seq_delay, _extract_seq_delay, _apply_seq_delay, (), SEQUENCE_MEASURABLE),
    Knob(
        P_SEQ_CANDIDATES,
        _resolve_seq_candidates,
        _extract_seq_candidates,
        _apply_seq_candidates,
        ("sequence-preferred-le-mbs",),
        SEQUENCE_MEASURABLE,
    ),
)
KNOB_BY_NAME = {k.name: k for k in KNOBS}
ABSENT = _ABSENT
KIND_NUMBERS = {"gpu": KIND_GPU, "cpu": KIND_CPU, "model": KIND_MODEL}
