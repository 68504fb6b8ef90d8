"""Progress events -> Prometheus series, served over HTTP while a run goes on.

One more subscriber of the typed progress events the stages already emit: the load generator's
hot path gains no hook. Counters are the recorder's own exact counts of the level so far
(WindowMeasured.counts), replaced by the level's final result at LevelDone, so a finished level's
counters equal its run record's. Histograms are kept as bucket counts here (numpy, one call per
window) and handed to prometheus_client's exposition as they are.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from perfkit.errors import PortInUseError
from perfkit.measure import LevelDone, LevelStarted, WindowMeasured
from perfkit.records import STATUS_DROPPED, FirstResponseHistogram, LevelResult, LoadLevel, RunRecord, status_name

_log = logging.getLogger(__name__)

# 100 us to ~26 s, doubling: fine enough for an identity model, wide enough for an LLM.
LATENCY_BUCKETS_S = tuple(1e-4 * 2**k for k in range(19))
_DROPPED = status_name(STATUS_DROPPED)


@dataclass
class _Level:
    """What is known of one level: its exact counts so far and its latency buckets."""

    load: LoadLevel
    offered: int = 0
    completed: int = 0
    inferences: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    dropped: int = 0
    late: int = 0
    throughput: float = 0.0
    stable: float = 0.0
    throughput_rel: float | None = None
    latency_rel: float | None = None
    buckets: dict[str, np.ndarray] = field(default_factory=dict)  # kind -> per-bucket counts (+Inf last)
    sums_s: dict[str, float] = field(default_factory=dict)
    tokens: int | None = None
    done: bool = False
    first_response: tuple[FirstResponseHistogram, ...] = ()  # the server's, per model it served (at level end)

    def observe(self, kind: str, latencies_us: Any) -> None:
        if latencies_us is None or len(latencies_us) == 0:
            return
        seconds = np.asarray(latencies_us, dtype=float) / 1e6
        index = np.searchsorted(LATENCY_BUCKETS_S, seconds, side="left")  # le-buckets: value <= bound
        counts = np.bincount(index, minlength=len(LATENCY_BUCKETS_S) + 1)
        self.buckets[kind] = self.buckets.get(kind, np.zeros(len(LATENCY_BUCKETS_S) + 1, dtype=np.int64)) + counts
        self.sums_s[kind] = self.sums_s.get(kind, 0.0) + float(seconds.sum())

    def observe_histogram(self, kind: str, encoded: str) -> None:
        """Replace kind's buckets with a whole level's HdrHistogram (microseconds), e.g. TTFT at level end."""
        hist = HdrHistogram.decode(encoded) if encoded else None
        if hist is None:
            return
        values = [(it.value_iterated_to / 1e6, it.count_at_value_iterated_to) for it in hist.get_recorded_iterator()]
        if not values:
            return
        seconds = np.array([v for v, _ in values])
        counts = np.array([n for _, n in values], dtype=np.int64)
        index = np.searchsorted(LATENCY_BUCKETS_S, seconds, side="left")
        self.buckets[kind] = np.bincount(index, weights=counts, minlength=len(LATENCY_BUCKETS_S) + 1).astype(np.int64)
        self.sums_s[kind] = float((seconds * counts).sum())

    def set_counts(self, *, offered: int, errors: Mapping[str, int], inferences: int, late: int, dropped: int) -> None:
        # max(): a count seen once never goes back (the recorder's counts only grow within a level)
        self.offered = max(self.offered, offered)
        self.dropped = max(self.dropped, dropped)
        failed_now = {k: v for k, v in errors.items() if k != _DROPPED}
        for kind, n in failed_now.items():
            self.failed[kind] = max(self.failed.get(kind, 0), n)
        error_count = sum(failed_now.values()) + dropped
        self.completed = max(self.completed, offered - error_count)
        self.inferences = max(self.inferences, inferences)
        self.late = max(self.late, late)


class LiveMetrics(Collector):
    """Turns perfkit's progress events into Prometheus series; serve() exposes them over HTTP."""

    def __init__(self, model: str = "", command: str = "profile") -> None:
        self.model = model
        self.command = command
        self._lock = threading.Lock()
        self._levels: dict[tuple[str, str], _Level] = {}  # (model, level label) -> what is known
        self._current: tuple[str, str] | None = None
        self._tune: dict[str, Any] = {}
        self._trials: dict[str, int] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self._server: Any = None
        self.port = 0

    # -- events ---------------------------------------------------------------------------

    def handle(self, event: object) -> None:
        """Take one progress event (measure or tune) or a finished run record; others are ignored."""
        with self._lock:
            if isinstance(event, LevelStarted):
                self._current = (self.model, event.level.label)
                self._levels.setdefault(self._current, _Level(event.level))
            elif isinstance(event, WindowMeasured):
                self._current = (self.model, event.level.label)
                lv = self._levels.setdefault(self._current, _Level(event.level))
                lv.throughput = event.infer_per_s
                lv.throughput_rel = event.precision.throughput_rel
                lv.latency_rel = event.precision.latency_rel
                if event.level_counts is not None:
                    c = event.level_counts()
                    lv.set_counts(
                        offered=c.request_count, errors=c.errors, inferences=c.inference_count,
                        late=c.late_count, dropped=c.dropped_count,
                    )  # fmt: skip
                if event.window_latencies_us is not None:
                    service_us, corrected_us = event.window_latencies_us()
                    lv.observe("service", service_us)
                    lv.observe("corrected", corrected_us)
            elif isinstance(event, LevelDone):
                self._level_done(self.model, event.result)
            elif isinstance(event, RunRecord):  # perfkit run: each model's levels once it is measured
                for result in event.levels:
                    self._level_done(str(event.model.name), result)
            else:
                self._tune_event(event)

    def _level_done(self, model: str, r: LevelResult) -> None:
        lv = self._levels.setdefault((model, r.load.label), _Level(r.load))
        lv.set_counts(
            offered=r.request_count, errors=r.errors, inferences=r.inference_count, late=r.late_count,
            dropped=r.dropped_count,
        )  # fmt: skip
        lv.throughput = r.throughput_infer_per_s
        lv.stable = 1.0 if r.stable else 0.0
        lv.throughput_rel, lv.latency_rel = r.precision.throughput_rel, r.precision.latency_rel
        if r.streaming is not None:  # streamed requests: TTFT and ITL over the level, and its tokens
            lv.observe_histogram("ttft", r.streaming.ttft.histogram)
            lv.observe_histogram("itl", r.streaming.itl.histogram)
            lv.tokens = round(r.streaming.output_len_mean * r.streaming.request_count)
        lv.first_response = r.first_response
        lv.done = True

    def _tune_event(self, event: object) -> None:
        # Imported here: perfkit.tuner brings Optuna, which a profile never needs.
        from perfkit.tuner._events import TrialMeasured, TrialStarted, TuneEvent  # noqa: PLC0415

        if not isinstance(event, TuneEvent):
            return
        if isinstance(event, TrialStarted):
            self._tune.update(trial=event.number, label=event.label)
            self._trials["started"] = self._trials.get("started", 0) + 1
        elif isinstance(event, TrialMeasured):
            self._tune.update(
                trial=event.number, throughput=event.throughput_infer_per_s, latency_s=event.latency_ms / 1e3,
                feasible=1.0 if event.feasible else 0.0, concurrency=event.concurrency or 0,
            )  # fmt: skip
            outcome = "feasible" if event.feasible else "infeasible"
            self._trials[outcome] = self._trials.get(outcome, 0) + 1
        else:
            name = type(event).__name__
            for kind, outcome in (("TrialPruned", "pruned"), ("TrialFailed", "failed"), ("TrialRejected", "rejected")):
                if name == kind:
                    self._trials[outcome] = self._trials.get(outcome, 0) + 1

    # -- exposition -----------------------------------------------------------------------

    def collect(self) -> Iterator[Any]:
        """The series as they are now (called by prometheus_client on each scrape)."""
        with self._lock:
            yield from self._collect()

    def _collect(self) -> Iterator[Any]:  # noqa: PLR0915
        labels = ["model", "level"]
        fams = {
            "offered": CounterMetricFamily(
                "perfkit_requests_offered", "Requests the schedule made due in the measured period", labels=labels
            ),
            "sent": CounterMetricFamily("perfkit_requests_sent", "Requests handed to the server", labels=labels),
            "completed": CounterMetricFamily(
                "perfkit_requests_completed", "Requests answered without error", labels=labels
            ),
            "inferences": CounterMetricFamily(
                "perfkit_inferences", "Inferences completed (requests x batch size)", labels=labels
            ),
            "failed": CounterMetricFamily(
                "perfkit_requests_failed", "Requests that failed, by kind", labels=[*labels, "kind"]
            ),
            "dropped": CounterMetricFamily(
                "perfkit_requests_dropped", "Due sends that could not be made (open loop, no capacity)", labels=labels
            ),
            "late": CounterMetricFamily(
                "perfkit_requests_late", "Sends made later than their due time (open loop)", labels=labels
            ),
        }
        tput = GaugeMetricFamily(
            "perfkit_throughput_inferences_per_second", "Latest window's throughput", labels=labels
        )
        inflight = GaugeMetricFamily(
            "perfkit_requests_in_flight",
            "Requests in flight: the concurrency in closed loop, sent rate x mean service time in open loop",
            labels=labels,
        )
        stable = GaugeMetricFamily("perfkit_level_stable", "1 once the level is measured stable", labels=labels)
        prec = GaugeMetricFamily(
            "perfkit_level_precision_ratio", "~95% CI half-width (relative) reached so far", labels=[*labels, "figure"]
        )
        current = GaugeMetricFamily("perfkit_level_current", "1 for the level being measured now", labels=labels)
        hists = HistogramMetricFamily(
            "perfkit_request_latency_seconds",
            "Request latency: service (from send) and corrected (from due time, open loop)",
            labels=[*labels, "kind"],
        )
        streamed = {
            "ttft": HistogramMetricFamily(
                "perfkit_time_to_first_token_seconds", "Streamed requests: time to first token (at level end)",
                labels=labels,
            ),
            "itl": HistogramMetricFamily(
                "perfkit_inter_token_latency_seconds", "Streamed requests: gaps between tokens (at level end)",
                labels=labels,
            ),
        }  # fmt: skip
        tokens = CounterMetricFamily("perfkit_output_tokens", "Streamed requests: output tokens", labels=labels)
        first = HistogramMetricFamily(
            "perfkit_server_first_response_seconds",
            "Triton's request-to-first-response histogram over the level (nv_inference_first_response_histogram_ms,"
            " at level end, where the server reports it), per model the server ran",
            labels=[*labels, "server_model", "version"],
        )
        for key, lv in self._levels.items():
            values = list(key)
            fams["offered"].add_metric(values, lv.offered)
            fams["sent"].add_metric(values, lv.offered - lv.dropped)
            fams["completed"].add_metric(values, lv.completed)
            fams["inferences"].add_metric(values, lv.inferences)
            fams["dropped"].add_metric(values, lv.dropped)
            fams["late"].add_metric(values, lv.late)
            for kind, n in sorted(lv.failed.items()):
                fams["failed"].add_metric([*values, kind], n)
            tput.add_metric(values, lv.throughput)
            stable.add_metric(values, lv.stable)
            current.add_metric(values, 1.0 if key == self._current and not lv.done else 0.0)
            for figure, rel in (("throughput", lv.throughput_rel), ("latency", lv.latency_rel)):
                if rel is not None:
                    prec.add_metric([*values, figure], rel)
            if lv.load.mode == "concurrency":
                inflight.add_metric(values, 0.0 if lv.done else lv.load.value)
            elif "service" in lv.buckets and not lv.done:
                mean_s = lv.sums_s["service"] / max(1, int(lv.buckets["service"].sum()))
                inflight.add_metric(values, lv.throughput * mean_s)
            for kind, counts in lv.buckets.items():
                cumulative = np.cumsum(counts)
                buckets = [(f"{b:.6g}", float(n)) for b, n in zip(LATENCY_BUCKETS_S, cumulative[:-1])]
                buckets.append(("+Inf", float(cumulative[-1])))
                if kind in streamed:
                    streamed[kind].add_metric(values, buckets, lv.sums_s[kind])
                else:
                    hists.add_metric([*values, kind], buckets, lv.sums_s[kind])
            if lv.tokens is not None:
                tokens.add_metric(values, lv.tokens)
            for h in lv.first_response:
                server_buckets = [(f"{b / 1e3:.6g}", float(n)) for b, n in zip(h.bounds_ms, h.counts)]
                first.add_metric(
                    [*values, h.model, h.version], [*server_buckets, ("+Inf", float(h.count))], h.sum_ms / 1e3
                )
        yield from fams.values()
        yield from (tput, inflight, stable, prec, current, hists)
        if any(lv.tokens is not None for lv in self._levels.values()):
            yield from (*streamed.values(), tokens)
        if any(lv.first_response for lv in self._levels.values()):
            yield first
        yield from self._collect_tune()

    def _collect_tune(self) -> Iterator[Any]:
        if not self._trials and not self._tune:
            return
        trials = CounterMetricFamily("perfkit_tune_trials", "Tune trials by outcome", labels=["model", "outcome"])
        for outcome, n in sorted(self._trials.items()):
            trials.add_metric([self.model, outcome], n)
        yield trials
        t = self._tune
        if "trial" in t:
            yield GaugeMetricFamily("perfkit_tune_trial", "The trial being run (or last run)", value=t["trial"])
        if "label" in t:
            info = InfoMetricFamily("perfkit_tune_trial_parameters", "The current trial's parameters")
            info.add_metric([], {"model": self.model, "trial": str(t.get("trial", "")), "parameters": t["label"]})
            yield info
        for key, name, help_ in (
            ("throughput", "perfkit_tune_trial_throughput_inferences_per_second", "Last trial's throughput"),
            ("latency_s", "perfkit_tune_trial_latency_seconds", "Last trial's budgeted latency statistic"),
            ("feasible", "perfkit_tune_trial_feasible", "1 when the last trial met the latency budget"),
        ):
            if key in t:
                yield GaugeMetricFamily(name, help_, value=t[key])

    # -- serving --------------------------------------------------------------------------

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve /metrics on host:port in a daemon thread; returns the port. Raises PortInUseError."""
        try:
            self._server, _ = start_http_server(port, addr=host, registry=self.registry)
        except OSError as err:
            raise PortInUseError(
                f"--metrics-port {port} on {host} cannot be served: {err.strerror or err}",
                hint="pick a free port, or 0 for any",
            ) from None
        self.port = int(self._server.server_port)
        _log.info("metrics on http://%s:%d/metrics", host, self.port)
        return self.port

    def close(self) -> None:
        """Stop serving (the last values are lost with the process)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
