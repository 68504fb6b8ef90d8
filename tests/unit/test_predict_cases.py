"""benchmarks/predict_cases.py without a server: each case's flags (--quick's replace their own
values), the grid's names (batching off names no max_batch_size: one config), the figures and table
of a saved run, and the mix's levels judged per model against its own budget."""

from __future__ import annotations

import pytest

from benchmarks import _case_levels
from benchmarks._case_grid import label
from benchmarks.predict_cases import CASES, figures, flags, markdown

ISSUE_52_CASES = {"batcher", "hungry", "stages", "mix", "closed", "stream", "onnx_mlp"}


def test_every_case_of_issue_52_item_8_is_there_and_quick_replaces_only_its_own_flags() -> None:
    assert set(CASES) == ISSUE_52_CASES
    hungry = flags(CASES["hungry"], quick=True)
    assert hungry[hungry.index("--max-batch-sizes") + 1] == "64"
    assert hungry[hungry.index("--precisions") + 1] == "fp32,fp16"  # precision stays in the space
    assert flags(CASES["hungry"], quick=False) == list(CASES["hungry"].args)
    assert "--load" in flags(CASES["closed"], True) and "concurrency" in flags(CASES["closed"], True)
    assert "ttft:50ms" in flags(CASES["stream"], True)


def test_a_config_with_batching_off_is_named_without_its_unused_max_batch_size() -> None:
    assert label({"max_batch_size": 8, "dynamic_batching": False, "instance_count": 2}) == label(
        {"max_batch_size": 64, "dynamic_batching": False, "instance_count": 2}
    )
    assert label({"max_batch_size": 8, "dynamic_batching": True}) != label(
        {"max_batch_size": 64, "dynamic_batching": True}
    )
    joint = label(
        {"stage_infer.max_batch_size": 8, "stage_infer.dynamic_batching": False, "stage_post.max_batch_size": 8}
    )
    assert "stage_infer.mbs" not in joint and "stage_post.mbs=8" in joint


def test_the_figures_of_a_saved_case_judge_the_pick_the_claim_and_whether_it_predicted() -> None:
    case = {"case": "hungry", "goal": "model", "load": "rate",
            "grid": {"a": 400.0, "b": 200.0}, "predicted": {"a": 440.0, "b": 150.0},
            "searches": {"auto": {"search": "predict", "why": "", "pick": "a", "claim_rps": 390.0,
                                  "remeasured_rps": 400.0, "trials": 3, "wall_s": 100.0}}}  # fmt: skip
    f = figures(case)
    assert f["predicted"] and f["pick_vs_grid_best"] == 1.0 and f["claim_vs_remeasured"] == pytest.approx(0.975)
    assert f["errors"]["n"] == 2 and f["errors"]["worst"] == pytest.approx(-0.25)
    assert all(f["goals"].values())
    measured = {**case, "searches": {"auto": {**case["searches"]["auto"], "search": "measure", "pick": "b"}}}
    g = figures(measured)
    assert not g["predicted"] and g["pick_vs_grid_best"] == 0.5 and not g["goals"]["pick"]
    fell = {**case, "searches": {"auto": {**case["searches"]["auto"], "fell_back": True}}}
    assert not figures(fell)["predicted"] and "predict, fell back to measuring" in markdown([fell])
    table = markdown([case, measured])
    assert "| hungry | predict" in table and "| hungry | measure" in table and "| a | 400 | 440 | +10% |" in table


def test_a_mix_level_holds_only_where_every_model_holds_its_own_budget(monkeypatch) -> None:
    outs = iter(
        [[("batcher", 300.0, 100.0), ("hungry", 100.0, 260.0)], [("batcher", 300.0, 140.0), ("hungry", 100.0, 200.0)]]
    )

    def run_all(cmds: list[list[str]], timeout_s: float) -> list[str]:
        return [f"Throughput: {t} infer/sec\np99 latency: {p * 1e3:.0f} usec" for _, t, p in next(outs)]

    monkeypatch.setattr(_case_levels, "_run_all", run_all)
    monkeypatch.setattr(_case_levels, "wait_idle", lambda server, model: None)
    monkeypatch.setattr(_case_levels, "_cmd", lambda server, model, window, extra: [model])
    measure = _case_levels.mix_measure(None, {"batcher": 3, "hungry": 1}, {"batcher": 150.0, "hungry": 250.0}, 1.0)  # type: ignore[arg-type]  # the server is never reached: _cmd and wait_idle are replaced
    _, share = measure(400.0)
    assert share == pytest.approx(260 / 250 * _case_levels.SHARE_BUDGET)  # hungry over its own 250 ms
    _, share = measure(400.0)
    assert share == pytest.approx(140 / 150 * _case_levels.SHARE_BUDGET)  # the worst share: batcher's 140 of 150


def test_the_second_judges_verdict_is_listed_beside_the_table_only_for_cases_it_judged() -> None:
    auto = {"search": "predict", "why": "", "pick": "a", "claim_rps": 390.0, "remeasured_rps": 400.0}
    says = "claim 390 req/s: LoadGen VALID at 351 req/s"
    judged = {"case": "batcher", "goal": "model", "load": "rate", "grid": {"a": 400.0}, "predicted": {"a": 440.0},
              "searches": {"auto": {**auto, "judges": {"says": says}}}}  # fmt: skip
    plain = {**judged, "case": "hungry", "searches": {"auto": auto}}
    assert "- batcher: claim 390 req/s: LoadGen VALID at 351 req/s" in markdown([judged, plain])
    assert "- hungry:" not in markdown([judged, plain]) and "MLPerf LoadGen" not in markdown([plain])
