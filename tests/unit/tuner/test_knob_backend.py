"""Backends' own threads and graphs as knobs (tuner/_space/_knob_backend.py), without a server:
each written where its backend reads it and read back, the original's text kept where a value is
the backend's default, the values searched per backend and machine, and why not elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.errors import InputError
from perfkit.server.modelconfig import format_config, parse_config
from perfkit.tuner import TuneSpace, apply_params, resolve
from perfkit.tuner._space import extract_params
from perfkit.tuner._space._knob_backend import thread_values

ORT = 'name: "m" backend: "onnxruntime" max_batch_size: 8 instance_group [{ count: 1 kind: KIND_CPU }]'
TRT = 'name: "m" platform: "tensorrt_plan" max_batch_size: 8 instance_group [{ count: 1 kind: KIND_GPU }]'


def _space(text: str, tmp_path: Path, space: TuneSpace | None = None, **kw):
    model_dir = tmp_path / "m"
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    cfg = parse_config(text)
    return cfg, resolve(space or TuneSpace(), cfg, model_dir, latency_budget_us=20_000, **kw)


@pytest.mark.parametrize(
    ("cores", "instances", "expected"),
    [(2, 1, (1, 2)), (2, 2, (1,)), (2, 4, (1,)), (8, 2, (1, 2, 4)), (6, 1, (1, 2, 4, 6)), (1, 1, (1,))],
)
def test_thread_values_keep_threads_times_instances_within_the_cores(cores, instances, expected):
    assert thread_values(cores, instances) == expected
    assert max(expected) * instances <= cores or expected == (1,)


def test_onnxruntime_threads_range_from_cores_and_the_fewest_instances(tmp_path: Path):
    _, rs = _space(ORT, tmp_path, cpu_cores=2)
    # 0 is the original's (unset: ONNX Runtime picks the core count), 1 and 2 fit one instance on 2 cores
    assert rs.dimension("intra_op_threads").choices == (0, 1, 2)
    assert rs.original_params["intra_op_threads"] == 0
    _, rs8 = _space(ORT, tmp_path, TuneSpace(instance_counts=(2, 4)), cpu_cores=8)
    assert rs8.dimension("intra_op_threads").choices == (0, 1, 2, 4)  # 4 threads x 2 instances = 8 cores
    assert "2 instance(s) <= 8 cores" in rs8.reasons["intra_op_threads"]
    _, asked = _space(ORT, tmp_path, TuneSpace(intra_op_threads=(3,)), cpu_cores=2)
    assert asked.dimension("intra_op_threads").choices == (0, 3)


def test_onnxruntime_inter_op_threads_only_in_parallel_mode(tmp_path: Path):
    _, seq = _space(ORT, tmp_path, cpu_cores=4)
    assert seq.dimension("inter_op_threads") is None and "ignores" in seq.reasons["inter_op_threads"]
    par = ORT + ' parameters { key: "execution_mode" value: { string_value: "1" } }'
    _, rs = _space(par, tmp_path, cpu_cores=4)
    assert rs.dimension("inter_op_threads").choices == (0, 1, 2, 4)
    assert rs.original_params["ort_execution_mode"] == "parallel"


def test_onnxruntime_knobs_apply_and_read_back(tmp_path: Path):
    cfg, rs = _space(ORT, tmp_path, cpu_cores=2)
    assert rs.dimension("ort_execution_mode").choices == ("sequential", "parallel")
    assert rs.dimension("ort_graph_level").choices == ("all", "basic")
    params = {"intra_op_threads": 2, "inter_op_threads": 1}
    params |= {"ort_execution_mode": "parallel", "ort_graph_level": "basic"}
    out = apply_params(cfg, params, rs)
    assert out.parameters["intra_op_thread_count"].string_value == "2"
    assert out.parameters["inter_op_thread_count"].string_value == "1"
    assert out.parameters["execution_mode"].string_value == "1"
    assert out.optimization.graph.level == -1
    back = extract_params(out, backend="onnxruntime")
    assert {k: back[k] for k in params} == params
    # back to the defaults: level 0 clears the graph field, and the original's own point is its text
    again = apply_params(out, {"ort_graph_level": "all"}, rs)
    assert not again.HasField("optimization")
    same = apply_params(cfg, {k: rs.original_params[k] for k in ("ort_execution_mode", "ort_graph_level")}, rs)
    assert format_config(same) == format_config(cfg)


def test_python_model_threads_are_the_parameters_it_declares(tmp_path: Path):
    text = (
        'name: "m" backend: "python" max_batch_size: 4 instance_group [{ count: 1 kind: KIND_CPU }]'
        ' parameters { key: "intra_op_threads" value: { string_value: "1" } }'
    )
    cfg, rs = _space(text, tmp_path, cpu_cores=2)
    assert rs.dimension("intra_op_threads").choices == (1, 2)
    out = apply_params(cfg, {"intra_op_threads": 2}, rs)
    assert out.parameters["intra_op_threads"].string_value == "2"
    assert "intra_op_thread_count" not in out.parameters  # only the key the model reads
    bare = 'name: "m" backend: "python" max_batch_size: 4'
    _, none = _space(bare, tmp_path, cpu_cores=2)
    assert none.dimension("intra_op_threads") is None
    assert "declares no 'intra_op_threads'" in none.reasons["intra_op_threads"]
    assert "intra_op_threads" not in none.original_params


def test_pytorch_threads_are_written_but_never_searched_by_reload(tmp_path: Path):
    text = (
        'name: "m" backend: "pytorch" max_batch_size: 4 instance_group [{ count: 1 kind: KIND_CPU }]'
        ' parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "1" } }'
    )
    cfg, rs = _space(text, tmp_path, cpu_cores=4)
    assert rs.dimension("intra_op_threads") is None and rs.dimension("inter_op_threads") is None
    assert "std::call_once" in rs.reasons["intra_op_threads"]
    assert rs.original_params["intra_op_threads"] == 1
    out = apply_params(cfg, {"intra_op_threads": 2, "inter_op_threads": 1}, rs)
    assert out.parameters["INTRA_OP_THREAD_COUNT"].string_value == "2"
    assert out.parameters["INTER_OP_THREAD_COUNT"].string_value == "1"


def test_tensorrt_graphs_and_events_need_a_gpu(tmp_path: Path):
    _, cpu_only = _space(TRT, tmp_path, refuse=False, gpus=0)
    for knob in ("cuda_graphs", "busy_wait_events"):
        assert cpu_only.dimension(knob) is None and "none is planned for" in cpu_only.reasons[knob]
    cfg, rs = _space(TRT, tmp_path, gpus=1)
    assert rs.dimension("cuda_graphs").choices == ("off", "on", "pow2")
    assert rs.dimension("busy_wait_events").choices == (False, True)
    out = apply_params(cfg, {"cuda_graphs": "pow2", "busy_wait_events": True}, rs)
    assert out.optimization.cuda.graphs and [g.batch_size for g in out.optimization.cuda.graph_spec] == [1, 2, 4, 8]
    assert out.optimization.cuda.busy_wait_events
    assert extract_params(out, backend="tensorrt")["cuda_graphs"] == "pow2"
    on = apply_params(out, {"cuda_graphs": "on"}, rs)
    assert on.optimization.cuda.graphs and not on.optimization.cuda.graph_spec  # the backend's own sizes
    assert format_config(apply_params(cfg, {"cuda_graphs": "off", "busy_wait_events": False}, rs)) == format_config(cfg)


def test_pinned_memory_only_for_gpu_instances(tmp_path: Path):
    _, cpu = _space(ORT, tmp_path, TuneSpace(instance_kinds=("cpu",)), gpus=1)
    assert cpu.dimension("pinned_memory") is None and "KIND_CPU" in cpu.reasons["pinned_memory"]
    gpu_text = ORT.replace("KIND_CPU", "KIND_GPU")
    cfg, rs = _space(gpu_text, tmp_path, TuneSpace(instance_kinds=("gpu",)), gpus=1)
    assert rs.dimension("pinned_memory").choices == (True, False)  # unset is on (core NormalizeModelConfig)
    off = apply_params(cfg, {"pinned_memory": False}, rs)
    assert not off.optimization.input_pinned_memory.enable and off.optimization.HasField("output_pinned_memory")
    assert extract_params(off, backend="onnxruntime")["pinned_memory"] is False
    assert format_config(apply_params(cfg, {"pinned_memory": True}, rs)) == format_config(cfg)


def test_other_backends_say_why_their_threads_are_not_searched(tmp_path: Path):
    _, rs = _space('name: "m" backend: "openvino" max_batch_size: 4', tmp_path, cpu_cores=2)
    assert rs.dimension("intra_op_threads") is None
    assert "openvino backend has no intra-op-threads setting" in rs.reasons["intra_op_threads"]


def test_thread_counts_from_a_sweep_table_must_be_positive():
    assert TuneSpace.from_mapping({"intra_op_threads": "2,1"}).intra_op_threads == (1, 2)
    with pytest.raises(InputError, match="intra_op_threads must be >= 1"):
        TuneSpace.from_mapping({"intra_op_threads": [0, 1]})


SEQ = Path(__file__).resolve().parents[3] / "fixtures" / "models"


def _fixture(name: str, space: TuneSpace | None = None):
    from perfkit.server.modelconfig import read_config

    cfg = read_config(SEQ / name / "config.pbtxt")
    return cfg, resolve(space or TuneSpace(), cfg, SEQ / name, latency_budget_us=20_000, cpu_cores=2)


def test_direct_minimum_slot_utilization_is_searched_written_and_validated():
    cfg, rs = _fixture("accumulator")
    assert rs.dimension("minimum_slot_utilization").choices == (0.0, 0.5, 1.0)
    assert rs.original_params["minimum_slot_utilization"] == 0.0
    half = apply_params(cfg, {"minimum_slot_utilization": 0.5, "sequence_max_queue_delay_us": 800}, rs)
    assert half.sequence_batching.direct.minimum_slot_utilization == 0.5
    assert extract_params(half, backend="python")["minimum_slot_utilization"] == 0.5
    # under oldest-first the value has nowhere to go: the candidate stays oldest's
    oldest = apply_params(cfg, {"sequence_strategy": "oldest", "minimum_slot_utilization": 0.5}, rs)
    assert oldest.sequence_batching.HasField("oldest") and "minimum_slot_utilization" not in extract_params(
        oldest, backend="python"
    )
    from perfkit.errors import CandidateRejectedError

    with pytest.raises(CandidateRejectedError, match="slot utilization"):
        apply_params(cfg, {"minimum_slot_utilization": 1.5}, rs)


def test_fix_holds_a_knob_at_one_value_beside_the_original():
    space = TuneSpace.from_mapping({"fix": "sequence_strategy=oldest,max_candidate_sequences=8,max_batch_size=4"})
    assert dict(space.fixed) == {"sequence_strategy": "oldest", "max_candidate_sequences": "8", "max_batch_size": "4"}
    _, rs = _fixture("accumulator", space)
    assert rs.dimension("sequence_strategy").choices == ("direct", "oldest")  # the original's kept for trial 0
    assert rs.dimension("max_candidate_sequences").choices == (8,)
    assert rs.dimension("max_batch_size") is None  # 4 is the original's: nothing left to search
    assert "fixed at 8 (--fix)" in rs.reasons["max_candidate_sequences"]
    with pytest.raises(InputError, match="--fix no_such_knob: no such knob"):
        _fixture("accumulator", TuneSpace.from_mapping({"fix": "no_such_knob=1"}))
    with pytest.raises(InputError, match="not a value of sequence_strategy"):
        _fixture("accumulator", TuneSpace.from_mapping({"fix": "sequence_strategy=newest"}))
    with pytest.raises(InputError, match="is not KNOB=VALUE"):
        TuneSpace.from_mapping({"fix": "sequence_strategy"})
