"""What a trial is ranked by: throughput within the budget, or throughput per instance or per
GPU (so a config that needs twice the hardware for 10% more does not win), or a Pareto front
of throughput and latency."""

from __future__ import annotations

from perfkit.server.modelconfig import ModelConfig
from perfkit.tuner._space._model import KIND_CPU

OBJECTIVES = ("throughput", "pareto", "per-instance", "per-gpu")
PER_HARDWARE = ("per-instance", "per-gpu")


def hardware_units(cfg: ModelConfig, objective: str, gpus_visible: int) -> float:
    """What the objective divides throughput by: instances (per-instance), or GPUs the config's
    instances occupy (per-gpu; a group without a gpus list spreads over every visible GPU; a
    config on CPU only counts as one device); 1 for the other objectives."""
    if objective not in PER_HARDWARE:
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
