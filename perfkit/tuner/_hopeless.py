"""When a trial's first levels already answer it: a level that shows no load can meet the budget,
so the load search ends there (LoadLadder, find_load's probe) and the trial is pruned saying why,
instead of walking down a ladder whose every step is over (in open loop the lowest rates are the
slowest levels to fill their windows: tens of seconds each).

Both rules read a level at the least load a search offers (one request at a time: concurrency 1,
the open-loop search's probe, or its ladder's lowest rate), where nothing of the load inflates what
it reads: at a higher load a request's compute can include its instances' contention for a shared
device, or, for a BLS model, its composed models' queues, which a lower load would not have.

- Service time. Where the level's executions each held one request (its server statistics: as many
  executions as requests, within UNBATCHED), the server's compute per request (input, infer, output)
  is the time one request takes alone; no load runs a request quicker than alone, and a batch takes at
  least as long as one request. A mean over the budget (at a percentile at or above the median) is
  over at every load.
- The floor. The percentile read over the budget by more than FLOOR_MARGIN and its own ~95% interval:
  there is no lower load to try, and a reading that far over is no shared host's swing (a closed-loop
  level read 30% over can be within on a second reading, _ladder.LoadLadder; a second reading at 1.5
  times the budget would not be).
"""

from __future__ import annotations

from perfkit.records import Budget, LevelResult

UNBATCHED = 1.05  # inferences per execution within 5% of the client's batch: each execution one request
FLOOR_MARGIN = 1.5  # past a shared host's swing of one reading (about 30%), with room to spare
MEDIAN = 50.0


def service_over(level: LevelResult, budget: Budget, batch_size: int = 1) -> str | None:
    """Why the level's service time alone is over the budget at every load; None where it is not
    (or the level cannot tell: no server statistics, batched executions, a stream's budget)."""
    s = level.server
    if budget.metric != "latency" or budget.percentile < MEDIAN or s is None or s.execution_count <= 0:
        return None
    if s.inference_count > s.execution_count * max(batch_size, 1) * UNBATCHED:
        return None  # batched: at a lower load the batches are smaller, and quicker
    service_us = s.compute_input_avg_us + s.compute_infer_avg_us + s.compute_output_avg_us
    if service_us <= budget.latency_budget_us:
        return None
    return (
        f"its service time alone, {service_us / 1e3:.2f} ms a request unbatched, is over the budget: no load holds it"
    )


def floor_over(level: LevelResult, budget: Budget) -> str | None:
    """Why a level at the least load a search offers shows no load holds: its percentile over the
    budget by more than FLOOR_MARGIN and its own interval; None where noise could explain it."""
    lat_us = budget.level_us(level)
    margin = max(FLOOR_MARGIN, 1.0 + (level.precision.latency_rel or 0.0))
    if not lat_us > margin * budget.latency_budget_us:
        return None
    return (
        f"{budget.label} {lat_us / 1e3:.2f} ms at {level.load.label}, {lat_us / budget.latency_budget_us:.1f}x the "
        "budget, past what noise explains, at the least load: no load holds it"
    )


def hopeless(level: LevelResult, budget: Budget, batch_size: int = 1, *, at_floor: bool) -> str | None:
    """Why no load can meet the budget, from a level at the least load the search offers (at_floor);
    None where a lower or another load might, or the level is not at the least load."""
    if level.error_count > 0 or not at_floor:
        return None  # errors are no reading of the latency; above the least load, the load inflates it
    return service_over(level, budget, batch_size) or floor_over(level, budget)


def at_least_load(level: LevelResult) -> bool:
    """Whether a level is one request at a time (concurrency 1): the least load a search offers."""
    return level.load.mode == "concurrency" and level.load.value <= 1.0
