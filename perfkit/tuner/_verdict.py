"""A trial's verdict: what its run record says against the budget (the highest load whose
percentile stays within it, and its throughput), and the constraint values the study reads."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from perfkit.records import Budget, LevelResult, LoadLevel, RunRecord, level_budget_us


class ConstraintSettings(Protocol):
    """The settings a verdict is checked against (TuneSettings has them)."""

    @property
    def budget(self) -> Budget: ...
    @property
    def min_throughput(self) -> float | None: ...
    @property
    def max_gpu_memory_bytes(self) -> float | None: ...


@dataclass(frozen=True)
class TrialVerdict:
    """What a trial achieved: the best level within the budget, or why none was."""

    feasible_load: LoadLevel | None
    throughput_infer_per_s: float | None
    latency_us: float | None
    lowest_over_budget: bool  # the lightest load already broke the budget: hopeless
    lowest_throughput: float
    lowest_latency_us: float
    levels_measured: int
    gpu_memory_bytes: float | None
    metrics: dict[str, float] = field(default_factory=dict)
    # a rate another config held, below which the load search did not go on (LoadLadder held_elsewhere)
    held_elsewhere_rps: float | None = None
    # why the load search ended before its usual answer (--max-time, or a first level that already
    # answered it: perfkit.tuner._trial_cut); told in the trial's line and its prune reason
    search_cut: str = ""

    @property
    def within_budget(self) -> bool:
        return self.feasible_load is not None


def judge_trial(
    record: RunRecord,
    budget: Budget | None = None,
    *,
    latency_budget_ms: float | None = None,
    percentile: float = 99.0,
    metric: str = "latency",
) -> TrialVerdict:
    """Read a trial's run record against the budget (the settings' Budget: its value, percentile,
    and what it holds: end-to-end latency, TTFT or ITL; a mix's per-model budgets). A level counts
    only where Budget.within holds (no errors, the percentile within the budget, no open-loop
    shortfall), the rule the load search walks by; measure's latency threshold, which may have
    ended the sweep, judges no level. Callers outside the tuner may still give the budget as
    latency_budget_ms / percentile / metric instead.

    The throughput judged stays completed requests per second for every model. For a decoupled
    model output tokens/s is the figure users quote, but the tokens a request streams are set by
    the workload (its inputs, max_tokens), not by the config: tokens/s ranks candidates exactly as
    requests/s does, so the record keeps one throughput meaning for every model and reports
    tokens/s beside it (metrics['output_tokens_per_s'], shown in the summary line)."""
    if budget is None:
        if latency_budget_ms is None:
            raise TypeError("judge_trial needs a budget (or latency_budget_ms)")
        budget = Budget(latency_budget_ms, percentile, metric)
    budget_us = budget.latency_budget_us
    percentile = budget.percentile
    levels = list(record.levels)
    best: LevelResult | None = None

    for level in levels:
        ok = budget.within(level)
        if ok and (best is None or level.throughput_infer_per_s > best.throughput_infer_per_s):
            best = level
    first = levels[0] if levels else None
    lowest_over = first is None or not budget.errors_within(first) or budget.level_us(first) > budget_us
    mem = [s.memory_used_bytes for lv in levels for s in lv.metrics if s.memory_used_bytes is not None]
    metrics: dict[str, float] = {"levels_measured": float(len(levels))}
    if best is not None:
        metrics.update(
            {
                "p50_us": best.latency().p50_us,
                "p99_us": best.latency().p99_us,
                "mean_us": best.latency().mean_us,
                "concurrency" if best.load.mode == "concurrency" else "rate_rps": best.load.value,
                "stable": 1.0 if best.stable else 0.0,
            }
        )
        if best.error_count:
            # What the level gave up for its tail: requests the server rejected (a bounded queue,
            # a queue timeout) within --max-error-rate; its throughput counts successes only.
            metrics["error_rate"] = best.error_rate
            metrics["rejection_rate"] = best.rejection_rate
        if best.precision.latency_rel is not None:  # its latency percentile's ~95% half-width, relative
            metrics["latency_rel"] = best.precision.latency_rel
        st = best.streaming
        if st is not None:
            metrics.update(
                {
                    "ttft_p50_us": st.ttft.p50_us,
                    "ttft_p99_us": st.ttft.p99_us,
                    "itl_p50_us": st.itl.p50_us,
                    "itl_p99_us": st.itl.p99_us,
                    "output_tokens_per_s": st.output_tokens_per_s,
                    "responses_per_s": st.responses_per_s,
                }
            )
            if st.goodput_rps is not None:
                metrics["goodput_rps"] = st.goodput_rps
        for share in best.models:  # a traffic mix: each model's own figures at the level picked
            metrics[f"{share.model}.throughput_infer_per_s"] = share.result.throughput_infer_per_s
            metrics[f"{share.model}.latency_us"] = share.result.latency().percentile_us(percentile)
        if best.server is not None:
            metrics["server_queue_avg_us"] = best.server.queue_avg_us
            metrics["server_compute_infer_avg_us"] = best.server.compute_infer_avg_us
            if best.server.execution_count:
                metrics["avg_batch"] = best.server.inference_count / best.server.execution_count
    if mem:
        metrics["gpu_memory_bytes"] = max(mem)
    return TrialVerdict(
        feasible_load=best.load if best else None,
        throughput_infer_per_s=best.throughput_infer_per_s if best else None,
        latency_us=budget.level_us(best) if best else None,
        lowest_over_budget=lowest_over,
        lowest_throughput=first.throughput_infer_per_s if first else 0.0,
        lowest_latency_us=budget.level_us(first) if first else float("inf"),
        levels_measured=len(levels),
        gpu_memory_bytes=max(mem) if mem else None,
        metrics=metrics,
    )


def constraints(settings: ConstraintSettings, v: TrialVerdict) -> tuple[bool, dict[str, float]]:
    """A verdict's constraint values (<= 0 is satisfied), relative so they mix on one scale:
    the latency budget, and --min-throughput / --max-gpu-memory when given. GPU memory
    unknown (no metrics) does not break the constraint."""
    budget_us = settings.budget.latency_budget_us
    lat = v.latency_us if v.latency_us is not None else v.lowest_latency_us
    rel = (lat - budget_us) / budget_us
    cons = {"latency": rel if v.within_budget else max(1e-6, rel)}
    if settings.min_throughput is not None:
        tput = v.throughput_infer_per_s or 0.0
        cons["min_throughput"] = (settings.min_throughput - tput) / settings.min_throughput
    if settings.max_gpu_memory_bytes is not None:
        mem = v.gpu_memory_bytes
        limit = settings.max_gpu_memory_bytes
        cons["gpu_memory"] = 0.0 if mem is None else (mem - limit) / limit
    cons = {k: (c if math.isfinite(c) else 1e6) for k, c in cons.items()}
    return all(c <= 0 for c in cons.values()), cons


def level_table(
    record: RunRecord, percentile: float, metric: str = "latency", mix_scale: Mapping[str, float] | None = None
) -> list[dict[str, Any]]:
    """One short row per measured level (for progress lines)."""
    return [
        {
            "load": lv.load.label,
            "throughput": lv.throughput_infer_per_s,
            "latency_us": level_budget_us(lv, percentile, metric, mix_scale),
            "errors": lv.error_count,
        }
        for lv in record.levels
    ]
