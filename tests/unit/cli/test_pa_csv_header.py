"""EXP-04: the `perf_analyzer` command's -f CSV header is perf_analyzer 2.60's, text for text, for the same
flags. 2.60's header (src/report_writer.cc, ReportWriter::GenerateReport): "Concurrency" or "Request Rate",
"Inferences/Second", "Response Throughput" for a decoupled model, "Client Send", the server columns, "Client
Recv", one "pN latency" per percentile of src/inference_profiler.cc's set {50, 90, 95, 99} plus --percentile's,
in order; with --verbose-csv "Avg latency" (only without --percentile), "request/response", "response wait"."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perfkit.cli.pa import pa_csv_columns
from perfkit.measure import write_csv
from perfkit.recorder import summarize
from perfkit.records import LevelResult, LoadLevel, Machine, ModelInfo, Precision, ProfileSpec, RunRecord, ServerInfo

# perf_analyzer 2.60.0's header as it wrote it here (`-m identity -p 300 -r 3 -s 100 -f o.csv --percentile 95`)
PA_260 = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
    "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency"
)


def _csv(tmp_path: Path, mode: str, percentile: float | None, *, verbose: bool) -> str:
    load = LoadLevel(mode, 4.0 if mode == "concurrency" else 100.0, None if mode == "concurrency" else "constant")  # type: ignore[arg-type]  # the test's two modes
    lat = summarize("service", np.linspace(1_000.0, 2_000.0, 101))
    level = LevelResult(
        load, 1, True, Precision(0.01, 0.01), 1.0, 5, 5, 5.0, 5.0, 5.0, 0, {}, 0, 0, None, lat, None, ()
    )
    spec = ProfileSpec(model="m", levels=(load,), percentile=percentile)
    record = RunRecord("0", "t", (), Machine(), ServerInfo(), ModelInfo(name="m"), spec, (level,))
    path = write_csv(record, tmp_path / "o.csv")
    pa_csv_columns(path, verbose=verbose, percentile=percentile is not None)
    return path.read_text()


@pytest.mark.parametrize(
    ("mode", "percentile", "verbose", "header"),
    [
        ("concurrency", None, False, PA_260),
        ("concurrency", 95.0, False, PA_260),
        ("concurrency", None, True, PA_260 + ",Avg latency,request/response,response wait"),
        ("concurrency", 99.0, True, PA_260 + ",request/response,response wait"),
        ("request_rate", None, False, "Request Rate" + PA_260.removeprefix("Concurrency")),
        # a percentile outside the four: its column among them, in order
        ("concurrency", 85.0, False, PA_260.replace("p50 latency,p90", "p50 latency,p85 latency,p90")),
        ("concurrency", 30.0, False, PA_260.replace("Client Recv,p50", "Client Recv,p30 latency,p50")),
    ],
)
def test_the_header_is_perf_analyzer_260s(
    mode: str, percentile: float | None, verbose: bool, header: str, tmp_path: Path
) -> None:
    lines = _csv(tmp_path, mode, percentile, verbose=verbose).splitlines()
    assert lines[0] == header
    assert len(lines) == 2 and len(lines[1].split(",")) == len(header.split(","))


def test_the_extra_percentile_column_holds_that_percentile() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        head, row = _csv(Path(tmp), "concurrency", 85.0, verbose=False).splitlines()
    values = dict(zip(head.split(","), row.split(","), strict=True))
    # latencies spread evenly over 1,000-2,000 us: p85 near 1,850, between p50's and p90's
    assert int(values["p50 latency"]) < int(values["p85 latency"]) < int(values["p90 latency"])
    assert abs(int(values["p85 latency"]) - 1_850) <= 20
