"""Calibration of a decoupled (streaming) model for the predicted search: one stream at a time on
one instance (the stream's own times, nothing waiting), then the saturated rates at the space's two
smallest instance counts (how its instances share what they run on). Every level streams over gRPC,
as the trials do.

What each stream is made of comes from the server where it reports it, else from the measured
stream. Triton's statistics extension keeps `response_stats` per response index ("0", "1", ...:
docs/protocol/extension_statistics.md in triton-inference-server/server), each response's
compute_infer timed from its own start (qa/L0_response_statistics/response_statistics_test.py holds
each index's compute_infer to the model's delay before that response): index 0 is the first
response's time, the later ones the interval between responses. A backend reports them through
TRITONBACKEND_ModelInstanceReportResponseStatistics; the python backend of the bundled 2.51 does not
(its `response_stats` is empty), so there the first response's time is the measured TTFT less the
request's wait and the overhead outside the instance, and the interval the measured ITL.

Whether the instance is held for the whole stream comes from the request's own statistics: a
decoupled model's execution (compute_infer) lasts as long as its execute runs, the whole stream
where execute sends every response itself, next to nothing where it hands the request to a thread
of its own and returns (fixtures/models/streamer). Only a held instance is the stream model of
perfkit/predict/_stream.py; otherwise the calibration says so (StreamNotHeld) and the tune measures."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfkit import predict
from perfkit.errors import MeasurementError
from perfkit.records import Calibration, CalibrationPoint, LevelResult, LoadLevel, ProfileSpec
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._space import P_COUNT
from perfkit.tuner._trial import TrialRunner

STREAM_LEVEL_S = 1.5  # each calibration level: one window this long
CONTENTION_CLIENTS_PER_INSTANCE = 4  # clients per instance in the saturated levels (streams always waiting)
# An execution at least this share of the stream's time on the server (queue excluded) holds its
# instance for the stream; one that returns at once is a small fraction of it.
HELD_SHARE = 0.8
KEPT_ITL = (50.0, 90.0, 95.0, 99.0)


class StreamNotHeld(MeasurementError):
    """The model's executions end before its streams do: its instances do not bound its streams."""


@dataclass(frozen=True)
class StreamCalibrated(TuneEvent):
    """The stream's calibrated model (the Calibration's service time is the whole stream)."""

    cal: Calibration
    stream: predict.StreamModel
    source: str  # where the first response's time and the interval came from

    def line(self) -> str:
        s, c = self.stream, self.cal
        shared = ""
        if c.instance_counts:
            rates = " and ".join(f"{r:.0f}" for r in c.saturated_rps)
            counts = " and ".join(str(n) for n in c.instance_counts)
            shared = f"; {rates} streams/s saturated at {counts} instances: shared fraction {c.shared_fraction:.2f}"
        return (
            f"calibrated in {c.duration_s:.0f} s: each stream holds its instance {c.fixed_us / 1e3:.2f} ms (first"
            f" response {s.first_us / 1e3:.2f} ms + {s.first_overhead_us / 1e3:.2f} ms outside, then"
            f" {s.responses - 1:.1f} x {s.interval_us / 1e3:.2f} ms; ITL p99 {s.itl_us(99.0) / 1e3:.2f} ms, from"
            f" {self.source}), overhead {c.overhead_us / 1e3:.2f} ms{shared}"
        )


def _spec(t: TrialRunner, clients: int) -> ProfileSpec:
    """One closed-loop streaming level, one window."""
    return ProfileSpec(
        model=t.model,
        levels=(LoadLevel("concurrency", float(clients)),),
        protocol="grpc",
        streaming=True,
        measurement_interval_ms=STREAM_LEVEL_S * 1e3,
        max_trials=1,
        min_windows=1,
        warmup_s=0.3,
    )


def _level(t: TrialRunner, clients: int) -> LevelResult:
    return t.measure(t.server, _spec(t, clients)).levels[-1]


def response_times_us(before: Mapping[str, Any], after: Mapping[str, Any], model: str) -> dict[int, tuple[int, float]]:
    """{response index: (responses, mean compute_infer + compute_output us)} of one model between
    two /v2/models/M/stats answers (successful responses only, versions summed); empty where the
    server keeps no response statistics."""

    def totals(stats: Mapping[str, Any]) -> dict[int, tuple[int, int]]:
        out: dict[int, tuple[int, int]] = {}
        for entry in stats.get("model_stats", []) or []:
            if entry.get("name") != model:
                continue
            for key, r in (entry.get("response_stats") or {}).items():
                if not str(key).isdigit():
                    continue
                ok = r.get("success", {})
                c0, n0 = out.get(int(key), (0, 0))
                out[int(key)] = (c0 + int(ok.get("count", 0)), n0 + int(ok.get("ns", 0)))
        return out

    b, a = totals(before), totals(after)
    got = {}
    for i, (count, ns) in a.items():
        c0, n0 = b.get(i, (0, 0))
        if count - c0 > 0:
            got[i] = (count - c0, (ns - n0) / 1e3 / (count - c0))
    return dict(sorted(got.items()))


def stream_model(
    level: LevelResult, responses: Mapping[int, tuple[int, float]]
) -> tuple[predict.StreamModel, float, str]:
    """The stream model, the overhead outside the instance (us) and where the stream's times came
    from, from a level of one stream at a time and the server's response statistics of it. Raises
    MeasurementError where the level streamed nothing or the server reported no execution, and
    StreamNotHeld where its executions end before its streams."""
    st, s = level.streaming, level.server
    if st is None or st.request_count == 0 or s is None or s.execution_count == 0:
        raise MeasurementError(f"the calibration of {level.load} streamed nothing the server counted")
    execution_us = s.compute_input_avg_us + s.compute_infer_avg_us + s.compute_output_avg_us
    on_server_us = max(level.service.mean_us - s.queue_avg_us, 1e-9)
    if execution_us < HELD_SHARE * on_server_us:
        raise StreamNotHeld(
            f"its executions ({execution_us / 1e3:.2f} ms) end before its streams ({on_server_us / 1e3:.2f} ms): the"
            " model sends its responses after execute returned, so its instances do not bound its streams"
        )
    overhead_us = max(0.0, level.service.mean_us - s.queue_avg_us - execution_us)
    count = max(1.0, st.output_len_mean)
    itl = tuple((p, st.itl.percentile_us(p)) for p in KEPT_ITL) if st.itl.count else ()
    first_at = st.ttft.mean_us - s.queue_avg_us
    if 0 in responses and len(responses) > 1:
        first_us = responses[0][1]
        later = [(n, us) for i, (n, us) in responses.items() if i > 0]
        interval_us = sum(n * us for n, us in later) / sum(n for n, _ in later)
        source = "the server's response statistics"
    else:
        # what the server does not split: the first response's way out is taken to cost what the
        # request's end-to-end overhead does
        first_us = max(0.0, first_at - overhead_us)
        interval_us = st.itl.mean_us if st.itl.count else 0.0
        source = "the measured stream"
    model = predict.StreamModel(first_us=first_us, interval_us=interval_us, responses=count,
                        first_overhead_us=max(0.0, first_at - first_us), itl_p_us=itl)  # fmt: skip
    return model, overhead_us, source


def calibrate_stream(t: TrialRunner) -> StreamCalibrated:
    """Measure the decoupled model on the server: one stream at a time on one instance (its times,
    from the server's response statistics where it keeps them, else the stream measured), then,
    where the space searches instance counts, CONTENTION_CLIENTS_PER_INSTANCE streams per instance
    at its two smallest counts (the saturated rates the contention is fitted to). The user's config
    is put back after. Raises StreamNotHeld, MeasurementError and what measuring raises."""
    started = time.monotonic()
    count_dim = next((d for d in t.space.dimensions if d.name == P_COUNT), None)
    counts = sorted(int(c) for c in count_dim.choices)[:2] if count_dim and not count_dim.is_range else []
    base = t.original_fixed_params()
    subject = t.subject
    with subject.route.guard(t.server, subject.paths, reload_last=subject.reload_last):
        t.put_candidate(subject.candidate({**base, P_COUNT: 1} if count_dim else dict(base),
                                          is_original=False, number=-1).text)  # fmt: skip
        before = t.server.model_stats(t.model)
        light = _level(t, 1)
        after = t.server.model_stats(t.model)
        stream, overhead_us, source = stream_model(light, response_times_us(before, after, t.model))
        s = light.server
        assert s is not None  # stream_model raised otherwise
        held_us = s.compute_input_avg_us + s.compute_infer_avg_us + s.compute_output_avg_us
        rates: list[float] = []
        for c in counts if len(counts) == 2 else []:
            t.put_candidate(subject.candidate({**base, P_COUNT: c}, is_original=False, number=-1).text)
            rates.append(_level(t, CONTENTION_CLIENTS_PER_INSTANCE * c).throughput_infer_per_s)
    cal = predict.calibration(
        t.model,
        (CalibrationPoint(1, s.execution_count, held_us),),
        overhead_us=overhead_us,
        instance_counts=tuple(counts) if rates else (),
        saturated_rps=tuple(rates),
        duration_s=time.monotonic() - started,
        host_unbatched=True,
    )
    return StreamCalibrated(cal, stream, source)
