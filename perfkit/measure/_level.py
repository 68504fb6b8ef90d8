"""Measuring one load level: warm-up, windows until stable (or max), server-side deltas."""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import numpy as np

from perfkit.errors import ServerError
from perfkit.loadgen import LoadGenerator, sleep_until
from perfkit.measure import _server_stats
from perfkit.measure._coverage import rerun_precision
from perfkit.measure._events import Progress, WindowMeasured
from perfkit.measure._metrics import MetricsSampler
from perfkit.measure._mix import mix_shares
from perfkit.measure._stopping import level_stop_rule, target_rel
from perfkit.measure._streaming import streaming_summary
from perfkit.recorder import LevelRecorder, summarize
from perfkit.records import (
    STATUS_OK,
    LevelResult,
    LoadLevel,
    ProfileSpec,
    Samples,
    Window,
    status_name,
)
from perfkit.server.base import Server


@dataclass
class LevelOutcome:
    result: LevelResult
    server_died: bool = False
    error: str = ""
    export: dict[str, Any] | None = None  # --profile-export-file's experiment for the level
    # keep_samples: the level's samples and which of them are the level's (for a caller's own checks)
    samples: tuple[Samples, np.ndarray] | None = None


def measure_level(
    server: Server,
    gen: LoadGenerator,
    spec: ProfileSpec,
    level: LoadLevel,
    stats_models: list[str],
    metrics: MetricsSampler | None,
    progress: Progress | None = None,
    *,
    keep_samples: bool = False,
) -> LevelOutcome:
    """Run one level to a stable result or max_trials windows; never raises for server death."""
    closed = level.mode == "concurrency"
    t0 = gen.start(level)
    window_ns = int(spec.measurement_interval_ms * 1e6)
    warm_until = t0 + int(spec.warmup_s * 1e9)
    if spec.warmup_request_count > 0:
        deadline = time.monotonic() + 30
        seen = 0
        while seen < spec.warmup_request_count and time.monotonic() < deadline:
            time.sleep(0.02)
            seen += len(gen.drain())
        warm_until = max(warm_until, perf_counter_ns())
    sleep_until(warm_until)
    # The server's counters are read before the level starts: every request the level counts is sent
    # after the read, so the level's server statistics hold all of them (and the warm-up's last few).
    before = after = None
    try:
        before = _server_stats.snapshot(server.model_stats, stats_models)
    except ServerError:
        before = None
    warm_until = max(warm_until, perf_counter_ns())
    rec = LevelRecorder(start_ns=warm_until, window_ns=window_ns, closed_loop=closed, batch_size=spec.batch_size)
    rec.add(gen.drain())
    tgt_tput, tgt_lat = target_rel(spec)
    windows: list[Window] = []
    died = False
    error = ""
    precision = None
    rule = level_stop_rule(
        spec,
        closed,
        decided_only=spec.stop_when_decided and spec.latency_threshold_ms is not None,
        latencies_us=lambda i: rec.window_latencies_us(i)[0],
    )
    count_windows = spec.measurement_mode == "count_windows" and not spec.request_count
    for k in range(1, 0 if spec.request_count else spec.max_trials + 1):
        if count_windows:
            end_ns = _count_window_end(server, gen, rec, spec.measurement_request_count, rec.window_end(k - 1))
            rec.ends_ns.append(end_ns)
        else:
            end_ns = warm_until + k * window_ns
            sleep_until(end_ns)
        rec.add(gen.drain())
        windows = rec.windows(k)
        precision = rec.precision(windows, end_ns, spec.percentile)
        if progress:
            lat = rec.latencies_us(end_ns, "service" if closed else "corrected")
            p99_us = float(np.percentile(lat, 99)) if len(lat) else 0.0
            progress(
                WindowMeasured(
                    level, k, windows[-1].infer_per_s, p99_us, precision,
                    functools.partial(rec.counts, end_ns), functools.partial(rec.window_latencies_us, k - 1),
                )
            )  # fmt: skip
        last = windows[-1]
        # A window with nothing completed asks the server whether it is still there: the engine
        # replaces dead connections (and backs off while none can be made), so a server that is
        # gone may leave no failed request in the window at all.
        if last.completed == 0 and not server.is_ready():
            died = True
            error = f"server stopped answering during {level.label}"
            break
        # Closed loop: throughput is the result, so its CI must be tight. Open loop: the
        # offered rate sets throughput (Poisson windows vary by design); what must hold is
        # that the server keeps up with it, or the backlog grows and nothing is stable.
        throughput_ok = _within(precision.throughput_rel, tgt_tput) if closed else _keeps_up(rec, end_ns, tgt_tput)
        decided = _threshold_decided(rec, spec, end_ns, precision.latency_rel, closed)
        if decided == "over":
            break  # more windows cannot bring it under the threshold
        latency_ok = _within(precision.latency_rel, tgt_lat) or decided == "under"
        # what the gate will judge must be certified too, unless the level only had to decide a threshold
        tail_ok = decided == "under" or rec.tail_certified(end_ns, spec.tail_percentiles)
        if rule.ends_after(k, windows, precision, throughput_ok=throughput_ok, latency_ok=latency_ok,
                           tail_ok=tail_ok):  # fmt: skip
            break
    end_ns = rec.window_end(len(windows))
    if spec.request_count:
        died, error = _until_count(server, gen, rec, spec.request_count, level)
    rec.add(gen.stop(drain_timeout_s=0.5 if died else 30.0))
    if not died and before is not None:
        # read once every request of the level is answered, and once the server has counted them
        try:
            after = _server_stats.settled(server.model_stats, stats_models, before, _answered(rec))
        except ServerError:
            after = None
    if spec.request_count:
        # one window of exactly the first request_count requests of the level (perf_analyzer's --request-count)
        rec, end_ns = _count_window(rec, spec.request_count)
        windows, window_ns = rec.windows(1), rec.window_ns
    stable = not died if spec.request_count else rule.stable
    result = _result(rec, spec, level, windows, end_ns, stable, before, after, stats_models, metrics, t0, died)
    result = rule.noted(result)
    if spec.mix:
        result = _with_shares(result, rec, spec, level, len(windows), end_ns, before, after, t0, died)
    export = None
    if spec.profile_export_file:
        from perfkit.measure._export import level_export

        export = level_export(
            rec.samples, rec.level_mask(end_ns), level, rec.start_ns, window_ns, len(windows), rec.ends_ns
        )
    kept = (rec.samples, rec.level_mask(end_ns)) if keep_samples else None
    return LevelOutcome(result, died, error, export, kept)


def _answered(rec: LevelRecorder) -> int:
    """Requests sent since the level started (after the server's counters were read) and answered
    successfully; of a traffic mix, those of its first model (the first of the statistics' models)."""
    s = rec.samples
    ok = (s.status == STATUS_OK) & (s.sent_ns >= rec.start_ns)
    if s.model is not None:
        ok &= s.model == 0
    return int(ok.sum())


MIN_DECISION_SAMPLES = 20

# count_windows: perf_analyzer looks every second whether the window holds enough requests
# (src/inference_profiler.cc:1231-1238 at commit 263c5f6e, Measure: sleep 1000 ms until
# CountCollectedRequests() >= count)
COUNT_POLL_NS = 1_000_000_000
# ... and waits for them without end; perfkit ends a window after this long (fewer requests then)
COUNT_WINDOW_CAP_NS = 60_000_000_000


def _count_window_end(server: Server, gen: LoadGenerator, rec: LevelRecorder, count: int, w0: int) -> int:
    """The end of the count window starting at w0: the first whole second after w0 by which `count`
    requests have completed ok in it (or the cap, or a server that stopped answering)."""
    end, seen = w0, -1
    while True:
        end += COUNT_POLL_NS
        sleep_until(end)
        rec.add(gen.drain())
        s = rec.samples
        n = int(((s.done_ns >= w0) & (s.done_ns < end) & (s.status == STATUS_OK)).sum())
        if n >= count or end - w0 >= COUNT_WINDOW_CAP_NS:
            return end
        if n == seen and not server.is_ready():
            return end
        seen = n


def _until_count(
    server: Server, gen: LoadGenerator, rec: LevelRecorder, count: int, level: LoadLevel
) -> tuple[bool, str]:
    """Poll until `count` requests of the level have completed; (server died, why)."""
    quiet_since = time.monotonic()
    seen = 0
    while True:
        time.sleep(0.01)
        rec.add(gen.drain())
        done = int(rec.level_mask(2**63 - 1).sum())
        if done >= count:
            return False, ""
        if done > seen:
            seen, quiet_since = done, time.monotonic()
        elif time.monotonic() - quiet_since > 5.0:
            if not server.is_ready():
                return True, f"server stopped answering during {level.label}"
            quiet_since = time.monotonic()


def _count_window(rec: LevelRecorder, count: int) -> tuple[LevelRecorder, int]:
    """A recorder whose level is the first `count` requests (by send or due time) and whose one
    window runs from the level's start to the last of their completions; and the level's end."""
    s = rec.samples
    mask = rec.level_mask(2**63 - 1)
    t = (s.sent_ns if rec.closed_loop else s.due_ns)[mask]
    end_ns = int(np.sort(t)[min(count, len(t)) - 1]) + 1 if len(t) else rec.start_ns + 1
    level = rec.level_mask(end_ns)
    last_done = int(s.done_ns[level].max()) if level.any() else end_ns
    out = LevelRecorder(
        start_ns=rec.start_ns,
        window_ns=max(1, last_done + 1 - rec.start_ns),
        closed_loop=rec.closed_loop,
        batch_size=rec.batch_size,
    )
    # the window counts completions: only the level's requests (not warm-up ones still in flight)
    out.add(
        dataclasses.replace(
            s,
            due_ns=s.due_ns[level],
            sent_ns=s.sent_ns[level],
            done_ns=s.done_ns[level],
            status=s.status[level],
            response_ns=None if s.response_ns is None else s.response_ns[level],
            output_tokens=None if s.output_tokens is None else s.output_tokens[level],
            input_tokens=None if s.input_tokens is None else s.input_tokens[level],
            model=None if s.model is None else s.model[level],
        )
    )
    return out, end_ns


def _threshold_decided(
    rec: LevelRecorder, spec: ProfileSpec, end_ns: int, latency_rel: float | None, closed: bool
) -> str | None:
    """'over' or 'under' when the level's latency statistic is clearly on one side of
    spec.latency_threshold_ms (its ~95% interval, or the median already over it for a
    percentile >= 50); None when undecided or not asked (spec.stop_when_decided)."""
    if not spec.stop_when_decided or spec.latency_threshold_ms is None:
        return None
    lat = rec.latencies_us(end_ns, "service" if closed else "corrected")
    if lat.size < MIN_DECISION_SAMPLES:
        return None
    limit_us = spec.latency_threshold_ms * 1e3
    pct = spec.percentile
    if pct is not None and pct >= 50 and float(np.median(lat)) > limit_us:
        return "over"
    if latency_rel is None:
        return None
    value = float(lat.mean()) if pct is None else float(np.percentile(lat, pct))
    if value * (1 - latency_rel) > limit_us:
        return "over"
    if value * (1 + latency_rel) < limit_us:
        return "under"
    return None


def _within(value: float | None, target: float) -> bool:
    return value is not None and value <= target


def _keeps_up(rec: LevelRecorder, end_ns: int, tolerance: float) -> bool:
    c = rec.counts(end_ns)
    return c.sent_rps > 0 and c.completed_rps >= c.sent_rps * (1 - tolerance)


def _with_shares(
    result: LevelResult,
    rec: LevelRecorder,
    spec: ProfileSpec,
    level: LoadLevel,
    windows: int,
    end_ns: int,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    t0_ns: int,
    died: bool,
) -> LevelResult:
    """A mixed level: the whole mix's figures with each model's beside them (its server statistics its own)."""

    def result_of(sub: LevelRecorder, model: str) -> LevelResult:
        b = None if before is None else {model: before[model]}
        a = None if after is None else {model: after[model]}
        wins = sub.windows(windows)
        return _result(sub, spec, level, wins, end_ns, result.stable, b, a, [model], None, t0_ns, died)

    # the server's figures are each model's; the first model's with the others as its "steps" would mislead
    return dataclasses.replace(result, models=mix_shares(spec, rec, windows, result_of), server=None)


def _result(
    rec: LevelRecorder,
    spec: ProfileSpec,
    level: LoadLevel,
    windows: list[Window],
    end_ns: int,
    stable: bool,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    stats_models: list[str],
    metrics: MetricsSampler | None,
    t0_ns: int,
    died: bool,
) -> LevelResult:
    closed = level.mode == "concurrency"
    c = rec.counts(end_ns)
    precision = rerun_precision(rec.precision(windows, end_ns, spec.percentile))
    server = None
    if before is not None and after is not None:
        server = _server_stats.delta(before, after, stats_models[0])
    samples: tuple[Any, ...] = ()
    first_response: tuple[Any, ...] = ()
    if metrics is not None:
        origin_ns = int(metrics.origin * 1e9)
        samples = metrics.between((t0_ns - origin_ns) / 1e9, (end_ns - origin_ns) / 1e9)
        first_response = metrics.first_response_between((t0_ns - origin_ns) / 1e9, (end_ns - origin_ns) / 1e9)
    examples = rec.samples.error_examples
    note = ""
    if examples:
        note = "; ".join(f"{status_name(k)}: {v.strip()[:160]}" for k, v in sorted(examples.items()))
    reconnects = rec.samples.reconnects
    if reconnects:
        # Connections died under the load (server restarted, a proxy closed them...) and
        # were replaced: the level went on, but its figures include that disruption.
        note = (f"{reconnects} connection(s) lost and replaced; " + note).strip("; ")
    if died:
        note = ("server died; " + note).strip("; ")
    return LevelResult(
        load=level,
        batch_size=spec.batch_size,
        stable=stable,
        precision=precision,
        duration_s=(end_ns - rec.start_ns) / 1e9,
        **dataclasses.asdict(c),
        service=summarize("service", rec.latencies_us(end_ns, "service")),
        corrected=None if closed else summarize("corrected", rec.latencies_us(end_ns, "corrected")),
        windows=tuple(windows),
        server=server,
        metrics=samples,
        first_response=first_response,
        note=note,
        streaming=streaming_summary(
            rec.samples,
            rec.level_mask(end_ns),
            start_ns=rec.start_ns,
            end_ns=end_ns,
            closed_loop=closed,
            goodput_slo_ms=spec.goodput_slo_ms,
            window_ns=rec.window_ns,
        )
        if spec.streaming
        else None,
        reconnects=reconnects,
    )
