"""The engine-settings knob: config.pbtxt `parameters` entries with user-given values (no server)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from perfkit.errors import InputError
from perfkit.server.modelconfig import parse_config, read_config, render_config
from perfkit.tuner import TuneSpace, apply_params, resolve
from perfkit.tuner._space import candidate_points, extract_params

ROOT = Path(__file__).resolve().parents[3]
STREAMER = ROOT / "fixtures" / "models" / "streamer"

TRTLLM = """name: "tensorrt_llm"
backend: "tensorrtllm"
max_batch_size: 8
model_transaction_policy { decoupled: true }
input [ { name: "input_ids" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "output_ids" data_type: TYPE_INT32 dims: [ -1, -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
# the engine's memory share: read by the backend at load
parameters: {
  key: "kv_cache_free_gpu_mem_fraction"
  value: { string_value: "0.9" }
}
parameters: {
  key: "gpt_model_type"
  value: { string_value: "inflight_fused_batching" }
}
"""


def _trtllm(tmp_path: Path) -> Path:
    folder = tmp_path / "tensorrt_llm"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(TRTLLM)
    return folder


def test_the_flag_and_the_table_give_the_same_lists_in_the_order_given():
    flags = TuneSpace.from_mapping(
        {"parameters": ("kv_cache_free_gpu_mem_fraction=0.5,0.9", "batch_scheduler_policy=max_utilization")}
    )
    table = TuneSpace.from_mapping(
        {"parameters": {"kv_cache_free_gpu_mem_fraction": [0.5, 0.9], "batch_scheduler_policy": ["max_utilization"]}}
    )
    assert (
        flags.parameters
        == table.parameters
        == (
            ("kv_cache_free_gpu_mem_fraction", ("0.5", "0.9")),
            ("batch_scheduler_policy", ("max_utilization",)),
        )
    )
    # a TOML boolean is the string TensorRT-LLM reads
    assert TuneSpace.from_mapping({"parameters": {"enable_chunked_context": [True, False]}}).parameters == (
        ("enable_chunked_context", ("true", "false")),
    )


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ("kv_cache_free_gpu_mem_fraction", "not KEY=V1,V2"),
        ("kv_cache_free_gpu_mem_fraction=1.5", "'1.5' is not a fraction in \\(0, 1\\]"),
        ("batch_scheduler_policy=fastest", "'fastest' is not max_utilization or guaranteed_no_evict"),
        ("max_tokens_in_paged_kv_cache=0", "is not a positive integer"),
        ("enable_chunked_context=yes", "is not true or false"),
        ("token_ms=", "must be non-empty"),
        ("bad key=1", "is not a config.pbtxt parameters key"),
    ],
)
def test_bad_lists_are_refused_naming_the_key_and_value(entry, match):
    with pytest.raises(InputError, match=match):
        TuneSpace.from_mapping({"parameters": [entry]}, source="flags")


def test_a_key_given_twice_is_refused():
    with pytest.raises(InputError, match="given twice"):
        TuneSpace.from_mapping({"parameters": ["token_ms=1", "token_ms=2"]})


def test_the_knob_searches_every_combination_and_the_original_is_one_of_them(tmp_path: Path):
    folder = _trtllm(tmp_path)
    cfg = read_config(folder / "config.pbtxt")
    space = TuneSpace.from_mapping(
        {"parameters": ["kv_cache_free_gpu_mem_fraction=0.5,0.9", "enable_chunked_context=true,false"]}
    )
    rs = resolve(space, cfg, folder, latency_budget_us=100_000)
    dim = rs.dimension("parameters")
    assert dim is not None
    # the original sets the fraction and not chunking: 'enable_chunked_context=' is its point, listed first
    orig = "kv_cache_free_gpu_mem_fraction=0.9;enable_chunked_context="
    assert rs.original_params["parameters"] == orig
    assert dim.choices == (
        orig,
        "kv_cache_free_gpu_mem_fraction=0.5;enable_chunked_context=true",
        "kv_cache_free_gpu_mem_fraction=0.5;enable_chunked_context=false",
        "kv_cache_free_gpu_mem_fraction=0.9;enable_chunked_context=true",
        "kv_cache_free_gpu_mem_fraction=0.9;enable_chunked_context=false",
    )
    assert "parameters" in rs.reasons and "kv_cache_free_gpu_mem_fraction" in rs.reasons["parameters"]


def test_applying_a_point_writes_the_strings_keeps_other_entries_and_reads_back(tmp_path: Path):
    folder = _trtllm(tmp_path)
    cfg = read_config(folder / "config.pbtxt")
    space = TuneSpace.from_mapping(
        {"parameters": ["kv_cache_free_gpu_mem_fraction=0.5", "batch_scheduler_policy=max_utilization"]}
    )
    rs = resolve(space, cfg, folder, latency_budget_us=100_000)
    point = "kv_cache_free_gpu_mem_fraction=0.5;batch_scheduler_policy=max_utilization"
    new = apply_params(cfg, {"parameters": point}, rs)
    assert new.parameters["kv_cache_free_gpu_mem_fraction"].string_value == "0.5"
    assert new.parameters["batch_scheduler_policy"].string_value == "max_utilization"
    assert new.parameters["gpt_model_type"].string_value == "inflight_fused_batching"  # not searched: kept
    keys = rs.parameter_keys
    assert extract_params(new, backend="tensorrtllm", parameter_keys=keys)["parameters"] == point
    # the text written keeps the user's comment and parses back to the same config
    text = render_config(TRTLLM, new)
    assert "# the engine's memory share" in text
    assert parse_config(text, source="t") == new
    # back to the original point: the entry it did not set is removed again
    back = apply_params(new, {"parameters": rs.original_params["parameters"]}, rs)
    assert "batch_scheduler_policy" not in back.parameters
    assert back.parameters["kv_cache_free_gpu_mem_fraction"].string_value == "0.9"


def test_a_python_models_own_parameter_is_searched_beside_its_instance_count(tmp_path: Path):
    folder = tmp_path / "streamer"
    shutil.copytree(STREAMER, folder)
    cfg = read_config(folder / "config.pbtxt")
    space = TuneSpace.from_mapping({"parameters": ["token_ms=2,20"], "instance_counts": [1, 2]})
    rs = resolve(space, cfg, folder, latency_budget_us=100_000)
    assert rs.original_params["parameters"] == "token_ms=5"
    points = candidate_points(rs)
    pairs = {(p["parameters"], p["instance_count"]) for p in points}
    assert pairs == {(f"token_ms={v}", n) for v in (5, 2, 20) for n in (1, 2)}
    cfgs = [apply_params(cfg, p, rs) for p in points]
    assert {c.parameters["token_ms"].string_value for c in cfgs} == {"2", "5", "20"}
    assert all(c.parameters["first_token_ms"].string_value == "20" for c in cfgs)


def test_without_lists_the_knob_is_not_searched_and_says_how_to_ask():
    cfg = read_config(STREAMER / "config.pbtxt")
    rs = resolve(TuneSpace(), cfg, STREAMER, latency_budget_us=100_000)
    assert rs.dimension("parameters") is None and "parameters" not in rs.original_params
    assert "--parameter KEY=V1,V2" in rs.reasons["parameters"]


def test_too_many_combinations_are_refused_up_front():
    cfg = read_config(STREAMER / "config.pbtxt")
    many = [f"k{i}=" + ",".join(str(v) for v in range(5)) for i in range(4)]  # 5**4 = 625
    with pytest.raises(InputError, match="625 combinations"):
        resolve(TuneSpace.from_mapping({"parameters": many}), cfg, STREAMER, latency_budget_us=100_000)


def test_the_dry_run_lists_the_flags_values(tmp_path: Path):
    from click.testing import CliRunner

    from perfkit.cli.tune import command

    repo = tmp_path / "repo"
    shutil.copytree(STREAMER, repo / "streamer")
    out = CliRunner().invoke(
        command,
        ["-m", "streamer", "--model-repository", str(repo), "--latency-budget", "ttft:300ms", "--dry-run",
         "--parameter", "token_ms=2,20", "--instance-counts", "1"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "token_ms=2" in out.output and "token_ms=20" in out.output
