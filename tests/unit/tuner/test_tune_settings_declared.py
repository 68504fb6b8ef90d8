"""Each tune setting is declared once, on its TuneSettings field: `perfkit tune`'s options show the
declared default once, every declared [tune] key is one the sweep file's parser takes, and the
trial's measurement settings derived from the declarations are those the hand copy gave."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click
import pytest

from perfkit.campaign import load_sweep
from perfkit.cli.tune import command
from perfkit.errors import ConfigError, InputError, UsageError
from perfkit.records import Budget
from perfkit.tuner import SETTINGS_KEYS, TUNE_SETTINGS, TuneSettings, parse_budget
from perfkit.tuner._find_load import TrialLoadSettings

# A value the [tune] table may give each declared key.
SAMPLE = {
    "latency_budget": '"20ms"',
    "percentile": "95",
    "max_error_rate": '"5%"',
    "trials": "4",
    "max_time": '"10m"',
    "objective": '"per-instance"',
    "seed": "7",
    "min_throughput": "100",
    "max_gpu_memory": '"8GiB"',
    "max_concurrency": "16",
    "measurement_interval_ms": "400",
    "protocol": '"grpc"',
    "sampler": '"random"',
    "search": '"measure"',
    "max_output_diff": '"1e-3"',
    "load": '"concurrency"',
    "arrival": '"constant"',
    "repeat_fraction": "0.5",
    "confirm": "2",
    "confirm_time": '"8s"',
}
SWEEP = """
name = "demo"
[server]
launch_mode = "local"
model_repository = "models"
[load]
levels = [1, 2]
[[models]]
name = "batcher"
"""


def _helps() -> dict[str, str]:
    ctx = click.Context(command)
    out = {}
    for param in command.params:
        record = param.get_help_record(ctx)
        if record is not None:
            for opt in param.opts:
                out[opt] = " ".join(record[1].split())
    return out


def test_a_generated_option_shows_its_declared_default_once() -> None:
    helps = _helps()
    assert helps["--measurement-interval"] == "Window length in ms. [default: 800 ms]"
    assert helps["--max-rate"].endswith("[default: 20000 req/s]") and helps["--confirm-time"].endswith("[default: 5 s]")
    for s in TUNE_SETTINGS:
        if not s.flags:
            continue
        text = helps[s.flags[-1]]
        shown = s.shown_default()
        if shown:
            assert text.count("[default:") == 1 and text.endswith(f"[default: {shown}]"), (s.key, text)
            assert "(default" not in text.lower(), (s.key, text)  # not repeated in the help's words
        elif s.required:
            assert text.endswith("[required]")


def test_the_declared_default_is_the_fields_and_the_percentile_budgets() -> None:
    by_key = {s.key: s for s in TUNE_SETTINGS}
    plain = TuneSettings(model="m", budget=Budget(20))
    assert by_key["measurement_interval_ms"].default == plain.measurement_interval_ms == 800.0
    assert by_key["confirm"].default == plain.confirm_repeats and by_key["max_rate"].default == plain.max_rate_rps
    assert by_key["percentile"].default == Budget(20).percentile
    assert parse_budget(["m"], "20ms")[0].percentile == Budget(20).percentile


def test_every_declared_key_is_one_the_sweep_parser_takes(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    table_keys = [s.key for s in TUNE_SETTINGS if s.key is not None and not s.flag_only]
    assert table_keys == list(SETTINGS_KEYS) and set(SAMPLE) == set(SETTINGS_KEYS)
    for key in table_keys:
        path = tmp_path / f"{key}.toml"
        budget = "" if key == "latency_budget" else 'latency_budget = "20ms"\n'
        path.write_text(SWEEP + f"\n[tune]\n{budget}{key} = {SAMPLE[key]}\n")
        sweep = load_sweep(path)
        assert sweep.tune is not None and key in sweep.tune
    path = tmp_path / "all.toml"
    path.write_text(SWEEP + "\n[tune]\n" + "".join(f"{k} = {v}\n" for k, v in SAMPLE.items()))
    table = load_sweep(path).tune
    assert table is not None
    s = TuneSettings.from_mapping("batcher", table)
    assert (s.measurement_interval_ms, s.confirm_repeats, s.confirm_time_s, s.max_time_s) == (400.0, 2, 8.0, 600.0)
    assert (s.max_gpu_memory_bytes, s.budget.percentile, s.protocol, s.search) == (8 * 2**30, 95.0, "grpc", "measure")
    assert s.budget.max_error_rate == 0.05
    # the flag-only settings are no [tune] keys: the table refuses them as unknown
    for key in (s.key for s in TUNE_SETTINGS if s.flag_only):
        path.write_text(SWEEP + f'\n[tune]\nlatency_budget = "20ms"\n{key} = 1\n')
        with pytest.raises(ConfigError, match=f"unknown key.*{key}"):
            load_sweep(path)


def test_the_parsers_errors_stay_as_they_were() -> None:
    with pytest.raises(InputError, match=r"^\[tune\]: measurement_interval_ms = 'long' is not a number$"):
        TuneSettings.from_mapping("m", {"latency_budget": "20ms", "measurement_interval_ms": "long"})
    with pytest.raises(InputError, match="confirm = 'x' is not a number of repeats"):
        TuneSettings.from_mapping("m", {"latency_budget": "20ms", "confirm": "x"})
    with pytest.raises(UsageError, match="^--max-concurrency must be at least 1$"):
        TuneSettings.from_mapping("m", {"latency_budget": "20ms"}, flags={"max_concurrency": 0})
    with pytest.raises(UsageError, match="^--trials must be at least 1$"):
        TuneSettings(model="m", budget=Budget(20), trials=0)
    with pytest.raises(UsageError, match="^--sampler 'tpe': choose auto, grid or random$"):
        TuneSettings.from_mapping("m", {"latency_budget": "20ms", "sampler": "tpe"})
    with pytest.raises(UsageError, match="^--arrival 'burst': choose poisson, constant or onoff$"):
        TuneSettings(model="m", budget=Budget(20), arrival="burst")  # type: ignore[arg-type]  # the check under test
    with pytest.raises(UsageError, match="--confirm-time"):
        TuneSettings.from_mapping("m", {"latency_budget": "20ms"}, flags={"confirm_time": "soon"})
    with pytest.raises(InputError, match=r"^--search = 'guess': give auto, measure or predict$"):
        TuneSettings.from_mapping("m", {"latency_budget": "20ms"}, flags={"search": "guess"})


def test_a_flag_not_given_leaves_the_tables_value() -> None:
    table = {"latency_budget": "20ms", "percentile": 95, "sampler": "grid", "measurement_interval_ms": 300}
    unset = {s.key: None for s in TUNE_SETTINGS if s.flags and s.key != "latency_budget"}
    s = TuneSettings.from_mapping("m", table, flags=unset)
    assert (s.budget.percentile, s.sampler, s.measurement_interval_ms, s.trials) == (95.0, "grid", 300.0, 20)
    given = TuneSettings.from_mapping("m", table, flags={**unset, "measurement_interval_ms": 500.0, "max_time": "1m"})
    assert (given.measurement_interval_ms, given.max_time_s, given.trials) == (500.0, 60.0, None)


def test_trial_load_settings_are_those_the_hand_copy_gave(tmp_path: Path) -> None:
    # The hand copy's values, written out: the defaults, a closed-loop decoupled model with every
    # setting that feeds the trial given, a traffic mix, and a trace.
    plain = TuneSettings(model="m", budget=Budget(20))
    assert plain.trial_load_settings(None) == TrialLoadSettings(
        budget=Budget(20), streaming=False, max_concurrency=64, protocol="http", measurement_interval_ms=800.0,
        stability_percentage=15.0, min_windows=3, max_windows=6, warmup_s=0.5, collect_metrics=False,
        metrics_url=None, stop_when_decided=True, load_mode="rate", goodput_slo_ms={}, trace=None,
        trace_base_rps=1.0, distribution="poisson", max_rate_rps=20000.0, mix=(),
    )  # fmt: skip

    table = {"latency_budget": "ttft:300ms", "percentile": 90, "max_concurrency": 8, "protocol": "grpc",
             "measurement_interval_ms": 300, "max_gpu_memory": "8GiB", "arrival": "constant", "load": "concurrency",
             "objective": "goodput"}  # fmt: skip
    given = TuneSettings.from_mapping(
        "streamer", table, flags={"goodput": "ttft:200ms", "max_rate": 5000.0}, adaptive_load=False, min_windows=4,
        max_windows=9, warmup_s=1.0, stability_percentage=10.0,
    )  # fmt: skip
    trial_load = given.trial_load_settings("http://localhost:8002/metrics", streaming=True)
    assert trial_load == TrialLoadSettings(
        budget=Budget(300, 90, "ttft"), streaming=True, max_concurrency=8, protocol="grpc",
        measurement_interval_ms=300.0, stability_percentage=10.0, min_windows=4, max_windows=9, warmup_s=1.0,
        collect_metrics=True, metrics_url="http://localhost:8002/metrics", stop_when_decided=False,
        load_mode="concurrency", goodput_slo_ms={"ttft": 200.0}, trace=None, trace_base_rps=1.0,
        distribution="constant", max_rate_rps=5000.0, mix=(),
    )  # fmt: skip
    assert trial_load.goodput_slo_ms is not given.goodput_slo_ms  # a copy, as the hand copy made

    parsed, mix = parse_budget(["a", "b"], "a:20ms,b:50ms", "a:3,b:1")
    mixed = TuneSettings.from_mapping("a", {}, flags={"percentile": 95.0}, budget=parsed, mix=mix)
    assert mixed.trial_load_settings(None) == dataclasses.replace(
        plain.trial_load_settings(None), budget=Budget(20, 95.0, "latency", (("a", 20.0), ("b", 50.0))),
        mix=(("a", 3), ("b", 1)),
    )  # fmt: skip

    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 100.0 * i}) + "\n" for i in range(11)))  # 11 over 1 s
    replay = TuneSettings(model="m", budget=Budget(20), load="trace", trace=trace)
    assert replay.trial_load_settings(None) == dataclasses.replace(
        plain.trial_load_settings(None), load_mode="trace", trace=str(trace), trace_base_rps=11.0
    )
