"""What a trial is ranked by: throughput within the budget, or throughput per instance or per
GPU (so a config that needs twice the hardware for 10% more does not win), goodput (streamed
requests meeting every TTFT/ITL SLO per second, at the level within the budget), or a Pareto
front of throughput and latency."""

from __future__ import annotations

from perfkit.server.modelconfig import ModelConfig
from perfkit.tuner._space._model import KIND_CPU

OBJECTIVES = ("throughput", "pareto", "per-instance", "per-gpu", "goodput")
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


def objective_value(objective: str, throughput: float, metrics: dict[str, float]) -> float:
    """The single figure a trial is ranked by (not for pareto): throughput, throughput over the
    hardware units in metrics, or goodput (0 when the level measured none)."""
    if objective == "goodput":
        return float(metrics.get("goodput_rps", 0.0))
    if objective in PER_HARDWARE:
        return throughput / float(metrics.get("hardware_units", 1.0))
    return throughput
