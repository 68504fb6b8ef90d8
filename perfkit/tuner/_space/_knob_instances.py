"""Instance knobs: kind (resolved first: counts and precision depend on it) and count."""

from __future__ import annotations

from typing import Any

from perfkit.server.modelconfig import ModelConfig
from perfkit.tuner._space._core import (
    GPU_INSTANCES_PER_GPU,
    KINDS,
    MIN_CPU_INSTANCE_BOUND,
    P_COUNT,
    P_KIND,
    Dimension,
)
from perfkit.tuner._space._knob_base import (
    BOTH_KINDS,
    Ctx,
    ExtractInfo,
    Knob,
    with_values,
)
from perfkit.tuner._space._model import KIND_CPU, KIND_GPU, KIND_LABELS


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
    return with_values(tuple(kinds), orig), why


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


KNOBS: tuple[Knob, ...] = (
    Knob(P_KIND, _resolve_kind, _extract_kind, _apply_kind, ("instance-kind-gpus", "instance-gpu-available")),
    Knob(P_COUNT, _resolve_count, _extract_count, _apply_count),
)
