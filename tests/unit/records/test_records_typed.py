"""Typed context records (machine, server, model, spec), the old record shape still read, tune record rules."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from perfkit.errors import InputError
from perfkit.gate.synthetic import MACHINE, synthetic_record
from perfkit.measure._context import machine_info
from perfkit.records import (
    RUN_SCHEMA_VERSION,
    Machine,
    ModelInfo,
    ProfileSpec,
    RunRecord,
    ServerInfo,
    TuneRecord,
    load_record,
)
from perfkit.store.base import machine_key

RECORDS = Path(__file__).resolve().parents[3] / "fixtures" / "records"


def test_a_version_1_record_is_read_into_the_typed_shape():
    raw = json.loads((RECORDS / "profile_rate.json").read_text())
    assert raw["schema_version"] == 1 and "config_sha256" in raw["model"]
    rec = RunRecord.load(RECORDS / "profile_rate.json")
    assert rec.schema_version == RUN_SCHEMA_VERSION
    assert isinstance(rec.machine, Machine) and isinstance(rec.server, ServerInfo)
    assert isinstance(rec.model, ModelInfo) and isinstance(rec.spec, ProfileSpec)
    assert rec.model.served_config_sha256 == raw["model"]["config_sha256"]  # the old key, read
    assert rec.machine.cpu_model == raw["machine"]["cpu"] and rec.machine.gpus == tuple(raw["machine"]["gpus"])
    assert rec.machine.memory_total_bytes == raw["machine"]["memory_bytes"]
    assert rec.server.mode == raw["server"]["launch_mode"] and rec.server.http_url == raw["server"]["url"]
    assert rec.spec.model == rec.model.name and rec.spec.levels


def test_a_saved_record_round_trips(tmp_path):
    rec = synthetic_record(count=5000)
    again = RunRecord.load(rec.save(tmp_path / "r.json"))
    assert again == rec
    saved = json.loads((tmp_path / "r.json").read_text())
    assert "served_config_sha256" in saved["model"] and "config_sha256" not in saved["model"]


def test_another_schema_version_is_refused_with_the_file_named(tmp_path):
    data = json.loads(synthetic_record().to_json())
    data["schema_version"] = 99
    (tmp_path / "future.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"future\.json has schema_version 99"):
        RunRecord.load(tmp_path / "future.json")


def test_the_same_machine_rule():
    assert MACHINE.differences(dataclasses.replace(MACHINE, hostname="runner-42")) == []  # CI hostnames change
    assert MACHINE.differences(dataclasses.replace(MACHINE, cpu_count=64)) == ["cpu_count 2 vs 64"]
    assert MACHINE.differences(dataclasses.replace(MACHINE, gpus=("H100",))) == ["gpus () vs ('H100',)"]
    # A field one side does not know is not a difference; with no hardware known, hostnames decide.
    assert MACHINE.differences(Machine(hostname="ci-runner", cpu_model="Synthetic CPU")) == []
    assert Machine(hostname="a").differences(Machine(hostname="b")) == ["hostname 'a' vs 'b'"]
    # The store's key follows the same fields.
    assert machine_key(MACHINE) == machine_key(dataclasses.replace(MACHINE, platform="Linux-6.2"))
    assert machine_key(MACHINE) != machine_key(dataclasses.replace(MACHINE, cpu_count=64))


def test_one_machine_builder_fills_the_hardware_fields():
    m = machine_info()
    assert m.hostname and m.python and m.arch and m.cpu_count and m.cpu_count >= 1
    assert m.memory_total_bytes is None or m.memory_total_bytes > 0
    assert m.differences(machine_info()) == []


@pytest.fixture
def tune() -> TuneRecord:
    return TuneRecord.load(RECORDS / "tune" / "tune.json")


def test_best_is_the_feasible_trial_with_most_throughput(tune):
    best = tune.best()
    assert best is not None and best.feasible and best.number == tune.best_trial
    # Give an over-budget trial far more throughput: it is still not the best.
    infeasible = next(t for t in tune.trials if t.state == "complete" and not t.feasible)
    boosted = dataclasses.replace(infeasible, throughput_infer_per_s=1e9)
    other = dataclasses.replace(tune, trials=tuple(boosted if t is infeasible else t for t in tune.trials))
    assert other.best() == best
    assert boosted.number not in {t.number for t in other.pareto()}
    assert all(t.feasible and t.state == "complete" for t in tune.pareto())
    assert tune.original() is not None and tune.original().is_original


def test_tune_records_load_through_records_with_the_schema_check(tmp_path, tune):
    assert isinstance(load_record(RECORDS / "tune" / "tune.json"), TuneRecord)
    assert TuneRecord.load(tune.save(tmp_path / "tune.json")) == tune
    data = json.loads((tmp_path / "tune.json").read_text())
    data["schema_version"] = 7
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match="schema_version 7"):
        load_record(tmp_path / "bad.json")


def test_a_tune_record_says_which_search_ran_and_one_from_before_those_fields_still_loads(tune, tmp_path):
    """Recorded before the fields: the search is unknown (empty), not guessed."""
    assert (tune.search, tune.search_reason) == ("", "")
    said = dataclasses.replace(tune, search="measure", search_reason="asked for with --search measure")
    again = TuneRecord.load(said.save(tmp_path / "tune.json"))
    assert (again.search, again.search_reason) == ("measure", "asked for with --search measure")


def test_a_calibration_per_value_round_trips_and_one_saved_before_loads_with_one_curve(tune, tmp_path):
    from perfkit.records import Calibration, CalibrationPoint

    first = Calibration("m", (CalibrationPoint(1, 10, 1_000.0),), 1_000.0, 0.0, 0.0, 0.0, value="precision=fp32")
    fp16 = dataclasses.replace(first, value="precision=fp16", fixed_us=500.0, factor=0.5)
    cal = dataclasses.replace(first, values=(fp16,))
    again = TuneRecord.load(dataclasses.replace(tune, calibration=cal).save(tmp_path / "tune.json"))
    assert again.calibration == cal and again.calibration.curve("precision=fp16") == fp16
    # measured at fp32, every other value refused by the server: no curve for them (not predicted)
    refused = dataclasses.replace(first, values=())
    assert refused.curve("precision=fp16") is None and refused.curve("precision=fp32") is refused
    # saved before the per-value fields: no value, no values; its one curve serves every config
    data = json.loads((tmp_path / "tune.json").read_text())
    for key in ("value", "values", "factor"):
        del data["calibration"][key]
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = TuneRecord.load(tmp_path / "old.json").calibration
    assert old is not None and (old.value, old.values, old.factor) == ("", (), 0.0)
    assert old.curve("precision=fp16") is old and old.curves() == (old,)
