"""MLPerf LoadGen, the second judge of a claim: "this model serves R requests a second with its pN
latency within B ms".

LoadGen (`mlcommons-loadgen`, `import mlperf_loadgen`) in its Server scenario schedules Poisson
arrivals at `server_target_qps` itself and holds the run to `server_target_latency_ns` at
`server_target_latency_percentile`; its early-stopping estimate says whether the percentile bound
holds with confidence given the queries it saw. The system under test here is a Python SUT over
Triton's gRPC (tritonclient's `async_infer`): each sample LoadGen issues is one request of the model
with inputs built once from its metadata, completed to LoadGen from the gRPC callback.

`loadgen_check` runs one test and parses its `mlperf_log_summary.txt` (and `mlperf_log_detail.txt`
for the figures the summary leaves out); `second_judge` puts its verdict beside perf_analyzer's and
says where they disagree. Every benchmark that re-measures a claim with perf_analyzer calls
`second_judge` (benchmarks/tune_claims.py, predict_quality.py, pipeline_quality.py).
"""

from __future__ import annotations

import dataclasses
import json
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# LoadGen's minimum run: MLPerf's rules ask 600 s for a submission; a claim here is checked over 60 s
# by default (a benchmark's --loadgen-s; the server test runs a short one).
DEFAULT_MIN_DURATION_S = 60.0
# LoadGen's default min_query_count is 270,336 queries: at the rates checked here that is hours, so the
# run's length is set by min_duration and the query count asks only what early stopping needs to decide.
MIN_QUERIES = 64
# A claim holds when LoadGen's run at (1 - this) x the claim is VALID: the tolerance the perf_analyzer
# re-measurements allow a claim (benchmarks/_quality_figures.py CLAIM_GOAL, tune_claims.py's 10%). A
# claim is the highest rate a search held, at the budget's edge: LoadGen at the claim itself reads its
# p99 within a few percent of the budget, over or under by noise (a tune claim of 106 req/s on the
# queue fixture read p99 105 ms against 100).
CLAIM_TOLERANCE = 0.10
# Samples LoadGen cycles through (the inputs are the same bytes for each: a claim is about the server,
# not about the data).
SAMPLE_COUNT = 64
# Requests sent one after another before LoadGen starts: the first requests of a connection and of a
# freshly loaded python model answer slowly (a cold run read p99 200 ms at 30 req/s on a 10 ms model,
# from its first few queries), and LoadGen has no warm-up of its own.
WARMUP_REQUESTS = 32
# A request still unanswered this long after the run is counted failed (LoadGen waits for every sample).
DRAIN_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True)
class LoadgenVerdict:
    """One LoadGen Server-scenario run against a claim."""

    target_rps: float
    target_latency_ms: float
    percentile: float  # 99.0: the budget's percentile, LoadGen's server_target_latency_percentile x 100
    valid: bool  # LoadGen's "Result is : VALID", and no request failed
    result: str  # "VALID" / "INVALID" as LoadGen wrote it
    completed_rps: float | None  # "Completed samples per second"
    scheduled_rps: float | None  # "Scheduled samples per second"
    percentile_latency_ms: float | None  # LoadGen's latency at `percentile` (its p99 for a p99 budget)
    p99_ms: float | None
    constraints_met: bool | None  # "Performance constraints satisfied": the percentile within the target
    early_stopping_met: bool | None  # "Early stopping satisfied": the bound holds with LoadGen's confidence
    early_stopping: str  # LoadGen's "Early Stopping Result" lines, joined
    queries: int  # queries LoadGen issued (mlperf_log_detail.txt result_query_count)
    over_latency: int  # of them over the target latency (result_overlatency_query_count)
    errors: int
    duration_s: float
    log_dir: str

    def line(self) -> str:
        """One line for a benchmark's report."""
        p = f"p{self.percentile:g} {_ms(self.percentile_latency_ms)}"
        es = {True: "met", False: "NOT met", None: "not reported"}[self.early_stopping_met]
        return (
            f"LoadGen {self.result} at {self.target_rps:.0f} req/s (completed {_f(self.completed_rps)}/s), {p}"
            f" against {self.target_latency_ms:g} ms ({self.over_latency} of {self.queries} over)"
            f"{'' if self.percentile == 99.0 else f', p99 {_ms(self.p99_ms)}'}; early stopping {es}"
            f" ({self.early_stopping}){f'; {self.errors} requests failed' if self.errors else ''}"
        )


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} ms"


_NS_FIELD = re.compile(r"^\s*([0-9.]+) percentile latency \(ns\)\s*:\s*([0-9.]+)\s*$", re.MULTILINE)


def parse_summary(text: str) -> dict[str, Any]:
    """Figures of LoadGen's mlperf_log_summary.txt: result, completed/scheduled samples per second,
    percentile latencies (ms, keyed by percentile), early-stopping lines and whether they say it holds."""
    out: dict[str, Any] = {"result": None, "completed_rps": None, "scheduled_rps": None, "percentiles_ms": {}}
    m = re.search(r"^Result is\s*:\s*(\S+)", text, re.MULTILINE)
    if m:
        out["result"] = m.group(1)
    m = re.search(r"^Completed samples per second\s*:\s*([0-9.]+)", text, re.MULTILINE)
    if m:
        out["completed_rps"] = float(m.group(1))
    m = re.search(r"^Scheduled samples per second\s*:\s*([0-9.]+)", text, re.MULTILINE)
    if m:
        out["scheduled_rps"] = float(m.group(1))
    for pct, ns in _NS_FIELD.findall(text):
        out["percentiles_ms"][float(pct)] = float(ns) / 1e6
    m = re.search(r"^\s*Performance constraints satisfied\s*:\s*(\S+)", text, re.MULTILINE)
    out["constraints_met"] = None if not m else m.group(1).lower() == "yes"
    m = re.search(r"^\s*Early stopping satisfied\s*:\s*(\S+)", text, re.MULTILINE)
    out["early_stopping_met"] = None if not m else m.group(1).lower() == "yes"
    # the "Early Stopping Result:" block: "* Run successful." and the percentile estimate, or how many
    # more queries a verdict would need
    block = re.search(r"^Early Stopping Result:\s*\n(.*?)(?:\n\s*\n|\n=+)", text, re.MULTILINE | re.DOTALL)
    lines = [ln.strip().lstrip("* ").strip() for ln in block.group(1).splitlines()] if block else []
    out["early_stopping"] = " ".join(ln for ln in lines if ln)
    return out


def parse_detail(text: str) -> dict[str, Any]:
    """The `:::MLLOG` records of mlperf_log_detail.txt that a verdict uses, by key (value as logged)."""
    wanted = {"result_validity", "result_perf_constraints_met", "early_stopping_met", "early_stopping_result",
              "result_query_count", "result_overlatency_query_count", "result_invalid_reason"}  # fmt: skip
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if not line.startswith(":::MLLOG"):
            continue
        try:
            rec = json.loads(line[len(":::MLLOG") :])
        except ValueError:
            continue
        if rec.get("key") in wanted:
            out[rec["key"]] = rec.get("value")
    return out


class _TritonSut:
    """LoadGen's system under test: each issued sample is one gRPC request of `model`."""

    def __init__(self, grpc_url: str, model: str) -> None:
        import tritonclient.grpc as grpcclient

        self._client = grpcclient.InferenceServerClient(grpc_url)
        self._model = model
        self._inputs = _inputs(self._client, model)
        self._lock = threading.Lock()
        self.errors = 0
        self.in_flight = 0
        self._idle = threading.Event()
        self._idle.set()

    def warm_up(self, n: int = WARMUP_REQUESTS) -> None:
        for _ in range(n):
            self._client.infer(self._model, self._inputs)

    def issue(self, samples: list[Any]) -> None:
        import mlperf_loadgen as lg

        for s in samples:

            def done(result: Any, error: Any, sample_id: int = s.id) -> None:
                with self._lock:
                    self.in_flight -= 1
                    if error is not None:
                        self.errors += 1
                    if self.in_flight == 0:
                        self._idle.set()
                lg.QuerySamplesComplete([lg.QuerySampleResponse(sample_id, 0, 0)])

            with self._lock:
                self.in_flight += 1
                self._idle.clear()
            self._client.async_infer(self._model, self._inputs, callback=done)

    def flush(self) -> None:
        """LoadGen's flush_queries: nothing is batched client-side."""

    def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> bool:
        return self._idle.wait(timeout_s)

    def close(self) -> None:
        self._client.close()


def _inputs(client: Any, model: str) -> list[Any]:
    """One request's inputs from the model's metadata: every variable dimension 1, zeros (b"0" for BYTES)."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import triton_to_np_dtype

    meta = client.get_model_metadata(model, as_json=True)
    out = []
    for spec in meta["inputs"]:
        shape = [1 if int(d) < 0 else int(d) for d in spec["shape"]]
        dtype = spec["datatype"]
        if dtype == "BYTES":
            data = np.full(shape, b"0", dtype=np.object_)
        else:
            data = np.zeros(shape, dtype=triton_to_np_dtype(dtype))
        inp = grpcclient.InferInput(spec["name"], shape, dtype)
        inp.set_data_from_numpy(data)
        out.append(inp)
    return out


def loadgen_check(
    grpc_url: str,
    model: str,
    rate_rps: float,
    budget_ms: float,
    *,
    percentile: float = 99.0,
    min_duration_s: float = DEFAULT_MIN_DURATION_S,
    log_dir: Path | None = None,
) -> LoadgenVerdict:
    """LoadGen's Server scenario at `rate_rps` against `model` on the Triton at `grpc_url`, its target
    latency `budget_ms` at `percentile`, for at least `min_duration_s`: its verdict (log folder kept at
    `log_dir`, else a temporary one)."""
    import mlperf_loadgen as lg

    out = Path(log_dir or tempfile.mkdtemp(prefix="perfkit-loadgen-"))
    out.mkdir(parents=True, exist_ok=True)
    sut_impl = _TritonSut(grpc_url, model)
    sut_impl.warm_up()
    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.Server
    settings.mode = lg.TestMode.PerformanceOnly
    settings.server_target_qps = float(rate_rps)
    settings.server_target_latency_ns = int(budget_ms * 1e6)
    settings.server_target_latency_percentile = percentile / 100.0
    settings.min_duration_ms = int(min_duration_s * 1000)
    settings.min_query_count = MIN_QUERIES
    log_out = lg.LogOutputSettings()
    log_out.outdir = str(out)
    log_out.copy_summary_to_stdout = False
    log_settings = lg.LogSettings()
    log_settings.log_output = log_out
    log_settings.enable_trace = False
    sut = lg.ConstructSUT(sut_impl.issue, sut_impl.flush)
    qsl = lg.ConstructQSL(SAMPLE_COUNT, SAMPLE_COUNT, lambda _ids: None, lambda _ids: None)
    t0 = time.monotonic()
    try:
        lg.StartTestWithLogSettings(sut, qsl, settings, log_settings)
        sut_impl.drain()
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
        sut_impl.close()
    wall = time.monotonic() - t0
    summary = parse_summary((out / "mlperf_log_summary.txt").read_text())
    detail_path = out / "mlperf_log_detail.txt"
    detail = parse_detail(detail_path.read_text()) if detail_path.exists() else {}
    pcts: dict[float, float] = summary["percentiles_ms"]
    result = str(summary["result"] or detail.get("result_validity") or "INVALID")
    met = summary["early_stopping_met"]
    if met is None and "early_stopping_met" in detail:
        met = bool(detail["early_stopping_met"])
    return LoadgenVerdict(
        target_rps=float(rate_rps),
        target_latency_ms=float(budget_ms),
        percentile=float(percentile),
        valid=result == "VALID" and sut_impl.errors == 0,
        result=result,
        completed_rps=summary["completed_rps"],
        scheduled_rps=summary["scheduled_rps"],
        percentile_latency_ms=_nearest(pcts, percentile),
        p99_ms=pcts.get(99.0),
        constraints_met=summary["constraints_met"],
        early_stopping_met=met,
        early_stopping=summary["early_stopping"],
        queries=int(detail.get("result_query_count") or 0),
        over_latency=int(detail.get("result_overlatency_query_count") or 0),
        errors=sut_impl.errors,
        duration_s=round(wall, 1),
        log_dir=str(out),
    )


def _nearest(pcts: dict[float, float], percentile: float) -> float | None:
    """LoadGen's latency at `percentile` (its summary lists 50, 90, 95, 97, 99, 99.9): the one asked for,
    else the nearest listed above it (a conservative reading)."""
    if percentile in pcts:
        return pcts[percentile]
    above = [p for p in pcts if p >= percentile]
    return pcts[min(above)] if above else None


def second_judge(grpc_url: str, model: str, claim_rps: float, budget_ms: float, pa_held: bool | None, *,
                 percentile: float = 99.0, min_duration_s: float = DEFAULT_MIN_DURATION_S,
                 tolerance: float = CLAIM_TOLERANCE, log_dir: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """LoadGen's verdict on a claim beside perf_analyzer's (`pa_held`: whether perf_analyzer's
    re-measurement held the claim within `tolerance`; None where it gave no verdict), for a benchmark's
    results: LoadGen runs at (1 - tolerance) x the claim; the two verdicts, LoadGen's figures, `agree`,
    and a `says` line that names a disagreement."""
    if claim_rps <= 0:
        return {"loadgen": None, "pa_held": pa_held, "agree": None, "says": "no claimed rate: LoadGen not run"}
    v = loadgen_check(grpc_url, model, claim_rps * (1 - tolerance), budget_ms, percentile=percentile,
                      min_duration_s=min_duration_s, log_dir=log_dir)  # fmt: skip
    agree = None if pa_held is None else (pa_held == v.valid)
    pa_word = {True: "holds", False: "does not hold", None: "gave no verdict"}[pa_held]
    says = f"claim {claim_rps:.0f} req/s: perf_analyzer: it {pa_word}; {v.line()}"
    if agree is False:
        says += (
            f" -- the judges DISAGREE: perf_analyzer says {'held' if pa_held else 'not held'}, "
            f"LoadGen {v.result}{' with failed requests' if v.errors else ''}"
        )
    figures = dataclasses.asdict(v)
    if Path(figures["log_dir"]).is_relative_to(tempfile.gettempdir()):
        figures["log_dir"] = "$TMPDIR/perfkit-loadgen"  # a temporary folder: the results name no machine's path
    return {"loadgen": figures, "pa_held": pa_held, "agree": agree, "says": says}
