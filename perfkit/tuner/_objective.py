"""The tuner's side of the objectives (perfkit.objectives defines them once): the hardware units
a per-instance / per-GPU objective divides throughput by, read from a trial's config, and the
values a trial reports to the study."""

from __future__ import annotations

from collections.abc import Mapping

from perfkit import objectives
from perfkit.server.modelconfig import ModelConfig
from perfkit.tuner._space._model import KIND_CPU


def hardware_units(cfg: ModelConfig, objective: str, gpus_visible: int) -> float:
    """What the objective divides throughput by: instances (per-instance), or GPUs the config's
    instances occupy (per-gpu; a group without a gpus list spreads over every visible GPU; a
    config on CPU only counts as one device); 1 for the other objectives."""
    if not objectives.get(objective).per_hardware:
        return 1.0
    groups = list(cfg.instance_group)
    if objective == "per-instance":
        if not groups:
            return float(max(1, gpus_visible))  # Triton's default: one instance per GPU, or one on CPU
        total = 0
        for g in groups:
            count = g.count or 1
            on_gpu = g.kind != KIND_CPU and gpus_visible > 0
            total += count * (len(g.gpus) or gpus_visible) if on_gpu else count
        return float(max(1, total))
    used: set[int] = set()
    for g in groups or []:
        if g.kind != KIND_CPU and gpus_visible > 0:
            used.update(g.gpus or range(gpus_visible))
    if not groups and gpus_visible > 0:
        used.update(range(gpus_visible))
    return float(max(1, len(used)))


def study_values(objective: str, throughput: float, latency_us: float, metrics: Mapping[str, float]) -> list[float]:
    """What a trial tells the study, one value per direction of the objective: its ranking value,
    and for a front its latency, which the study holds in milliseconds (as it always has, so a
    resumed study's trials compare)."""
    obj = objectives.get(objective)
    values = obj.study_values(throughput, latency_us, metrics)
    return [values[0], latency_us / 1e3] if obj.front else values
