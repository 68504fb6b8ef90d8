"""The tune record holds its Budget: saved as one object (schema version 2), and version 1's flat
keys (latency_budget_ms, percentile, budget_metric, mix_budgets_ms) still read as one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfkit.errors import InputError
from perfkit.records import TUNE_SCHEMA_VERSION, Budget, Machine, TuneRecord, load_record

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "records" / "tune" / "tune.json"


def test_the_recorded_version_1_tune_record_loads_with_its_budget():
    data = json.loads(FIXTURE.read_text())
    assert data["schema_version"] == 1 and "budget" not in data and data["latency_budget_ms"] == 20.0
    rec = TuneRecord.load(FIXTURE)
    assert rec.budget == Budget(20.0, 99.0, "latency", ())
    assert rec.budget.latency_budget_us == 20_000.0 and rec.budget.label == "p99"
    assert rec.schema_version == TUNE_SCHEMA_VERSION == 2
    assert isinstance(load_record(FIXTURE), TuneRecord) and load_record(FIXTURE).budget == rec.budget


def test_version_1_stream_and_mix_budgets_read_as_the_budgets_metric_and_per_model_budgets():
    data = json.loads(FIXTURE.read_text())
    data.update(budget_metric="ttft", latency_budget_ms=300.0, percentile=90.0)
    assert TuneRecord.from_dict(data).budget == Budget(300.0, 90.0, "ttft")
    data.update(budget_metric="latency", latency_budget_ms=60.0, mix=[["a", 3], ["b", 1]],
                mix_budgets_ms={"a": 60.0, "b": 120.0})  # fmt: skip
    rec = TuneRecord.from_dict(data)
    assert rec.budget == Budget(60.0, 90.0, "latency", (("a", 60.0), ("b", 120.0)))
    assert rec.mix == (("a", 3), ("b", 1)) and rec.budget.mix_scale == {"a": 1.0, "b": 0.5}


def test_a_saved_record_holds_one_budget_object_and_reads_back_equal(tmp_path: Path):
    budget = Budget(60.0, 99.9, "latency", (("a", 60.0), ("b", 120.0)))
    rec = TuneRecord("0", "now", (), Machine.from_mapping({}), {}, "a", budget, "throughput", "", None, None, ())
    path = rec.save(tmp_path / "tune.json")
    data = json.loads(path.read_text())
    assert data["schema_version"] == 2
    assert data["budget"] == {"latency_budget_ms": 60.0, "percentile": 99.9, "metric": "latency",
                              "per_model_ms": [["a", 60.0], ["b", 120.0]], "max_error_rate": 0.0}  # fmt: skip
    assert not {"latency_budget_ms", "percentile", "budget_metric", "mix_budgets_ms"} & set(data)
    assert TuneRecord.load(path).budget == budget


def test_a_version_1_record_without_its_budget_is_malformed_and_an_unknown_version_refused():
    with pytest.raises(InputError, match="malformed tune record"):
        TuneRecord.from_dict({"schema": "perfkit.tune", "schema_version": 1})
    data = json.loads(FIXTURE.read_text())
    with pytest.raises(InputError, match="schema_version 3; this perfkit reads versions 1, 2"):
        TuneRecord.from_dict({**data, "schema_version": 3})
