"""perfkit tune --search predict on pipelines against a real Triton: on the `stages` ensemble every
step is calibrated in one run through it, the joint space is predicted end to end, the best
predicted set is measured and confirmed, each checked trial names the bottleneck step with its
predicted and measured time in step, and the measured best is within the test's stated tolerance
of its prediction; a BLS pipeline's calls are read from the server's statistics and predicted
(the known best picked), and one whose calls vary request by request says so and is searched by
measurement; and with precision on the heavy step, that step is calibrated at each precision
(fp16 a factor of fp32's curve) and the pick runs it at the precision its known service model
says is faster."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.records import TuneRecord
from perfkit.server.modelconfig import read_config
from tests.conftest import CHEAP_CONFIRM, copy_models

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]

STEPS = ("stage_decode", "stage_infer", "stage_post")
# The stated tolerance of this test on a 2-core machine shared with other jobs: the measured rate of
# one config moves by up to 2x from run to run there (the tail of 400 ms windows; the server's own
# CPU caps the ensemble near 700 req/s, which the simulator does not model), so the test holds the
# measured best to within 60% of its prediction; the tuner's own tolerance (25%) decides the search.
MEASURED_SPREAD = 0.6
# A cheap space: batching on or off per step at max_batch_size 8 (the ensemble's; a step may not go
# below it), the queue delay fixed, one instance.
SPACE = ["--max-batch-sizes", "8", "--instance-counts", "1", "--queue-delays-us", "2000",
         "--preferred-batch-sizes", "none", "--latency-budget", "200ms", "--measurement-interval", "400",
         *CHEAP_CONFIRM]  # fmt: skip


def _tune(repo: Path, out: Path, model: str, *extra: str, search: str = "predict") -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "perfkit", "tune", "-m", model, "--model-repository", str(repo), "-o", str(out),
           "--search", search, *extra]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=900)


# quiet: its calibration ranges and measured-against-predicted spreads are verdicts on measured
# times, which other workers' load distorts (a calibration read beside them is not the service's).
@pytest.mark.quiet
def test_predicted_ensemble_tune_calibrates_each_step_and_names_the_bottleneck(tmp_path: Path):
    repo = copy_models(tmp_path, ["stages", *STEPS])
    before = {m: (repo / m / "config.pbtxt").read_bytes() for m in STEPS}
    out = tmp_path / "out"
    proc = _tune(repo, out, "stages", "--trials", "4", *SPACE)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert {m: (repo / m / "config.pbtxt").read_bytes() for m in STEPS} == before  # calibration put back
    assert "calibrated 3 steps in" in proc.stdout, text
    rec = TuneRecord.load(out / "tune.json")
    cal = rec.calibration
    assert cal is not None and cal.model == "stages" and [s.model for s in cal.steps] == list(STEPS)
    # Each step batched on purpose up to 8 (the fixtures: fixed_ms + per_item_ms * N under a lock).
    decode = cal.steps[0]
    assert {p.batch_size for p in decode.points} >= {1, 8}, decode
    assert 5_000 <= decode.fixed_us <= 12_000 and decode.per_item_us < 2_000, decode
    assert cal.steps[2].fixed_us < decode.fixed_us, cal.steps  # the cheap postprocess
    assert re.search(r"predicted \d+ configs in", proc.stdout), text
    predicted = [t for t in rec.trials if "predicted_rps" in t.metrics and t.feasible]
    assert predicted, text
    # The best predicted set batches both hungry steps (batching one alone leaves the other the
    # bottleneck), and its measured rate is within the test's tolerance of its prediction.
    best_predicted = max(predicted, key=lambda t: t.metrics["predicted_rps"])
    assert best_predicted.throughput_infer_per_s is not None
    ratio = best_predicted.throughput_infer_per_s / best_predicted.metrics["predicted_rps"]
    assert abs(ratio - 1) <= MEASURED_SPREAD, (ratio, text)
    assert best_predicted.params.get("stage_decode.dynamic_batching") is True, best_predicted.params
    assert best_predicted.params.get("stage_infer.dynamic_batching") is True, best_predicted.params
    # Every checked trial's steps, predicted vs measured at the rate measured, and the bottleneck
    # named with both figures. For the best predicted set it is the decoder or the inferrer (the
    # cheap postprocess batches too), its execution time within the test's tolerance of the
    # calibrated one. (An unbatched postprocess may be named on another trial: a calibration on a
    # busy machine can read its 1 ms as 3.)
    checks = {
        int(n): (m, float(want), float(got))
        for n, m, want, got in re.findall(
            r"^  trial (\d+) steps at .*\n  bottleneck: (stage_\w+) \(predicted capacity \d+ req/s\): compute"
            r" ([\d.]+) ms predicted, ([\d.]+) ms measured",
            proc.stdout,
            flags=re.M,
        )
    }
    assert best_predicted.number in checks, text
    step, want, got = checks[best_predicted.number]
    assert step in ("stage_decode", "stage_infer") and abs(got / want - 1) <= MEASURED_SPREAD, (step, want, got)
    # Either the predictions held and the search stopped, or it said so and went on measuring.
    assert "their predictions held" in proc.stdout or "going on with the measured search" in proc.stdout, text
    assert rec.best_trial is None or "bottleneck of the best (trial" in proc.stdout or "OFF BY" in proc.stdout, text
    with open(out / "trials.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert "predicted_rps" in rows[0] and all(rows[0][f"{m}.compute_us"] for m in STEPS)


# stage_infer made the heavy step of the private copy. As shipped, stage_decode and stage_infer are
# equally batch-hungry on separate emulated devices: fp16 on stage_infer alone would leave
# stage_decode as slow as before, the ensemble's rate unchanged, and no precision better than the
# other. Five times stage_decode's costs make stage_infer the bottleneck at fp32 and still at fp16
# (half its device part), so fp16 raises the ensemble's rate by its factor, while every rate stays
# well under what the server's own CPU caps the ensemble at on this machine.
HEAVY_INFER = {"fixed_ms": "30.0", "per_item_ms": "1.0"}
# How far the calibrated fp16 factor may stand from the fixture's: the python backend's own time
# per execution runs outside the precision's factor and grows under other workers' load.
FACTOR_SPREAD = 0.15


def _param_ms(cfg_path: Path, key: str) -> float:
    return float(read_config(cfg_path).parameters[key].string_value)


def _fp16_factor(cfg_path: Path, n: int) -> float:
    """stage_infer's fp16 execution of a batch of n over its fp32 one, by its model.py: host_ms a
    request, then the device part (fixed_ms + per_item_ms n) times 0.5 at fp16."""
    host = _param_ms(cfg_path, "host_ms") * n
    device = _param_ms(cfg_path, "fixed_ms") + _param_ms(cfg_path, "per_item_ms") * n
    return (host + 0.5 * device) / (host + device)


# quiet: the pick is the confirmed best, read beside other workers' load (as the BLS test's below).
@pytest.mark.quiet
def test_predicted_ensemble_tune_across_two_precisions_on_a_step_calibrates_each_and_picks_the_faster(
    tmp_path: Path,
):
    repo = copy_models(tmp_path, ["stages", *STEPS])
    cfg_path = repo / "stage_infer" / "config.pbtxt"
    text = cfg_path.read_text()
    for key, value in HEAVY_INFER.items():
        text, n = re.subn(rf'(key: "{key}" value: {{ string_value: )"[\d.]+"', rf'\g<1>"{value}"', text)
        assert n == 1, key
    # Precision on stage_infer alone: its own parameter, searched at the default fp32 and fp16
    # (--precisions would give every step of the ensemble, all python models, the knob).
    cfg_path.write_text(text + 'parameters: { key: "precision" value: { string_value: "fp32" } }\n')
    out = tmp_path / "out"
    proc = _tune(repo, out, "stages", "--trials", "4", *SPACE, search="auto")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert "--search auto: predicting" in proc.stdout, text
    rec = TuneRecord.load(out / "tune.json")
    cal = rec.calibration
    assert cal is not None and [s.model for s in cal.steps] == list(STEPS), text
    decode, infer, post = cal.steps
    assert not decode.values and not post.values, cal.steps  # no precision searched on them
    assert infer.value == "precision=fp32" and [c.value for c in infer.values] == ["precision=fp16"], infer
    fp16 = infer.values[0]
    # One calibration line per value under stage_infer's: the factor where the two ends agreed on one
    # ratio (the fixture's fp16 halves the whole device part), else fp16's own line.
    line = r"^  stage_infer at precision=fp32: .*\n    precision=fp16: (x(\d\.\d\d) the first curve|execution)"
    said = re.search(line, proc.stdout, flags=re.M)
    assert said is not None, text
    top = max(p.batch_size for p in infer.points)
    if fp16.factor > 0:
        assert said.group(2) == f"{fp16.factor:.2f}", text
        got = fp16.factor
    else:
        got = (fp16.fixed_us + fp16.per_item_us * top) / (infer.fixed_us + infer.per_item_us * top)
    want = (_fp16_factor(cfg_path, 1) + _fp16_factor(cfg_path, top)) / 2
    assert abs(got / want - 1) <= FACTOR_SPREAD, (got, want, text)
    # The best predicted and the pick run stage_infer at fp16, the bottleneck at half its time.
    predicted = [t for t in rec.trials if "predicted_rps" in t.metrics and t.feasible]
    assert predicted, text
    best_predicted = max(predicted, key=lambda t: t.metrics["predicted_rps"])
    assert best_predicted.params.get("stage_infer.precision") == "fp16", best_predicted.params
    best = rec.best()
    assert best is not None and best.params.get("stage_infer.precision") == "fp16", text


BLS_SPACE = ["--composing-models", "stage_decode,stage_infer", "--no-dynamic-batching", "--max-batch-sizes", "8",
             "--instance-counts", "1,2", "--latency-budget", "500ms", "--measurement-interval", "400"]  # fmt: skip
BLS_MODELS = ["bls_stages", "stage_decode", "stage_infer"]


# quiet: its pick is the confirmed best, and an open-loop confirmation beside other workers' load
# reads a growing backlog where the search's levels held (the pick demoted to your config).
@pytest.mark.quiet
def test_predicted_bls_tune_reads_the_calls_from_the_statistics_and_picks_the_known_best(tmp_path: Path):
    repo = copy_models(tmp_path, BLS_MODELS)
    before = {m: (repo / m / "config.pbtxt").read_bytes() for m in BLS_MODELS}
    out = tmp_path / "out"
    proc = _tune(repo, out, "bls_stages", "--trials", "4", *BLS_SPACE, *CHEAP_CONFIRM)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert {m: (repo / m / "config.pbtxt").read_bytes() for m in BLS_MODELS} == before  # calibration put back
    # The fixture calls stage_decode then stage_infer once a request (fixtures/models/bls_stages/1/model.py).
    assert "calibrated 3 steps in" in proc.stdout, text
    assert "bls_stages: calls per request stage_decode x1, stage_infer x1 (the same at every level)" in proc.stdout, (
        text
    )
    rec = TuneRecord.load(out / "tune.json")
    cal = rec.calibration
    assert cal is not None and [s.model for s in cal.steps] == BLS_MODELS
    # Each called model's 6 ms + 0.2 ms an item under its lock; the BLS model's own time well under a call's.
    bls, decode, infer = cal.steps
    assert (
        5_000 <= decode.fixed_us + decode.per_item_us <= 12_000
        and 5_000 <= infer.fixed_us + infer.per_item_us <= 12_000
    )
    assert bls.fixed_us < decode.fixed_us, cal.steps
    assert re.search(r"predicted \d+ configs in", proc.stdout), text
    predicted = [t for t in rec.trials if "predicted_rps" in t.metrics and t.feasible]
    assert predicted, text
    # The known best: each BLS instance is held through both calls (~13 ms a request), so two
    # instances double the rate until each called model's device (one lock its instances share)
    # bounds it at 1 / 6.25 ms. The best predicted and the pick hold two BLS instances.
    best_predicted = max(predicted, key=lambda t: t.metrics["predicted_rps"])
    assert best_predicted.params.get("bls_stages.instance_count") == 2, best_predicted.params
    assert best_predicted.throughput_infer_per_s is not None
    ratio = best_predicted.throughput_infer_per_s / best_predicted.metrics["predicted_rps"]
    assert abs(ratio - 1) <= MEASURED_SPREAD, (ratio, text)
    best = rec.trial(rec.best_trial) if rec.best_trial is not None else None
    assert best is not None and best.params.get("bls_stages.instance_count") == 2, text
    # Each checked trial's steps, predicted / measured, the BLS model's compute holding its calls.
    assert re.search(r"^  trial \d+ steps at .*bls_stages compute", proc.stdout, flags=re.M), text


VARIED = '''"""bls_stages, its calls varying request by request: every third request calls stage_infer twice."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.served = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            self.served += 1
            calls = ("stage_decode", "stage_infer") + (("stage_infer",) if self.served % 3 == 0 else ())
            for model in calls:
                inputs = [pb_utils.Tensor("INPUT0", tensor.as_numpy())]
                call = pb_utils.InferenceRequest(model_name=model, requested_output_names=["OUTPUT0"], inputs=inputs)
                reply = call.exec()
                if reply.has_error():
                    raise pb_utils.TritonModelException(f"{model}: {reply.error().message()}")
                tensor = pb_utils.get_output_tensor_by_name(reply, "OUTPUT0")
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", tensor.as_numpy())]))
        return responses
'''


def test_a_bls_model_whose_calls_vary_says_so_and_is_searched_by_measurement(tmp_path: Path):
    repo = copy_models(tmp_path, BLS_MODELS)
    (repo / "bls_stages" / "1" / "model.py").write_text(VARIED, encoding="utf-8")
    out = tmp_path / "out"
    proc = _tune(repo, out, "bls_stages", "--trials", "2", "--confirm", "0", *BLS_SPACE)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    said = re.search(r"'bls_stages' calls stage_infer (1\.\d\d) at 1 client, .* a request: not one whole number"
                     r" at every level \(the calls depend on the data sent\).*: going on with the measured search",
                     proc.stdout)  # fmt: skip
    assert said is not None and abs(float(said.group(1)) - 4 / 3) < 0.1, text
    assert "predicted" not in proc.stdout.split("going on with the measured search")[1], text
    rec = TuneRecord.load(out / "tune.json")
    assert rec.calibration is None and len(rec.trials) >= 2
    # A closed-loop load is refused up front, as for one model.
    refused = _tune(repo, tmp_path / "out2", "bls_stages", "--composing-models", "stage_decode,stage_infer",
                    "--load", "concurrency", "--latency-budget", "500ms", "--trials", "1")  # fmt: skip
    assert refused.returncode != 0 and "open-loop arrival rates only" in refused.stdout + refused.stderr
