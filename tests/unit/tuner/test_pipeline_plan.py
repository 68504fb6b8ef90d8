"""Pipelines planned without a server: the repository guard (no candidate stops another model
loading), the joint space of an ensemble's or a BLS model's steps, steps held fixed with a
reason, cross-pipeline rules, `--dry-run`, and installing a set of configs all or nothing."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from perfkit.cli import main
from perfkit.errors import CandidateRejectedError, ConfigError
from perfkit.server.modelconfig import parse_config, read_config
from perfkit.tuner import TuneSpace, _pipeline, apply_params, resolve
from perfkit.tuner._preview import candidate_lines
from perfkit.tuner._repo_guard import RepoGuard, apply_all, broken_by, refuse_if_breaks
from tests.conftest import copy_models

BUDGET_US = 100_000


def _repo(tmp_path: Path, names: list[str]) -> Path:
    return copy_models(tmp_path, names)


def test_batcher_never_recommends_a_batch_size_that_breaks_the_pipeline_ensemble(tmp_path: Path):
    repo = _repo(tmp_path, ["batcher", "preprocess", "pipeline"])
    cfg = read_config(repo / "batcher" / "config.pbtxt")
    rs = resolve(TuneSpace(), cfg, repo / "batcher", latency_budget_us=20_000)
    assert min(rs.dimension("max_batch_size").choices) == 8  # `pipeline` batches up to 8
    # Even asked for explicitly, a smaller one is refused before it reaches a server...
    rs4 = resolve(TuneSpace(max_batch_sizes=(4, 8)), cfg, repo / "batcher", latency_budget_us=20_000)
    with pytest.raises(CandidateRejectedError, match="ensemble pipeline allows maximum batch size 8"):
        apply_params(cfg, {"max_batch_size": 4}, rs4)
    # ...and --apply of such a config is refused with the ensemble named, nothing written.
    bad = (repo / "batcher" / "config.pbtxt").read_text().replace("max_batch_size: 8", "max_batch_size: 4")
    with pytest.raises(ConfigError, match="pipeline") as info:
        refuse_if_breaks("batcher", bad, repo)
    assert info.value.exit_code == 3 and "ensemble_utils.cc" in info.value.message
    # Alone in its repository, batcher may go below 8 again.
    alone = _repo(tmp_path / "alone", ["batcher"])
    rs_alone = resolve(TuneSpace(), cfg, alone / "batcher", latency_budget_us=20_000)
    assert min(rs_alone.dimension("max_batch_size").choices) == 1


def test_cross_pipeline_rules_reproduce_tritons_messages(tmp_path: Path):
    repo = _repo(tmp_path, ["batcher", "preprocess", "pipeline"])
    batcher = read_config(repo / "batcher" / "config.pbtxt")
    small = parse_config(str(batcher).replace("max_batch_size: 8", "max_batch_size: 2"))
    [b] = broken_by({"batcher": small}, repo)
    assert b.model == "pipeline" and "which only allows maximum batch size to be 2" in b.reason
    nobatch = parse_config(str(batcher).replace("max_batch_size: 8", "max_batch_size: 0"))
    # A batching ensemble may hold a non-batching step while the shapes agree (ensemble_utils.cc)...
    assert broken_by({"batcher": nobatch}, repo) == []
    wider = parse_config(str(batcher).replace("dims: 16", "dims: 32", 1))
    [shape] = broken_by({"batcher": wider}, repo)
    assert shape.reason.endswith("inconsistent shape: [-1, 16] is inferred from model preprocess while [-1, 32] from"
                                 " model batcher")  # fmt: skip
    retyped = parse_config(str(batcher).replace("TYPE_FP32", "TYPE_FP16", 1))
    assert "inconsistent data type" in broken_by({"batcher": retyped}, repo)[0].reason
    assert broken_by({"batcher": batcher}, repo) == []


def test_three_step_ensemble_plans_a_joint_space_of_every_step(tmp_path: Path, capsys: pytest.CaptureFixture):
    repo = _repo(tmp_path, ["stages", "stage_decode", "stage_infer", "stage_post"])
    before = {p: p.read_bytes() for p in repo.rglob("config.pbtxt")}
    p = _pipeline.build(TuneSpace(), repo, "stages", latency_budget_us=BUDGET_US)
    assert [s.model for s in p.steps] == ["stage_decode", "stage_infer", "stage_post"]
    names = {d.name for d in p.space.dimensions}
    assert {"stage_decode.dynamic_batching", "stage_infer.dynamic_batching", "stage_post.instance_count"} <= names
    # The end-to-end budget is shared: no step may queue for more than its share.
    delay = p.space.dimension("stage_infer.max_queue_delay_us")
    assert delay is not None and delay.high is not None and delay.high <= BUDGET_US / 3
    both = {"stage_decode.dynamic_batching": True, "stage_infer.dynamic_batching": True}
    cand = _pipeline.candidate(p, both)
    assert set(cand.texts) == {"stage_decode", "stage_infer", "stage_post"}
    assert cand.configs["stage_infer"].HasField("dynamic_batching")
    assert cand.texts["stage_post"] == p.step("stage_post").original_text  # untouched steps keep their bytes
    assert _pipeline.unbundle(cand.text) == cand.texts
    rc = main(["tune", "-m", "stages", "--model-repository", str(repo), "--latency-budget", "100ms", "--dry-run",
               "-o", str(tmp_path / "plan")])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    for step in ("stage_decode", "stage_infer", "stage_post"):
        assert f"---- step '{step}'" in out
    assert "joint space" in out and "joint candidate configs" in out
    assert "  000  original" in out and "  001  stage_" in out  # the candidate list (one lister for both kinds)
    assert (tmp_path / "plan" / "candidates" / "001" / "stage_infer" / "config.pbtxt").is_file()
    assert {p: p.read_bytes() for p in repo.rglob("config.pbtxt")} == before  # the repository is never touched


def _write(repo: Path, name: str, text: str) -> None:
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    (repo / name / "config.pbtxt").write_text(text)


_IO = (
    'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [16] }]'
    ' output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [16] }]'
)


def _ens(name: str, steps: list[str], mbs: int = 8) -> str:
    chain = ""
    for i, s in enumerate(steps):
        src = "INPUT0" if i == 0 else f"t{i}"
        dst = "OUTPUT0" if i == len(steps) - 1 else f"t{i + 1}"
        chain += f'{{ model_name: "{s}" model_version: -1 input_map {{ key: "INPUT0" value: "{src}" }}'
        chain += f' output_map {{ key: "OUTPUT0" value: "{dst}" }} }}' + ("," if i < len(steps) - 1 else "")
    return f'name: "{name}" platform: "ensemble" max_batch_size: {mbs} {_IO} ensemble_scheduling {{ step [{chain}] }}'


def test_nested_shared_and_untunable_steps_are_held_with_a_reason(tmp_path: Path, capsys: pytest.CaptureFixture):
    repo = _repo(tmp_path, ["stage_decode", "stage_infer", "stage_post"])
    _write(repo, "inner", _ens("inner", ["stage_infer", "stage_post"]))
    _write(repo, "outer", _ens("outer", ["stage_decode", "inner"]))
    _write(repo, "llm", f'name: "llm" backend: "vllm" max_batch_size: 0 {_IO}')
    _write(repo, "with_llm", _ens("with_llm", ["stage_decode", "llm"], mbs=0))
    _write(repo, "other", _ens("other", ["stage_post"]))
    p = _pipeline.build(TuneSpace(), repo, "outer", latency_budget_us=BUDGET_US)
    assert p.nested == ("inner",)
    assert [s.model for s in p.steps] == ["stage_decode", "stage_infer", "stage_post"]
    assert "also a step of ensemble other" in (p.step("stage_post").fixed or "")
    assert "also a step of ensemble with_llm" in (p.step("stage_decode").fixed or "")
    assert p.step("stage_infer").searched and p.refused is None
    assert any("nested ensemble 'inner'" in n for n in p.notes)
    q = _pipeline.build(TuneSpace(), repo, "with_llm", latency_budget_us=BUDGET_US)
    assert "vllm" in (q.step("llm").fixed or "")
    assert "also a step of ensemble outer" in (q.step("stage_decode").fixed or "")
    rc = main(["tune", "-m", "with_llm", "--model-repository", str(repo), "--latency-budget", "1s", "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 3 and "no step of 'with_llm' can be tuned" in err
    _write(repo, "loop", _ens("loop", ["loop"]))
    assert main(["tune", "-m", "loop", "--model-repository", str(repo), "--latency-budget", "1s", "--dry-run"]) == 3
    assert "cycle" in capsys.readouterr().err


def test_bls_pipeline_searches_the_bls_model_and_its_composing_models(tmp_path: Path, capsys: pytest.CaptureFixture):
    repo = _repo(tmp_path, ["bls_stages", "stage_decode", "stage_infer"])
    p = _pipeline.build(TuneSpace(), repo, "bls_stages", composing=("stage_decode", "stage_infer"),
                        latency_budget_us=BUDGET_US)  # fmt: skip
    assert p.kind == "bls" and [s.model for s in p.searched_steps] == ["bls_stages", "stage_decode", "stage_infer"]
    rc = main(["tune", "-m", "bls_stages", "--composing-models", "stage_decode,stage_infer", "--model-repository",
               str(repo), "--latency-budget", "100ms", "--dry-run"])  # fmt: skip
    assert rc == 0 and "BLS model" in capsys.readouterr().out
    assert main(["tune", "-m", "bls_stages", "--model-repository", str(repo), "--latency-budget", "100ms",
                 "--composing-models", "nope", "--dry-run"]) == 3  # fmt: skip
    assert "'nope', which is not in the model repository" in capsys.readouterr().err


def test_repo_guard_restores_every_file_byte_for_byte_on_any_ending(tmp_path: Path):
    repo = _repo(tmp_path, ["stage_decode", "stage_infer", "stage_post"])
    paths = {m: repo / m / "config.pbtxt" for m in ("stage_decode", "stage_infer", "stage_post")}
    before = {m: p.read_bytes() for m, p in paths.items()}
    for ending in (RuntimeError("boom"), KeyboardInterrupt()):
        with pytest.raises(type(ending)), RepoGuard(paths):
            for p in paths.values():
                p.write_text("max_batch_size: 1\n")
            raise ending
        assert {m: p.read_bytes() for m, p in paths.items()} == before
    # The guard turns SIGTERM into Ctrl-C only where nobody else handles it (a plain process); a
    # library imported earlier in this process (Ray) may have installed its own: start from none.
    outer = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with pytest.raises(KeyboardInterrupt), RepoGuard(paths):  # SIGTERM ends the block like Ctrl-C
            paths["stage_infer"].write_text("# half done\n")
            signal.raise_signal(signal.SIGTERM)
        assert {m: p.read_bytes() for m, p in paths.items()} == before
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, outer)


def test_apply_all_installs_the_whole_set_or_nothing(tmp_path: Path):
    repo = _repo(tmp_path, ["batcher", "preprocess", "pipeline"])
    paths = {m: repo / m / "config.pbtxt" for m in ("batcher", "preprocess")}
    before = {m: p.read_bytes() for m, p in paths.items()}
    good = {m: (p, p.read_text().replace("max_batch_size: 8", "max_batch_size: 16")) for m, p in paths.items()}
    bad = dict(good, batcher=(paths["batcher"], paths["batcher"].read_text().replace("size: 8", "size: 2")))
    with pytest.raises(ConfigError, match="--apply refused"):
        apply_all(bad, repo)
    assert {m: p.read_bytes() for m, p in paths.items()} == before
    # A write failing half-way puts back the files already written.
    shutil.rmtree(repo / "preprocess")
    (repo / "preprocess").mkdir()
    (repo / "preprocess" / "config.pbtxt").mkdir()  # a folder where the file should be: the write fails
    with pytest.raises((ConfigError, OSError)):
        apply_all(good, repo)
    assert paths["batcher"].read_bytes() == before["batcher"]


def test_candidate_lines_cap_the_list_and_the_rejections():
    rows = [(0, True, {}), (1, False, {"max_batch_size": 8, "dynamic_batching": True}), (2, False, {"x": 1})]
    rejected = [({"max_batch_size": 0}, "no batching"), ({"max_batch_size": 1}, "too small")]
    out = candidate_lines(rows, rejected, show_candidates=2, show_rejected=1)
    assert out == [
        "  000  original",
        "  001  max_batch_size=8 dynamic_batching=on",
        "  ... 1 more (write them all with -o DIR)",
        "  rejected {'max_batch_size': 0}: no batching",
    ]
