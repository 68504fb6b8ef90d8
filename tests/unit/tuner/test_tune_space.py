"""The tuner's search space, config mutation and budget judgement (no server needed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import tomllib

from perfkit.errors import CandidateRejectedError, ConfigError, InputError, UsageError
from perfkit.records import LatencySummary, LevelResult, LoadLevel, Precision, RunRecord
from perfkit.server.modelconfig import format_config, parse_config, read_config
from perfkit.tuner import (
    SETTINGS_KEYS,
    Budget,
    TuneSettings,
    TuneSpace,
    apply_params,
    judge_trial,
    resolve,
)
from perfkit.tuner._find_load import concurrency_levels
from perfkit.tuner._space import extract_params
from perfkit.units import parse_latency_ms

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "fixtures" / "models"


def _resolve(name: str, space: TuneSpace | None = None, **kw):
    cfg = read_config(FIXTURES / name / "config.pbtxt")
    return cfg, resolve(space or TuneSpace(), cfg, FIXTURES / name, latency_budget_us=20_000, **kw)


def test_batcher_defaults_search_every_dimension_that_applies():
    _, rs = _resolve("batcher")
    names = [d.name for d in rs.dimensions]
    assert names == [
        "max_batch_size",
        "dynamic_batching",
        "max_queue_delay_us",
        "preferred_batch_sizes",
        "instance_count",
        "precision",
    ]
    # Explored above the model's 8 by doubling (a python model takes any batch); never below the
    # 8 the `pipeline` ensemble of the same repository batches (it would no longer load).
    assert rs.dimension("max_batch_size").choices == (8, 16, 32, 64, 128)
    assert any("pipeline" in n for n in rs.notes)
    # Counts bounded by the machine (at least 4 for CPU instances), not by the model's 1.
    assert rs.dimension("instance_count").choices[:4] == (1, 2, 3, 4)
    delay = rs.dimension("max_queue_delay_us")
    assert delay.is_range and delay.high <= 10_000  # never past half the 20 ms budget
    assert rs.precision_via == "parameter"
    assert rs.original_params == {
        "max_batch_size": 8,
        "dynamic_batching": False,
        "instance_count": 1,
        "instance_kind": "cpu",
        "precision": "fp32",
    }


def test_max_batch_size_zero_stays_zero_and_drops_batching_dimensions():
    _, rs = _resolve("vardims", TuneSpace(max_batch_sizes=(1, 4), dynamic_batching=(True,)))
    names = {d.name for d in rs.dimensions}
    assert not names & {"max_batch_size", "dynamic_batching", "max_queue_delay_us", "preferred_batch_sizes"}
    assert any("max_batch_size 0" in n for n in rs.notes)


def test_ensemble_is_refused_with_a_hint():
    with pytest.raises(ConfigError, match="ensemble") as info:
        _resolve("pipeline")
    assert info.value.exit_code == 3 and "composing models" in (info.value.hint or "")


def test_apply_then_extract_gives_the_params_back_and_keeps_other_fields():
    cfg, rs = _resolve("batcher")
    params = {
        "max_batch_size": 16,
        "dynamic_batching": True,
        "max_queue_delay_us": 700,
        "preferred_batch_sizes": "pow2",
        "instance_count": 3,
        "precision": "int8",
    }
    new = apply_params(cfg, params, rs)
    assert list(new.dynamic_batching.preferred_batch_size) == [2, 4, 8, 16]
    back = extract_params(new, backend="python")
    assert {k: back[k] for k in params} == params
    assert new.parameters["fixed_ms"].string_value == "2.0"
    assert [i.name for i in new.input] == ["INPUT0"]
    assert parse_config(format_config(new)) == new
    off = apply_params(new, {"dynamic_batching": False}, rs)
    assert not off.HasField("dynamic_batching")


def test_dynamic_batching_keeps_the_users_other_batcher_settings():
    cfg = parse_config(
        'name: "m" backend: "python" max_batch_size: 16 dynamic_batching { preferred_batch_size: [4, 16] '
        "max_queue_delay_microseconds: 100 priority_levels: 2 default_priority_level: 1 }"
    )
    rs = resolve(TuneSpace(), cfg, FIXTURES / "batcher", latency_budget_us=20_000)
    new = apply_params(cfg, {"max_batch_size": 8, "max_queue_delay_us": 300}, rs)
    assert new.dynamic_batching.priority_levels == 2
    assert list(new.dynamic_batching.preferred_batch_size) == [4]  # 16 no longer fits
    assert new.dynamic_batching.max_queue_delay_microseconds == 300


def test_onnx_precision_goes_through_the_tensorrt_accelerator(tmp_path: Path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.onnx").write_bytes(b"")
    cfg = parse_config(
        'name: "m" platform: "onnxruntime_onnx" max_batch_size: 8 optimization { execution_accelerators {'
        ' gpu_execution_accelerator [ { name: "tensorrt" parameters { key: "max_workspace_size_bytes" value: "1" } } ]'
        " } }"
    )
    rs = resolve(TuneSpace(), cfg, tmp_path / "m", latency_budget_us=20_000, gpu_available=True)
    assert rs.precision_via == "trt_accelerator"
    assert rs.dimension("precision").choices == ("none", "fp32", "fp16")
    assert rs.dimension("instance_kind").choices == ("gpu", "cpu", "auto")
    fp16 = apply_params(cfg, {"precision": "fp16"}, rs)
    acc = fp16.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert dict(acc.parameters) == {"max_workspace_size_bytes": "1", "precision_mode": "FP16"}
    none = apply_params(cfg, {"precision": "none"}, rs)
    assert not none.HasField("optimization")
    # Without a GPU the accelerator does not apply: precision is not searched.
    rs_cpu = resolve(TuneSpace(), cfg, tmp_path / "m", latency_budget_us=20_000, gpu_available=False)
    assert rs_cpu.dimension("precision") is None


def test_tensorrt_precision_is_never_guessed_from_file_names(tmp_path: Path):
    version = tmp_path / "m" / "1"
    version.mkdir(parents=True)
    for name in ("model.plan", "model_fp16.plan", "model_int8.plan"):
        (version / name).write_bytes(b"")
    cfg = parse_config('name: "m" platform: "tensorrt_plan" max_batch_size: 8')
    rs = resolve(TuneSpace(), cfg, tmp_path / "m", latency_budget_us=20_000)
    assert rs.dimension("precision") is None and "precision" not in rs.original_params
    assert "--trt-engines" in rs.reasons["precision"]
    # The engine's batch ceiling cannot be read: max_batch_size stays within the model's own.
    assert max(rs.dimension("max_batch_size").choices) == 8
    declared = TuneSpace(trt_engines=(("fp32", "model.plan"), ("fp16", "model_fp16.plan")))
    rs = resolve(declared, cfg, tmp_path / "m", latency_budget_us=20_000)
    assert rs.dimension("precision").choices == ("fp32", "fp16")
    assert rs.original_params["precision"] == "fp32"
    assert apply_params(cfg, {"precision": "fp16"}, rs).default_model_filename == "model_fp16.plan"
    with pytest.raises(InputError, match="no such file"):
        resolve(TuneSpace(trt_engines=(("fp16", "nope.plan"),)), cfg, tmp_path / "m", latency_budget_us=20_000)


def test_from_mapping_reads_the_example_sweep_file():
    table = tomllib.loads((ROOT / "sweeps" / "tune-batcher.toml").read_text())["tune"]
    space = TuneSpace.from_mapping(table, ignore=SETTINGS_KEYS)
    assert space.max_batch_sizes == (2, 4, 8)
    assert space.queue_delay_us == (100, 5000)
    assert space.precisions == ("fp32", "fp16", "int8")
    assert space.dynamic_batching is None
    settings = TuneSettings.from_mapping("batcher", {k: v for k, v in table.items() if k in SETTINGS_KEYS})
    assert settings.budget.latency_budget_ms == 20.0
    assert settings.max_time_s == 600.0
    assert settings.trials == 16


def test_each_space_key_is_a_flag_of_perfkit_tune_that_reaches_the_space():
    """The space's keys are listed once (TuneSpace.KEYS): the sweep's [tune] table and the flags read it."""
    from click.testing import CliRunner

    from perfkit.cli.tune import command

    params = {p.name for p in command.params}
    assert set(TuneSpace.KEYS) <= params
    repo = ROOT / "fixtures" / "models"
    out = CliRunner().invoke(command, ["-m", "batcher", "--model-repository", str(repo), "--latency-budget", "20ms",
                                       "--dry-run", "--instance-counts", "1,3", "--precisions", "fp32"])  # fmt: skip
    assert out.exit_code == 0, out.output
    rows = {line.split()[0]: line.split()[1] for line in out.output.splitlines() if line[:1].isalpha()}
    assert (rows["instance_count"], rows["precision"]) == ("1,3", "fp32"), out.output


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"max_batch_size": [1]}, "unknown key"),
        ({"instance_counts": "1,x"}, "not a list of integers"),
        ({"queue_delays_us": "500:100"}, "LOW:HIGH"),
        ({"preferred_batch_sizes": ["some"]}, "unknown"),
        ({"dynamic_batching": "maybe"}, "must be true, false"),
    ],
)
def test_from_mapping_names_the_bad_key(data, match):
    with pytest.raises(InputError, match=match):
        TuneSpace.from_mapping(data, source="sweep.toml [tune]")


@pytest.mark.parametrize(("text", "ms"), [("20ms", 20.0), ("0.5s", 500.0), ("800us", 0.8), ("15", 15.0)])
def test_latency_budget_units(text, ms):
    assert parse_latency_ms(text) == pytest.approx(ms)


@pytest.mark.parametrize("text", ["20 parsecs", "-3ms", "ms", "0"])
def test_bad_latency_budget_is_a_usage_error(text):
    with pytest.raises(UsageError):
        parse_latency_ms(text)


def test_concurrency_doubles_up_to_the_cap():
    assert [int(lv.value) for lv in concurrency_levels(24)] == [1, 2, 4, 8, 16, 24]
    assert [int(lv.value) for lv in concurrency_levels(1)] == [1]


def _level(c: int, tput: float, p99_ms: float, errors: int = 0) -> LevelResult:
    lat = LatencySummary("service", 100, 1, p99_ms * 1e3, 1, 0, 1, 1, 1, p99_ms * 1e3, p99_ms * 1e3, "")
    return LevelResult(
        LoadLevel("concurrency", c), 1, True, Precision(None, None), 1, 100, 100, tput, tput, tput, errors, {},
        0, 0, None, lat, None, (),
    )  # fmt: skip


def _run(*levels: LevelResult) -> RunRecord:
    return RunRecord("0", "now", (), {}, {}, {}, {}, tuple(levels))


def test_judge_takes_the_best_level_within_budget():
    v = judge_trial(_run(_level(1, 100, 5), _level(2, 180, 9), _level(4, 260, 25)), latency_budget_ms=20, percentile=99)
    assert v.feasible_load == LoadLevel("concurrency", 2)
    assert v.throughput_infer_per_s == 180
    assert not v.lowest_over_budget


def test_judge_ignores_levels_with_errors_and_flags_hopeless_trials():
    v = judge_trial(_run(_level(1, 100, 5), _level(2, 300, 6, errors=3)), latency_budget_ms=20, percentile=99)
    assert v.throughput_infer_per_s == 100
    hopeless = judge_trial(_run(_level(1, 50, 30)), latency_budget_ms=20, percentile=99)
    assert hopeless.feasible_load is None and hopeless.lowest_over_budget


def test_fixture_models_all_resolve_or_refuse_clearly(tmp_path: Path):
    for model in sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()):
        shutil.copytree(FIXTURES / model, tmp_path / model, ignore=shutil.ignore_patterns("__pycache__"))
        cfg = read_config(tmp_path / model / "config.pbtxt")
        try:
            rs = resolve(TuneSpace(), cfg, tmp_path / model, latency_budget_us=20_000)
        except ConfigError as err:
            assert "ensemble" in str(err) and err.exit_code == 3
            continue
        assert rs.dimension("instance_count") is not None
        # The original's own parameters are always a point of the space (trial 0 fits).
        for d in rs.dimensions:
            if not d.is_range and d.name in rs.original_params:
                assert rs.original_params[d.name] in d.choices


def test_resume_without_a_study_is_a_usage_error_and_leaves_nothing_behind(tmp_path: Path):
    from perfkit.server.base import Endpoints, Server
    from perfkit.tuner import tune

    repo = tmp_path / "models"
    shutil.copytree(FIXTURES / "batcher", repo / "batcher", ignore=shutil.ignore_patterns("__pycache__"))
    unreachable = Server(Endpoints("127.0.0.1", 1, None, None))
    settings = TuneSettings(model="batcher", budget=Budget(20), trials=2, output_dir=tmp_path / "out", resume=True)
    with pytest.raises(UsageError, match="--resume: no study"):
        tune(unreachable, settings, TuneSpace(), model_repository=repo, echo=lambda s: None)
    assert not (tmp_path / "out").exists()


# -- space and validity (issue 10) ------------------------------------------------------------
def _cfg_space(text: str, tmp_path: Path, space: TuneSpace | None = None, **kw):
    model_dir = tmp_path / "m"
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    cfg = parse_config(text)
    return cfg, resolve(space or TuneSpace(), cfg, model_dir, latency_budget_us=20_000, **kw)


def test_applying_an_instance_kind_writes_the_enum_and_drops_gpus_for_cpu(tmp_path: Path):
    cfg, rs = _cfg_space(
        'name: "m" backend: "python" max_batch_size: 4 instance_group [{ count: 1 kind: KIND_GPU gpus: [0] }]',
        tmp_path,
        gpus=1,
    )
    assert rs.dimension("instance_kind").choices == ("gpu", "cpu")
    cpu = apply_params(cfg, {"instance_kind": "cpu"}, rs)
    assert "KIND_CPU" in format_config(cpu) and list(cpu.instance_group[0].gpus) == []
    gpu = apply_params(cpu, {"instance_kind": "gpu"}, rs)
    assert "KIND_GPU" in format_config(gpu)
    assert extract_params(gpu, backend="python")["instance_kind"] == "gpu"


def test_kind_model_is_not_auto_and_is_never_searched(tmp_path: Path):
    _, rs = _cfg_space('name: "m" backend: "vllm_like" instance_group [{ kind: KIND_MODEL }]', tmp_path, gpus=2)
    assert rs.original_params["instance_kind"] == "model"
    assert rs.dimension("instance_kind") is None and "KIND_MODEL" in rs.reasons["instance_kind"]


def test_gpu_instance_counts_are_bounded_per_gpu_and_cpu_counts_by_cores(tmp_path: Path):
    text = 'name: "m" backend: "onnxruntime" max_batch_size: 4 instance_group [{ count: 1 kind: KIND_GPU }]'
    _, rs = _cfg_space(text, tmp_path, TuneSpace(instance_kinds=("gpu",)), gpus=2, cpu_cores=32)
    assert rs.dimension("instance_count").choices == (1, 2, 3, 4)  # count is per GPU in Triton
    text_cpu = 'name: "m" backend: "openvino" max_batch_size: 4 instance_group [{ count: 1 kind: KIND_CPU }]'
    _, rs_cpu = _cfg_space(text_cpu, tmp_path, cpu_cores=16)
    assert max(rs_cpu.dimension("instance_count").choices) == 16


def test_max_batch_size_limit_and_warmup_floor(tmp_path: Path):
    text = (
        'name: "m" backend: "onnxruntime" max_batch_size: 16 model_warmup [{ name: "w" batch_size: 8 inputs {'
        ' key: "X" value: { data_type: TYPE_FP32 dims: [4] zero_data: true } } }]'
    )
    cfg, rs = _cfg_space(text, tmp_path, TuneSpace(max_batch_size_limit=64))
    assert rs.dimension("max_batch_size").choices == (8, 16, 32, 64)  # none below the warmup's 8
    assert "warmup" in rs.reasons["max_batch_size"]
    with pytest.raises(CandidateRejectedError, match="warmup-batch-le-mbs"):
        apply_params(cfg, {"max_batch_size": 4}, rs)


def test_preferred_sizes_are_recorded_as_a_searched_choice_for_small_batches(tmp_path: Path):
    cfg, rs = _cfg_space('name: "m" backend: "python" max_batch_size: 8 dynamic_batching { }', tmp_path)
    for mbs in (2, 4):
        new = apply_params(cfg, {"max_batch_size": mbs, "dynamic_batching": True, "preferred_batch_sizes": "pow2"}, rs)
        assert (
            extract_params(new, backend="python")["preferred_batch_sizes"]
            in rs.dimension("preferred_batch_sizes").choices
        )
    one = apply_params(cfg, {"max_batch_size": 1, "max_queue_delay_us": 900, "preferred_batch_sizes": "pow2"}, rs)
    assert one.dynamic_batching.max_queue_delay_microseconds == 0  # nothing to wait for at batch 1
    assert list(one.dynamic_batching.preferred_batch_size) == []


def test_vllm_backend_models_are_refused_with_the_reason(tmp_path: Path):
    # The vLLM backend makes every model decoupled, and its throughput lives in vLLM's engine args.
    with pytest.raises(ConfigError, match="engine arguments") as info:
        _cfg_space('name: "m" backend: "vllm" instance_group [{ kind: KIND_MODEL }]', tmp_path)
    assert info.value.exit_code == 3


def test_oldest_sequence_batcher_keeps_max_batch_size_above_its_preferred_batch(tmp_path: Path):
    text = 'name: "m" backend: "python" max_batch_size: 8 sequence_batching { oldest { preferred_batch_size: [4] } }'
    _, rs = _cfg_space(text, tmp_path)
    assert rs.refused is None and not rs.unmeasurable
    assert min(rs.dimension("max_batch_size").choices) == 4  # the oldest batcher's preferred 4 must fit


def test_onnxruntime_precision_bf16_and_int8_only_with_calibration(tmp_path: Path):
    text = 'name: "m" backend: "onnxruntime" max_batch_size: 4'
    cfg, rs = _cfg_space(text, tmp_path, TuneSpace(precisions=("fp16", "bf16", "int8")), gpus=1)
    assert rs.dimension("precision").choices == ("fp16", "bf16", "none")
    assert any("int8" in n for n in rs.notes)
    bf16 = apply_params(cfg, {"precision": "bf16", "instance_kind": "gpu"}, rs)
    acc = bf16.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert acc.name == "tensorrt" and acc.parameters["precision_mode"] == "BF16"
    # On CPU instances the accelerator is ignored by ONNX Runtime: it is not written.
    on_cpu = apply_params(cfg, {"precision": "fp16", "instance_kind": "cpu"}, rs)
    assert not on_cpu.HasField("optimization")


def test_tensorflow_precision_is_tf_trt_fp32_fp16_or_amp_never_both(tmp_path: Path):
    text = (
        'name: "m" platform: "tensorflow_savedmodel" max_batch_size: 4 optimization { execution_accelerators {'
        ' gpu_execution_accelerator [{ name: "auto_mixed_precision" }] } }'
    )
    cfg, rs = _cfg_space(text, tmp_path, gpus=1)
    assert rs.original_params["precision"] == "amp"
    assert set(rs.dimension("precision").choices) == {"none", "fp32", "fp16", "amp"}
    fp16 = apply_params(cfg, {"precision": "fp16"}, rs)
    names = [a.name for a in fp16.optimization.execution_accelerators.gpu_execution_accelerator]
    assert names == ["tensorrt"]
    with pytest.raises(UsageError, match="int8"):
        _cfg_space(text, tmp_path, TuneSpace(precisions=("int8",)), gpus=1)


def test_pytorch_without_a_declared_parameter_has_no_precision_dimension(tmp_path: Path):
    _, rs = _cfg_space('name: "m" platform: "pytorch_libtorch" max_batch_size: 4', tmp_path, gpus=1)
    assert rs.dimension("precision") is None
    assert "declare a parameter" in rs.reasons["precision"]


def test_kind_gpu_model_is_refused_when_planning_without_a_gpu(tmp_path: Path):
    text = 'name: "m" backend: "python" max_batch_size: 4 instance_group [{ kind: KIND_GPU }]'
    with pytest.raises(ConfigError, match="no GPUs are available"):
        _cfg_space(text, tmp_path, gpus=0)


# -- perfkit tune --dry-run ------------------------------------------------------------------------
def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_dry_run_prints_the_space_and_writes_validated_candidates_without_touching_the_repo(
    tmp_path: Path, capsys: pytest.CaptureFixture
):
    from perfkit.cli import main

    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES, repo, ignore=shutil.ignore_patterns("__pycache__"))
    before = _snapshot(repo)
    out_dir = tmp_path / "plan"
    rc = main(
        ["tune", "-m", "batcher", "--model-repository", str(repo), "--latency-budget", "20ms", "--dry-run"]
        + ["--assume-gpu", "--max-batch-size-limit", "32", "-o", str(out_dir)]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert _snapshot(repo) == before
    assert "8,16,32 " in out and "instance_kind" in out and "python runs on both" in out
    assert "ensemble pipeline batches up to 8" in out  # the repository guard, shown
    written = sorted((out_dir / "candidates").glob("*.pbtxt"))
    assert len(written) > 20 and written[0].name == "000.pbtxt"
    assert written[0].read_bytes() == before["batcher/config.pbtxt"]  # candidate 0 is the user's file
    for path in written:
        cfg = parse_config(path.read_text())
        assert cfg.max_batch_size <= 32
        assert path.read_text().startswith("#")  # the licence header is kept
    kinds = {parse_config(p.read_text()).instance_group[0].kind for p in written}
    assert kinds == {1, 2}  # KIND_GPU and KIND_CPU candidates, written as the enum


def test_dry_run_refuses_what_it_cannot_tune_with_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture):
    from perfkit.cli import main

    (tmp_path / "llm" / "1").mkdir(parents=True)
    (tmp_path / "llm" / "config.pbtxt").write_text('name: "llm" backend: "vllm" max_batch_size: 0\n')
    rc = main(["tune", "-m", "llm", "--model-repository", str(tmp_path), "--latency-budget", "20ms", "--dry-run"])
    captured = capsys.readouterr()
    assert rc == 3
    assert "perfkit: error: model 'llm' is served by the vllm backend" in captured.err
    assert "not tunable" in captured.out
    # An ensemble is planned as a pipeline: its steps' joint space (tests/unit/tuner/test_pipeline_plan.py).
    rc = main(["tune", "-m", "pipeline", "--model-repository", str(FIXTURES), "--latency-budget", "20ms", "--dry-run"])
    captured = capsys.readouterr()
    assert rc == 0 and "joint space" in captured.out
    assert main(["tune", "-m", "batcher", "--latency-budget", "20ms", "--dry-run"]) == 2  # no repository
    assert main(["tune", "-m", "batcher", "--latency-budget", "20ms", "--assume-gpu"]) == 2  # plan flag alone


def test_help_states_the_real_defaults():
    from click.testing import CliRunner

    from perfkit.cli import cli

    text = CliRunner().invoke(cli, ["tune", "--help"], terminal_width=200).output
    assert "default: none,pow2" in text and "all three" not in text
    assert "--dry-run" in text and "--assume-gpu" in text and "--max-batch-size-limit" in text
