"""A traffic mix's predicted search, the parts that need no server: each model of the mix stood
alone for its calibration (its own budget, the mix's knobs), and what the calibration's line says
of each model and of the contention between them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from perfkit.records import Budget, Calibration
from perfkit.tuner import TuneSettings, TuneSpace
from perfkit.tuner._route import FileRoute
from perfkit.tuner._search._mix_calibrate import MixCalibrated, placed
from perfkit.tuner._subject_mix import MixSubject, mix_subject
from tests.conftest import copy_models


def test_each_model_of_a_mix_stands_alone_with_its_own_budget_and_the_mix_knobs(tmp_path: Path):
    repo = copy_models(tmp_path, ["batcher", "hungry"])
    budget = Budget(60.0, 95.0, per_model_ms=(("batcher", 60.0), ("hungry", 120.0)))
    settings = TuneSettings(model="batcher", budget=budget, mix=(("batcher", 3), ("hungry", 1)))
    space = TuneSpace(max_batch_sizes=(8,), instance_counts=(1, 2))
    subject = mix_subject(settings, space, repo, route=FileRoute())
    assert isinstance(subject, MixSubject) and subject.kind == "mix" and subject.weights == {"batcher": 3, "hungry": 1}
    hungry = subject.member("hungry")
    assert (
        hungry.kind == "model"
        and hungry.model == "hungry"
        and dict(hungry.paths) == {"hungry": subject.paths["hungry"]}
    )
    assert subject.member_budget("hungry") == Budget(120.0, 95.0)  # its own, at the mix's percentile
    # the knobs it is calibrated over are the mix's for that model, but for the rate limiter's
    # priority, which arbitrates between the models and does nothing to one alone
    step = subject.pipeline.step("hungry")
    between = [d.name for d in step.space.dimensions if d.name == "rate_limit_priority"]
    assert between == ["rate_limit_priority"]
    alone = [d.name for d in step.space.dimensions if d.name not in between]
    assert [d.name for d in hungry.space.dimensions] == alone


def test_the_calibrations_line_names_each_model_how_far_it_stretched_together_and_where_it_runs():
    def one(model: str, fixed_us: float, counts: tuple[int, ...] = (), shared: float = 0.0) -> Calibration:
        return Calibration(model, (), fixed_us, 100.0, 0.01, 0.02, shared_fraction=shared, duration_s=10.0,
                           instance_counts=counts, saturated_rps=(10.0, 12.0) if counts else ())  # fmt: skip

    # a's own instances share half of each execution (two instance counts measured); b's unmeasured,
    # c's two instance counts scaled fully (at most half of each execution shared, not none)
    steps = (one("a", 2e3, (1, 2), 0.5), one("b", 3e4), one("c", 1e3, (1, 2), 0.0))
    cal = Calibration("a", (), 0.0, 0.0, 0.01, 0.02, duration_s=25.0, steps=steps, shared_fraction=0.8)
    line = MixCalibrated(cal, 43.0, (2.3, 1.05, 1.2)).line()
    assert line.startswith("calibrated the mix's 3 models in 25 s:")
    assert (
        "\n  a: calibrated in 10 s: execution 2.00 ms" in line
        and "\n  b: calibrated in 10 s: execution 30.00 ms" in line
    )
    assert "together at 43 req/s their executions ran a x2.30, b x1.05, c x1.20 as long as alone" in line
    # the mix's figure scales each model's own shared fraction, its whole execution where unmeasured
    assert line.endswith("one device shared by the models (of each execution on it: a 40%, b 80%, c 80%)")
    placed_on = [(m.name, m.device, m.device_fraction) for m in placed(cal, ())]
    assert placed_on == [("a", 0, 0.4), ("b", 0, 0.8), ("c", 0, 0.8)]
    # no stretch together: each model on a device of its own, with its own instances' contention
    apart = dataclasses.replace(cal, shared_fraction=0.0)
    assert MixCalibrated(apart, 43.0, (1.0, 1.01, 1.0)).line().endswith("each model on a device of its own")
    assert [(m.device, m.device_fraction) for m in placed(apart, ())] == [(0, 0.5), (1, 0.0), (2, 0.0)]
