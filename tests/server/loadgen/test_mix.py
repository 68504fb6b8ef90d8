"""A traffic mix: several models loaded by one engine (`perfkit profile -m A -m B --mix A:3,B:1`).

The two fixture models share one emulated device: `batcher` and `hungry` both take the same
cross-process lock (`/tmp/perfkit-device-<tritonserver pid>.lock`, see their model.py), so
their executions compete as two models on one GPU would.
"""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from perfkit.cli import main
from perfkit.errors import UsageError
from perfkit.gate import compare_pair, parse_thresholds
from perfkit.gate.compare import GateOptions
from perfkit.gate.synthetic import synthetic_level
from perfkit.loadgen._mix import MixSequence
from perfkit.measure import parse_mix
from perfkit.records import RunRecord

MIX = "batcher:3,hungry:1"


# -- without a server ---------------------------------------------------------------------------


@pytest.mark.parametrize("weights", [(3, 1), (1, 1), (5, 2, 1), (1, 7)])
@pytest.mark.parametrize("phase", [0, 1, 5])
def test_sequence_is_exact_over_every_cycle(weights, phase):
    seq = MixSequence(weights, phase=phase)
    total = sum(weights)
    draws = [seq.next() for _ in range(total * 25 + 60)]
    for start in range(len(draws) - total + 1):  # any sum(weights) draws in a row hold each model its weight's times
        cycle = draws[start : start + total]
        assert [cycle.count(i) for i in range(len(weights))] == list(weights)
    # any run of consecutive draws is within one request of its share (smooth, not bunched)
    for n in (1, 2, 3, 7, 13):
        for start in range(0, 40):
            window = draws[start : start + n]
            for i, w in enumerate(weights):
                assert abs(window.count(i) - n * w / total) < 1.0 + 1e-9, (weights, start, n)
    seq.reset()
    assert [seq.next() for _ in range(total)] == draws[:total]


def test_sequence_3_to_1_is_spread_not_bunched():
    seq = MixSequence((3, 1))
    assert [seq.next() for _ in range(8)] == [0, 0, 1, 0, 0, 0, 1, 0]


def test_parse_mix_forms():
    assert parse_mix(["a", "b"], "a:3,b:1") == (("a", 3), ("b", 1))
    assert parse_mix(["a", "b"], " b : 2 , a:5 ") == (("b", 2), ("a", 5))
    assert parse_mix(["a", "b"], None) == (("a", 1), ("b", 1))  # several -m: equal weights
    assert parse_mix(["a"], None) == ()  # one -m: no mix, as before


@pytest.mark.parametrize(
    ("models", "text", "names"),
    [
        (["a", "b"], "a:3,c:1", "'c', which is not given with -m"),
        (["a", "b"], "a:0,b:1", "weight of 'a' is 0"),
        (["a", "b"], "a:-2,b:1", "weight of 'a' is -2"),
        (["a", "b"], "a:1.5,b:1", "'1.5', not an integer"),
        (["a", "b"], "a3,b:1", "'a3' is not MODEL:WEIGHT"),
        (["a", "b"], "a:3", "no weight to -m b"),
        (["a", "b"], "a:1,a:2,b:1", "names 'a' twice"),
        (["a", "a"], None, "-m a is given twice"),
        (["a", "b"], "", "is empty"),
    ],
)
def test_parse_mix_refuses_bad_input_in_one_line(models, text, names):
    with pytest.raises(UsageError) as err:
        parse_mix(models, text)
    assert names in err.value.one_line()
    assert "\n" not in err.value.one_line()


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--mix", "batcher:3,nope:1"], "'nope', which is not given with -m"),
        (["--mix", "batcher:0,hungry:1"], "weight of 'batcher' is 0"),
        (["--mix", "batcher=3;hungry=1"], "is not MODEL:WEIGHT"),
    ],
)
def test_cli_bad_mix_is_a_usage_error_before_any_server(args, names, tmp_path, capsys):
    # no -u and a repository that does not exist: the mix is refused before a server is looked for
    code = main(["profile", "-m", "batcher", "-m", "hungry", *args, "--model-repository", str(tmp_path / "none")])
    err = capsys.readouterr().err
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("perfkit: error: --mix") and names in last


def test_scoped_thresholds():
    thresholds = parse_thresholds(["p99:+10%", "hungry:p99:+2ms", "Batcher:throughput:-3%"])
    by = {(t.model, t.metric): t for t in thresholds}
    assert by[("hungry", "p99")].kind == "abs" and by[("hungry", "p99")].value == 2000
    assert by[("Batcher", "throughput")].value == 3  # the model's name keeps its case
    assert by[("", "p99")].value == 10
    # thresholds scoped to a model add to the defaults, which still judge every model
    assert {(t.model, t.metric) for t in parse_thresholds(["hungry:p50:+5%"])} == {
        ("", "throughput"),
        ("", "p99"),
        ("hungry", "p50"),
    }
    with pytest.raises(UsageError, match="unknown metric"):
        parse_thresholds(["hungry:p42:+1%"])


# -- against the real server --------------------------------------------------------------------


@pytest.fixture(scope="module")
def mix_run(shared_triton, tmp_path_factory) -> tuple[RunRecord, Path, str]:
    """One CLI run of the 3:1 mix: an open-loop level (40 req/s) and a closed-loop one (concurrency 4)."""
    triton = shared_triton.live()
    out = tmp_path_factory.mktemp("mix")
    rec_path, csv_path = out / "run.json", out / "run.csv"
    argv = [
        "profile", "-m", "batcher", "-m", "hungry", "--mix", MIX, "-u", triton.endpoints.http_url,
        "--request-rate-range", "40", "-p", "400", "-r", "6", "--tail-percentiles", "",
        "--warmup", "0.3", "--seed", "3", "-o", str(rec_path), "-f", str(csv_path),
    ]  # fmt: skip
    assert main(argv) == 0
    closed_path = out / "closed.json"
    argv_closed = [
        "profile", "-m", "batcher", "-m", "hungry", "--mix", MIX, "-u", triton.endpoints.http_url,
        "--concurrency-range", "4", "-p", "400", "-r", "6", "--tail-percentiles", "", "--warmup", "0.3",
        "-o", str(closed_path),
    ]  # fmt: skip
    assert main(argv_closed) == 0
    return RunRecord.load(rec_path), csv_path, str(closed_path)


def test_open_loop_splits_requests_exactly_by_the_mix(mix_run):
    record, _, _ = mix_run
    assert record.spec.mix == (("batcher", 3), ("hungry", 1))
    (level,) = record.levels
    assert [s.model for s in level.models] == ["batcher", "hungry"]
    batcher, hungry = (s.result for s in level.models)
    n = level.request_count
    assert n > 40
    # the level's requests are consecutive draws of the sequence: hungry gets 1 in 4, to one request
    assert hungry.request_count in (n // 4, -(-n // 4))
    # the total is the sum of the models, request for request
    assert batcher.request_count + hungry.request_count == n
    assert batcher.inference_count + hungry.inference_count == level.inference_count
    assert batcher.error_count == hungry.error_count == level.error_count == 0
    assert batcher.throughput_infer_per_s + hungry.throughput_infer_per_s == pytest.approx(level.throughput_infer_per_s)
    assert batcher.throughput_infer_per_s == pytest.approx(3 * hungry.throughput_infer_per_s, rel=0.15)
    # each model's latency is its own: hungry's device step is 30 ms, batcher's a few ms
    assert hungry.latency().p50_us > 2 * batcher.latency().p50_us
    # each model's server statistics are its own
    assert batcher.server is not None and batcher.server.model == "batcher"
    assert hungry.server is not None and hungry.server.model == "hungry"
    assert hungry.server.compute_infer_avg_us > 25_000
    assert len(batcher.windows) == len(hungry.windows) == len(level.windows)


def test_closed_loop_slots_draw_from_the_mix(mix_run):
    record = RunRecord.load(Path(mix_run[2]))
    (level,) = record.levels
    batcher, hungry = (s.result for s in level.models)
    n = level.request_count
    assert batcher.request_count + hungry.request_count == n
    # every free slot takes the next draw; at most the 4 in flight at the level's edges are off the cycle
    assert abs(hungry.request_count - n / 4) <= 5


def test_record_csv_and_report_carry_each_model(mix_run, tmp_path):
    record, csv_path, _ = mix_run
    data = json.loads(record.to_json())
    assert [m["model"] for m in data["levels"][0]["models"]] == ["batcher", "hungry"]
    assert RunRecord.from_dict(data) == record  # saved and read back as measured
    rows = list(csv.DictReader(csv_path.open()))
    assert [r["Model"] for r in rows] == ["total", "batcher", "hungry"]
    tput = {r["Model"]: float(r["Inferences/Second"]) for r in rows}
    assert tput["total"] == pytest.approx(tput["batcher"] + tput["hungry"], abs=0.02)
    assert float(rows[2]["p50 latency"]) > float(rows[1]["p50 latency"])
    from perfkit.report import write_profile_report

    html = write_profile_report([record], tmp_path / "r.html").read_text()
    assert "Traffic mix batcher:3,hungry:1" in html
    assert "hungry in mix batcher:3,hungry:1: throughput vs latency" in html


def _certified(record: RunRecord) -> RunRecord:
    """The real mix record with its figures replaced by synthetic ones of known, certified precision
    (perfkit.gate.synthetic): the gate's logic is the subject here, and a short real run beside other
    workers can end a level unstable or with too few of hungry's requests to certify a percentile.
    The record's shape (spec, mix, models in order) stays the real run's."""
    level = record.levels[0]
    shares = tuple(
        replace(share, result=synthetic_level(concurrency=c, latency_ms=ms, noise=0.01, windows=8, seed=i))
        for i, (share, c, ms) in enumerate(zip(level.models, (3, 1), (4.0, 30.0)))
    )
    whole = synthetic_level(concurrency=4, latency_ms=6.0, noise=0.01, windows=8, seed=7)
    return replace(record, levels=(replace(whole, load=level.load, models=shares),))


def test_gate_judges_the_mix_and_each_model(mix_run, tmp_path, capsys):
    record = _certified(mix_run[0])
    opts = GateOptions(thresholds=tuple(parse_thresholds(["p99:+10%", "hungry:p50:+5%"])))
    results = compare_pair(record, record, opts)
    assert [r.model for r in results] == [f"mix {MIX}", f"batcher in mix {MIX}", f"hungry in mix {MIX}"]
    metrics = {r.model: sorted(f.metric for f in r.findings) for r in results}
    assert metrics[f"hungry in mix {MIX}"] == ["p50", "p99"]  # the scoped threshold judges hungry only
    assert metrics[f"batcher in mix {MIX}"] == ["p99"]
    (hungry,) = [f for f in results[2].findings if f.metric == "p50"]
    assert hungry.baseline == pytest.approx(record.levels[0].models[1].result.latency().percentile_us(50))
    # the CLI prints each of them and passes a run against itself
    path = tmp_path / "run.json"
    record.save(path)
    gate = ["gate", "--baseline", str(path), "--current", str(path), "--threshold", "throughput:-5%"]
    # (a scoped threshold of another metric than the whole mix's: hungry judged on its throughput)
    code = main([*gate, "--threshold", "hungry:throughput:-1%"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"hungry in mix {MIX}" in out and f"batcher in mix {MIX}" in out
    # a mix is never judged against a run of one of its models alone
    data = json.loads(record.to_json())
    alone = RunRecord.from_dict({**data, "spec": {**data["spec"], "mix": []}})
    code = main(["gate", "--baseline", str(path), "--current", str(alone.save(tmp_path / "alone.json"))])
    err = capsys.readouterr().err
    assert code == 3 and "traffic mix 'batcher:3,hungry:1'" in err
