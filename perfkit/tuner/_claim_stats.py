"""The numbers of a confirmation: its repeats at one load summarized into a Confirmation (the
claimed throughput with the interval one more run reads in, the percentile's worst reading and
its upper bound), and whether a run already decides that its load cannot be claimed.

The percentile's bound is where an independent re-measurement as long as the confirmation (its
`repeats` runs together: 3 x 5 s by default) would read it, at ~95% (latency_bound_us). A
re-measurement that long is how perf_analyzer reads a level: its reported latencies are those of
the last stability window of measurements (3 of --measurement-interval, 5000 ms by default)
merged into one summary (perf_analyzer's inference_profiler.cc, ProfileHelper: "Only merge the
results if the results have stabilized", MergePerfStatusReports). The bound was for one more run
of a repeat's length (sqrt(1 + 1/n)) before: for a model whose p99 rises slowly with the rate, that
wider bound kept the claim a whole ladder step under a rate its three runs held, well under the
rate perf_analyzer sustains.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from perfkit.recorder import t95, t95_one_sided
from perfkit.records import Budget, Confirmation, LevelResult, LoadLevel, budget_label, open_loop_shortfall

# A ~95% two-sided half-width (a run's own interval, 1.96 sd) as a one-sided 95% bound's (1.645 sd).
ONE_SIDED_OF_TWO = 1.645 / 1.96


def _spread(n: int, repeats: int) -> float:
    """The sd of (a re-measurement as long as `repeats` runs) minus (the mean of n runs), per run's sd."""
    return math.sqrt(1.0 / n + 1.0 / max(repeats, 1))


def latency_bound_us(lats_us: Sequence[float], rels: Sequence[float], repeats: int, n: int | None = None) -> float:
    """Where a re-measurement as long as `repeats` runs would read the percentile, at ~95%, from n
    runs reading lats_us (their own ~95% relative half-widths rels): the larger of the runs' upper
    95% prediction bound and the same from their own intervals pooled (the floor where the runs
    happen to agree). n: as if that many runs had read with the same mean and spread (the most
    more runs could bring the bound down to); by default len(lats_us)."""
    if not lats_us or not all(math.isfinite(x) for x in lats_us):
        return math.inf
    runs = len(lats_us) if n is None else n
    mean = statistics.fmean(lats_us)
    own_half = math.sqrt(statistics.fmean((r * x) ** 2 for r, x in zip(rels, lats_us, strict=True)))
    bound = mean + ONE_SIDED_OF_TWO * own_half * _spread(runs, repeats)
    if len(lats_us) > 1:
        sd = statistics.stdev(lats_us)
        bound = max(bound, mean + t95_one_sided(runs - 1) * sd * _spread(runs, repeats))
    return bound


def levels_bound_us(levels: Sequence[LevelResult], budget: Budget, repeats: int, n: int | None = None) -> float:
    """latency_bound_us of runs' budget statistic, each with its own interval (their precision)."""
    lats = [budget.level_us(lv) for lv in levels]
    return latency_bound_us(lats, [lv.precision.latency_rel or 0.0 for lv in levels], repeats, n)


def cannot_hold(level: LevelResult, budget: Budget, repeats: int = 1) -> bool:
    """Whether one repeat already decides that its load cannot be claimed: over the budget, or its
    own interval so wide that `repeats` runs reading alike would put the bound over it."""
    if not budget.within(level):
        return True
    return levels_bound_us([level], budget, repeats, n=repeats) > budget.latency_budget_us


# A run's first windows were settling where each read its p99 more than this many times the
# highest of the windows after them (at least SETTLED_WINDOWS of those).
SETTLING_FACTOR = 2.0
SETTLED_WINDOWS = 3


def warmed_up_late(level: LevelResult) -> bool:
    """Whether a run's latency fell part way through it: its first windows were still settling, so
    it read no steady state at its load. Either its windows drifted down (the level's drift), or
    its first windows each read the p99 more than SETTLING_FACTOR times any window after them
    (settling_windows). A config just put on the server can take longer than the warm-up (a server
    short of CPU can serve a run's first windows many times slower than the rest, enough to put
    the run's percentile over the budget with no drift found in it)."""
    d = level.drift
    return (d is not None and d.metric != "throughput" and d.after < d.before) or settling_windows(level) > 0


def settling_windows(level: LevelResult) -> int:
    """How many of a run's first windows were still settling: the most k for which each of the
    first k windows read its p99 over SETTLING_FACTOR times the highest p99 of the windows after
    them, at least SETTLED_WINDOWS of those; 0 where none. perf_analyzer reports only windows
    that agree (its stability window), so such windows never reach its figures; a spike later in
    a run is no settling, and counts."""
    p99s = [w.p99_us for w in level.windows]
    for k in range(len(p99s) - SETTLED_WINDOWS, 0, -1):
        if min(p99s[:k]) > SETTLING_FACTOR * max(p99s[k:]):
            return k
    return 0


def only_bound_over(levels: Sequence[LevelResult], budget: Budget) -> bool:
    """Every run made (one at least) read within the budget: where the load did not hold, only the
    bound was over, and the percentile sits just under the budget. Also where one run decided it
    (cannot_hold: its own interval too wide for runs reading alike, the percentile itself just
    under the budget, where the sustainable rate lies just below)."""
    return bool(levels) and all(budget.within(lv) for lv in levels)


def more_could_hold(levels: Sequence[LevelResult], budget: Budget, repeats: int, most: int) -> bool:
    """Whether more runs at this load (up to `most` in all) could bring the bound under the budget:
    with all of them reading as these did (the same mean and spread), it would be."""
    return len(levels) < most and levels_bound_us(levels, budget, repeats, n=most) <= budget.latency_budget_us


def _schedule_factor(load: LoadLevel, level: LevelResult) -> float:
    """Open loop: the rate asked over the rate the run's schedule sent (1 for closed loop, or
    when nothing was sent)."""
    if load.mode != "request_rate" or level.sent_rps <= 0:
        return 1.0
    return load.value / level.sent_rps


def summarize_repeats(
    load: LoadLevel,
    levels: Sequence[LevelResult],
    *,
    repeats: int,
    budget: Budget | None = None,
    budget_ms: float | None = None,
    percentile: float = 99.0,
    metric: str = "latency",
) -> Confirmation:
    """The Confirmation of repeated levels at one load (held when at least `repeats` ran, each is
    within the budget (the settings' Budget, or given as budget_ms / percentile / metric) and so is
    the percentile's upper bound, latency_bound_us).

    The throughput interval is where an independent re-measurement would read (a 95% prediction
    interval, mean +- t(0.975, n-1) * s * sqrt(1 + 1/n)), not the narrower interval of the mean:
    the claim is checked by one more run, not by the mean of many. Open loop, each run's
    throughput is scaled to the rate asked (its Poisson schedule sent a few percent more or less
    than asked, by chance: the same seeds for every candidate would carry one draw's luck into
    every claim), and a Poisson re-measurement's own count noise is added to the interval."""
    if budget is None:
        if budget_ms is None:
            raise TypeError("summarize_repeats needs a budget (or budget_ms)")
        budget = Budget(budget_ms, percentile, metric)
    tputs = [lv.throughput_infer_per_s * _schedule_factor(load, lv) for lv in levels]
    lats = [budget.level_us(lv) for lv in levels]
    mean = statistics.fmean(tputs) if tputs else 0.0
    half = math.inf
    if len(tputs) > 1:
        n = len(tputs)
        half = t95(n - 1) * statistics.stdev(tputs) * math.sqrt(1 + 1 / n)
        duration_s = statistics.fmean(lv.duration_s for lv in levels)
        if load.mode == "request_rate" and load.distribution == "poisson" and duration_s > 0 and load.value > 0:
            count_half = 1.96 * mean / math.sqrt(load.value * duration_s)  # a Poisson count of rate x duration
            half = math.hypot(half, count_half)
    worst = max(lats) if lats else math.inf
    # Where a re-measurement as long as the confirmation reads the percentile, at ~95%; a run that
    # ended the repeats is judged as if `repeats` runs had read alike (cannot_hold's view).
    decided = bool(levels) and len(levels) < repeats and cannot_hold(levels[-1], budget, repeats)
    ucb = levels_bound_us(levels, budget, repeats, n=repeats if len(levels) == 1 and decided else None)
    bad = [lv for lv in levels if not budget.within(lv)]
    # The margin: the percentile's upper ~95% bound, not only its reading, within the budget.
    margin_ok = ucb <= budget.latency_budget_us
    held = len(levels) >= repeats and not bad and margin_ok
    note = ""
    extra = "; ".join(sorted({w for w in (open_loop_shortfall(lv) for lv in bad) if w}))
    over = f" ({extra})" if extra else ""
    if decided:
        rest = f", the other {repeats - len(levels)} not run: no claim could hold here"
        note = (
            f"over the budget in {len(bad)} of {len(levels)} runs{over}{rest}"
            if bad
            else f"its upper bound {ucb / 1e3:.2f} ms over the budget after {len(levels)} of {repeats} runs{rest}"
        )
    elif len(levels) < repeats:
        note = f"{repeats - len(levels)} of {repeats} runs failed"
    elif bad:
        note = f"over the budget in {len(bad)} of {len(levels)} runs{over}"
    elif not margin_ok:
        note = f"within the budget in every run ({len(levels)}), but its upper bound {ucb / 1e3:.2f} ms is not"
    return Confirmation(
        held=held,
        load=load,
        repeats=len(levels),
        throughput_infer_per_s=mean,
        throughput_low=max(0.0, mean - half) if math.isfinite(half) else 0.0,
        throughput_high=mean + half if math.isfinite(half) else mean,
        latency_us=worst,
        latency_ucb_us=ucb,
        note=note,
    )


def describe(c: Confirmation, percentile: float, metric: str) -> str:
    """One line: the confirmed figure with its interval, or why the trial was demoted."""
    stat = budget_label(metric, percentile)
    if not c.held:
        return f"DEMOTED: {c.note or 'not confirmed'}"
    step = f" (stepped down from {c.searched_load.label})" if c.searched_load is not None else ""
    return (
        f"confirmed {c.throughput_infer_per_s:.1f} infer/s (a re-measurement within {c.throughput_low:.1f}-"
        f"{c.throughput_high:.1f} at 95%, "
        f"{c.repeats} runs) at {c.load.label}{step}, {stat} worst {c.latency_us / 1e3:.2f} ms "
        f"(upper bound {c.latency_ucb_us / 1e3:.2f} ms)"
    )
