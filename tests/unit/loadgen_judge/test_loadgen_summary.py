"""The second judge's reading of MLPerf LoadGen 6.0.17's mlperf_log_summary.txt (three summaries LoadGen
wrote here, Server scenario against the bundled Triton: VALID; INVALID over the target latency; INVALID
with the percentile within the target but too few queries for early stopping), and how its verdict is
put beside perf_analyzer's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from benchmarks import _loadgen
from benchmarks._loadgen import LoadgenVerdict, parse_summary, second_judge

HERE = Path(__file__).parent


def _read(name: str) -> dict:
    return parse_summary((HERE / name).read_text())


def test_a_valid_run_reads_valid_with_its_figures() -> None:
    got = _read("summary_valid.txt")
    assert got["result"] == "VALID" and got["constraints_met"] is True and got["early_stopping_met"] is True
    assert got["completed_rps"] == 98.55 and got["scheduled_rps"] is not None
    assert got["percentiles_ms"][99.0] == pytest.approx(36.16327) and got["percentiles_ms"][50.0] < 36.0
    assert set(got["percentiles_ms"]) == {50.0, 90.0, 95.0, 97.0, 99.0, 99.9}
    assert got["early_stopping"] == "Run successful."


def test_a_run_over_the_target_reads_invalid_on_both_counts() -> None:
    got = _read("summary_over_target.txt")
    assert got["result"] == "INVALID" and got["constraints_met"] is False and got["early_stopping_met"] is False
    assert got["percentiles_ms"][99.0] == pytest.approx(116.5, abs=0.1) and got["completed_rps"] == 98.24
    assert got["early_stopping"].startswith("Run unsuccessful. Processed 1968 queries. Would need to run at least")


def test_too_few_queries_is_invalid_though_the_percentile_held() -> None:
    """Early stopping, not the percentile, decides here: 288 queries, none over, p99 41.8 ms against 100."""
    got = _read("summary_too_few.txt")
    assert got["result"] == "INVALID" and got["constraints_met"] is True and got["early_stopping_met"] is False
    assert got["percentiles_ms"][99.0] < 100.0 and "Processed 288 queries" in got["early_stopping"]


def _verdict(valid: bool, rate: float) -> LoadgenVerdict:
    return LoadgenVerdict(target_rps=rate, target_latency_ms=100.0, percentile=99.0, valid=valid,
                          result="VALID" if valid else "INVALID", completed_rps=rate, scheduled_rps=rate,
                          percentile_latency_ms=80.0 if valid else 130.0, p99_ms=80.0 if valid else 130.0,
                          constraints_met=valid, early_stopping_met=valid, early_stopping="", queries=1000,
                          over_latency=0 if valid else 40, errors=0, duration_s=60.0, log_dir="")  # fmt: skip


@pytest.mark.parametrize(("pa_held", "lg_valid", "agree"), [(True, True, True), (True, False, False),
                                                            (False, True, False), (None, True, None)])  # fmt: skip
def test_the_two_verdicts_side_by_side_and_a_disagreement_said(
    pa_held: bool | None, lg_valid: bool, agree: bool | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[float] = []

    def check(url: str, model: str, rate: float, budget_ms: float, **kw: object) -> LoadgenVerdict:
        asked.append(rate)
        return _verdict(lg_valid, rate)

    monkeypatch.setattr(_loadgen, "loadgen_check", check)
    got = second_judge("localhost:8001", "m", 200.0, 100.0, pa_held)
    # LoadGen runs at the claim less the tolerance the perf_analyzer re-measurements allow
    assert asked == [pytest.approx(200.0 * (1 - _loadgen.CLAIM_TOLERANCE))]
    assert got["agree"] is agree and got["pa_held"] is pa_held
    assert got["loadgen"] == dataclasses.asdict(_verdict(lg_valid, asked[0]))
    assert ("DISAGREE" in got["says"]) is (agree is False), got["says"]
    assert ("LoadGen VALID" if lg_valid else "LoadGen INVALID") in got["says"]
    assert second_judge("x", "m", 0.0, 100.0, True)["loadgen"] is None  # no claim: LoadGen not run


def test_a_temporary_log_folder_is_recorded_without_the_machines_path(monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    tmp = str(Path(tempfile.gettempdir()) / "perfkit-loadgen-x1y2")  # as tempfile.mkdtemp names one
    kept = "/srv/loadgen-logs"
    for where, recorded in ((tmp, "$TMPDIR/perfkit-loadgen"), (kept, kept)):
        verdict = dataclasses.replace(_verdict(True, 180.0), log_dir=where)
        monkeypatch.setattr(_loadgen, "loadgen_check", lambda *a, v=verdict, **kw: v)
        assert second_judge("x", "m", 200.0, 100.0, True)["loadgen"]["log_dir"] == recorded
