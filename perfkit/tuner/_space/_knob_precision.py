"""Precision, the way each backend reads it, and only where it has an effect."""

from __future__ import annotations

from typing import Any

from perfkit.errors import UsageError
from perfkit.server.modelconfig import ModelConfig
from perfkit.tuner._space._core import (
    DEFAULT_PRECISIONS,
    P_PREC,
    TRT_PRECISION_MODE,
    Dimension,
)
from perfkit.tuner._space._knob_base import (
    ABSENT,
    PARAMETER_PRECISION_BACKENDS,
    TRT_EP_BACKENDS,
    Ctx,
    ExtractInfo,
    Knob,
    with_values,
)


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
        choices = with_values(choices, ctx.orig.get(P_PREC, "none"))
        if "cpu" in ctx.kinds:
            how += "; searched on GPU instances only (ignored on KIND_CPU)"
        dim = Dimension(P_PREC, choices, when_gpu_kind="cpu" in ctx.kinds)
        return (dim, how) if len(choices) > 1 else (None, how)
    parameter = ctx.space.precision_parameter
    if parameter in ctx.cfg.parameters or asked:
        ctx.precision_via = "parameter"
        choices = tuple(asked) if asked else DEFAULT_PRECISIONS
        if P_PREC in ctx.orig:
            choices = with_values(choices, ctx.orig[P_PREC])
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
        choices = with_values(choices, ctx.orig[P_PREC])
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
        return next((p for p, f in info.engine_files.items() if f == current), ABSENT)
    if info.precision_parameter in cfg.parameters:
        return cfg.parameters[info.precision_parameter].string_value.lower()
    return ABSENT


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


KNOBS: tuple[Knob, ...] = (
    Knob(
        P_PREC,
        _resolve_precision,
        _extract_precision,
        _apply_precision,
        ("onnxruntime-accelerators", "onnxruntime-int8-calibration", "tensorflow-accelerators"),
    ),
)
