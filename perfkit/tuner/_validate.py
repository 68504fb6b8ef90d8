"""The rules Triton core and its backends enforce on what the tuner changes, each citing where
Triton enforces it, so that no candidate Triton would reject is ever sent to a server.

A rule is a pure function of (config, context) returning the reason a config breaks it, or None.
Citations name the repository, the file and the message Triton logs; a rule marked "perfkit"
guards against a config Triton accepts but which cannot do what the tuner means by it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from perfkit.errors import CandidateRejectedError
from perfkit.server.modelconfig import ModelConfig

KIND_AUTO, KIND_GPU, KIND_CPU, KIND_MODEL = 0, 1, 2, 3
_CORE_UTILS = "triton-inference-server/core src/model_config_utils.cc"
_ORT = "triton-inference-server/onnxruntime_backend src/onnxruntime.cc"
_TF = "triton-inference-server/tensorflow_backend src/tensorflow.cc"
ORT_PRECISION_MODES = ("FP32", "FP16", "BF16", "INT8")
TF_TRT_PRECISION_MODES = ("FP32", "FP16")
ORT_GPU_ACCELERATORS = ("tensorrt", "cuda")
TF_GPU_ACCELERATORS = ("tensorrt", "gpu_io", "auto_mixed_precision")


@dataclass(frozen=True)
class Context:
    """What a rule may need besides the config. gpus None: unknown (GPU-availability rules skipped)."""

    backend: str
    gpus: int | None = None
    ensemble_max_batch: int = 0
    ensembles: tuple[str, ...] = ()
    sequence: bool = False  # the original model uses the sequence batcher (a stateful model)


@dataclass(frozen=True)
class Rule:
    """One rule: an id, where Triton enforces it, and the check."""

    id: str
    cite: str
    check: Callable[[ModelConfig, Context], str | None]


@dataclass(frozen=True)
class Violation:
    rule: str
    reason: str
    cite: str

    def one_line(self) -> str:
        return f"{self.reason} [{self.rule}; {self.cite}]"


def _name(cfg: ModelConfig) -> str:
    return cfg.name or "<model>"


def _mbs_non_negative(cfg: ModelConfig, ctx: Context) -> str | None:
    if cfg.max_batch_size < 0:
        return f"'max_batch_size' must be non-negative value for {_name(cfg)}"
    return None


def _dynamic_preferred(cfg: ModelConfig, ctx: Context) -> str | None:
    if not cfg.HasField("dynamic_batching"):
        return None
    for size in cfg.dynamic_batching.preferred_batch_size:
        if size <= 0:
            return f"dynamic batching preferred size must be positive for {_name(cfg)}"
        if size > cfg.max_batch_size:
            return (
                f"dynamic batching preferred size must be <= max batch size for {_name(cfg)}"
                f" (preferred {size}, max_batch_size {cfg.max_batch_size})"
            )
    return None


def _sequence_preferred(cfg: ModelConfig, ctx: Context) -> str | None:
    if not (cfg.HasField("sequence_batching") and cfg.sequence_batching.HasField("oldest")):
        return None
    for size in cfg.sequence_batching.oldest.preferred_batch_size:
        if size <= 0:
            return f"sequence batching preferred batch size must be positive for {_name(cfg)}"
        if size > cfg.max_batch_size:
            return (
                f"sequence batching preferred batch size must be <= max batch size for {_name(cfg)}"
                f" (preferred {size}, max_batch_size {cfg.max_batch_size})"
            )
    return None


def _sequence_kept(cfg: ModelConfig, ctx: Context) -> str | None:
    # model_config.proto's `scheduling_choice` oneof holds one scheduler per model: enabling
    # dynamic batching on a sequence model silently drops its sequence batcher, and the
    # stateful model then gets requests without correlation IDs or its control inputs.
    if not ctx.sequence:
        return None
    chosen = cfg.WhichOneof("scheduling_choice")
    if chosen != "sequence_batching":
        instead = f"has {chosen}" if chosen else "has no scheduler"
        return (
            f"model {_name(cfg)} is stateful: a candidate must keep its sequence_batching, this one {instead}"
            " (one scheduler per model; dynamic batching never replaces the sequence batcher)"
        )
    return None


def _direct_slot_utilization(cfg: ModelConfig, ctx: Context) -> str | None:
    if not (cfg.HasField("sequence_batching") and cfg.sequence_batching.HasField("direct")):
        return None
    util = cfg.sequence_batching.direct.minimum_slot_utilization
    if util < 0.0 or util > 1.0:
        return f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {_name(cfg)}"
    return None


def _warmup_batch(cfg: ModelConfig, ctx: Context) -> str | None:
    if cfg.max_batch_size <= 0:
        return None
    for w in cfg.model_warmup:
        if w.batch_size > cfg.max_batch_size:
            return (
                f"inference request batch-size must be <= {cfg.max_batch_size} for '{_name(cfg)}'"
                f" (warmup {w.name!r} sends batch {w.batch_size}; the load fails)"
            )
    return None


def _instance_gpus(cfg: ModelConfig, ctx: Context) -> str | None:
    for g in cfg.instance_group:
        if g.kind == KIND_CPU and len(g.gpus):
            return f"instance group {g.name} of model {_name(cfg)} has kind KIND_CPU but specifies one or more GPUs"
        if g.kind == KIND_MODEL and len(g.gpus):
            return f"instance group {g.name} of model {_name(cfg)} has kind KIND_MODEL but specifies one or more GPUs"
    return None


def _gpu_available(cfg: ModelConfig, ctx: Context) -> str | None:
    if ctx.gpus is None:
        return None
    for g in cfg.instance_group:
        if g.kind != KIND_GPU:
            continue
        if ctx.gpus == 0:
            return f"instance group {g.name} of model {_name(cfg)} has kind KIND_GPU but no GPUs are available"
        bad = [gid for gid in g.gpus if gid < 0 or gid >= ctx.gpus]
        if bad:
            return (
                f"instance group {g.name} of model {_name(cfg)} specifies invalid or unsupported gpu id {bad[0]}"
                f" (the server has {ctx.gpus} GPU(s))"
            )
    return None


def _ensemble_no_instances(cfg: ModelConfig, ctx: Context) -> str | None:
    if cfg.HasField("ensemble_scheduling") and len(cfg.instance_group):
        return f"instance group should not be specified for ensemble '{_name(cfg)}'"
    return None


def _ensemble_batch(cfg: ModelConfig, ctx: Context) -> str | None:
    if cfg.max_batch_size != 0 and cfg.max_batch_size < ctx.ensemble_max_batch:
        return (
            f"ensemble {', '.join(ctx.ensembles) or '?'} allows maximum batch size {ctx.ensemble_max_batch},"
            f" but it contains model {_name(cfg)} which only allows maximum batch size to be {cfg.max_batch_size}"
        )
    return None


def _accelerators(cfg: ModelConfig) -> list[tuple[str, dict[str, str]]]:
    accs = cfg.optimization.execution_accelerators.gpu_execution_accelerator
    return [(a.name, dict(a.parameters)) for a in accs]


def _ort_accelerators(cfg: ModelConfig, ctx: Context) -> str | None:
    if ctx.backend != "onnxruntime":
        return None
    for name, params in _accelerators(cfg):
        if name not in ORT_GPU_ACCELERATORS:
            return f"unknown Execution Accelerator '{name}' is requested"
        mode = params.get("precision_mode")
        if name == "tensorrt" and mode is not None and mode not in ORT_PRECISION_MODES:
            return f"unsupported precision mode '{mode}' is requested"
    return None


def _ort_int8_calibration(cfg: ModelConfig, ctx: Context) -> str | None:
    if ctx.backend != "onnxruntime":
        return None
    for name, params in _accelerators(cfg):
        calibrated = "int8_calibration_table_name" in params or params.get("int8_use_native_calibration_table") == "1"
        if name == "tensorrt" and params.get("precision_mode") == "INT8" and not calibrated:
            return "TensorRT INT8 without a calibration table (int8_calibration_table_name) builds no usable engine"
    return None


def _tf_accelerators(cfg: ModelConfig, ctx: Context) -> str | None:
    if ctx.backend != "tensorflow":
        return None
    names = set()
    for name, params in _accelerators(cfg):
        names.add(name)
        if name not in TF_GPU_ACCELERATORS:
            return f"unknown Execution Accelerator '{name}' is requested"
        mode = params.get("precision_mode")
        if name == "tensorrt" and mode is not None and mode not in TF_TRT_PRECISION_MODES:
            return f"unsupported precision mode '{mode}' is requested (TF-TRT takes FP32 or FP16)"
    if {"tensorrt", "auto_mixed_precision"} <= names:
        return "Auto mixed precision can not be set with TFTRT optimization"
    return None


RULES: tuple[Rule, ...] = (
    Rule("mbs-non-negative", f"{_CORE_UTILS} ValidateModelConfig", _mbs_non_negative),
    Rule("dynamic-preferred-le-mbs", f"{_CORE_UTILS} ValidateModelConfig", _dynamic_preferred),
    Rule("sequence-preferred-le-mbs", f"{_CORE_UTILS} ValidateModelConfig", _sequence_preferred),
    Rule(
        "sequence-batcher-kept",
        "triton-inference-server/common protobuf/model_config.proto (oneof scheduling_choice); perfkit",
        _sequence_kept,
    ),
    Rule("sequence-direct-slot-utilization", f"{_CORE_UTILS} ValidateModelConfig", _direct_slot_utilization),
    Rule(
        "warmup-batch-le-mbs",
        "triton-inference-server/core src/infer_request.cc (warmup requests from src/backend_model_instance.cc)",
        _warmup_batch,
    ),
    Rule("instance-kind-gpus", f"{_CORE_UTILS} ValidateInstanceGroup", _instance_gpus),
    Rule("instance-gpu-available", f"{_CORE_UTILS} ValidateInstanceGroup", _gpu_available),
    Rule("ensemble-no-instance-group", f"{_CORE_UTILS} ValidateEnsembleSchedulingConfig", _ensemble_no_instances),
    Rule("ensemble-step-mbs", "triton-inference-server/core src/ensemble_scheduler/ensemble_utils.cc", _ensemble_batch),
    Rule("onnxruntime-accelerators", f"{_ORT} ModelInstanceState (execution accelerators)", _ort_accelerators),
    Rule(
        "onnxruntime-int8-calibration",
        f"perfkit; {_ORT} reads int8_calibration_table_name for TensorRT INT8",
        _ort_int8_calibration,
    ),
    Rule("tensorflow-accelerators", f"{_TF} ModelInstanceState (TF-TRT, auto_mixed_precision)", _tf_accelerators),
)


def validate(cfg: ModelConfig, ctx: Context) -> list[Violation]:
    """Every rule the config breaks (empty: Triton would accept what the tuner changed)."""
    out = []
    for rule in RULES:
        reason = rule.check(cfg, ctx)
        if reason is not None:
            out.append(Violation(rule.id, reason, rule.cite))
    return out


def check_candidate(cfg: ModelConfig, ctx: Context) -> None:
    """Raise CandidateRejectedError with the first broken rule's one-line reason."""
    broken = validate(cfg, ctx)
    if broken:
        raise CandidateRejectedError(f"candidate rejected: {broken[0].one_line()}")
