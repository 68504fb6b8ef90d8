"""perf_analyzer's periodic concurrency: one run that ramps concurrency by response count.

`--periodic-concurrency-range START:END:STEP --request-period N` (decoupled models, gRPC
streaming): START requests in flight, STEP more each time every request has had N responses,
up to END in all; the run ends once END requests have ended. There are no windows and no
stability check (perf_analyzer: src/inference_profiler.h, BenchmarkPeriodicConcurrencyMode);
the result is the `--profile-export-file`, whose one experiment perf_analyzer labels
concurrency 1 with window boundaries [0, 2^64-1] (its FIXME there), as perfkit does.
The loop itself is `perfkit.loadgen._loops.PeriodicLoop`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import numpy as np

from perfkit.errors import ServerError
from perfkit.loadgen import LoadGenerator, PeriodicSpec
from perfkit.measure import _server_stats
from perfkit.measure._level import LevelOutcome, _result
from perfkit.measure._metrics import MetricsSampler
from perfkit.recorder import LevelRecorder
from perfkit.records import STATUS_UNFINISHED, LoadLevel, ProfileSpec
from perfkit.server.base import Server

_log = logging.getLogger(__name__)

# the server is asked whether it is still there after this long without a request ending
QUIET_CHECK_S = 5.0


def periodic_level(spec: ProfileSpec) -> LoadLevel:
    """The run's one level in the record: closed loop at END (the most requests ever in flight)."""
    assert spec.periodic_concurrency is not None
    return LoadLevel("concurrency", spec.periodic_concurrency[1])


def measure_periodic(
    server: Server,
    gen: LoadGenerator,
    spec: ProfileSpec,
    stats_models: list[str],
    metrics: MetricsSampler | None,
) -> LevelOutcome:
    """Run the ramp to its end; never raises for server death (the outcome says)."""
    assert spec.periodic_concurrency is not None
    start, end, step = spec.periodic_concurrency
    level = periodic_level(spec)
    try:
        before: dict[str, Any] | None = _server_stats.snapshot(server.model_stats, stats_models)
    except ServerError:
        before = None
    t0 = gen.start_periodic(PeriodicSpec(start, end, step, spec.request_period))
    rec = LevelRecorder(start_ns=t0, window_ns=1, closed_loop=True, batch_size=spec.batch_size)
    died, error, finished_ns = False, "", 0
    seen, quiet_since = 0, time.monotonic()
    while True:
        time.sleep(0.01)
        rec.add(gen.drain())
        finished_ns, error, steps = gen.periodic_state()
        if finished_ns:
            break
        if len(rec.samples) > seen:
            seen, quiet_since = len(rec.samples), time.monotonic()
        elif time.monotonic() - quiet_since > QUIET_CHECK_S:
            if not server.is_ready():
                died, error = True, "server stopped answering during the periodic concurrency run"
                break
            quiet_since = time.monotonic()
    after = None
    if not died:
        try:
            after = _server_stats.snapshot(server.model_stats, stats_models)
        except ServerError:
            after = None
    # perf_analyzer returns once END requests have ended (src/periodic_concurrency_manager.cc:93-100 at
    # commit 263c5f6e):
    # the requests still in flight then are cut off and not reported; so here (those that
    # ended while this thread was polling too)
    rec.add(gen.stop(drain_timeout_s=0.0))
    s = rec.samples
    cut = s.status == STATUS_UNFINISHED
    if finished_ns and not error and int((~cut).sum()) > end:
        # the END-th to end is the last: a request that ended just after it (before the loop
        # thread saw the END-th) is cut off too, as in perf_analyzer, whose callback stops at once
        # by index, not by time: responses read together share one arrival time
        done = np.flatnonzero(~cut)
        cut[done[np.argsort(s.done_ns[done], kind="stable")[end:]]] = True
    kept = _subset(s, ~cut, {k: v for k, v in s.error_examples.items() if k != STATUS_UNFINISHED})
    _log.info(
        "periodic concurrency %d:%d:%d, request period %d: slots %s; %d request(s) cut off at the end",
        start, end, step, spec.request_period, [n for _, n in steps], int(cut.sum()),
    )  # fmt: skip
    last_done = int(kept.done_ns.max()) if len(kept) else t0 + 1
    out = LevelRecorder(start_ns=t0, window_ns=max(1, last_done + 1 - t0), closed_loop=True, batch_size=spec.batch_size)
    out.add(kept)
    end_ns = last_done + 1
    windows = out.windows(1)
    result = _result(out, spec, level, windows, end_ns, True, before, after, stats_models, metrics, t0, died)
    note = f"periodic concurrency {start}:{end}:{step} every {spec.request_period} responses (no stability check)"
    result = dataclasses.replace(result, note=(note + "; " + result.note).strip("; "))
    export = None
    if spec.profile_export_file:
        from perfkit.measure._export import level_export

        export = level_export(out.samples, out.level_mask(end_ns), level, t0, end_ns - t0, 1)
        export["experiment"] = {"mode": "concurrency", "value": 1}
        export["window_boundaries"] = [0, 2**64 - 1]
    return LevelOutcome(result, died, error, export)


def _subset(s: Any, keep: np.ndarray, examples: dict[int, str]) -> Any:
    return dataclasses.replace(
        s,
        error_examples=examples,
        due_ns=s.due_ns[keep],
        sent_ns=s.sent_ns[keep],
        done_ns=s.done_ns[keep],
        status=s.status[keep],
        response_ns=None if s.response_ns is None else s.response_ns[keep],
        output_tokens=None if s.output_tokens is None else s.output_tokens[keep],
    )
