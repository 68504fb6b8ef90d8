"""--search auto, the default (tuner/_search/_kind.py): the predicted search where it applies (one
model or an ensemble, open-loop rates, a latency budget ranked by the rate, the knobs the simulator
tells apart), else the measured search with the reason said; --search measure/predict as given."""

from __future__ import annotations

import dataclasses

import pytest

from perfkit.errors import InputError
from perfkit.records import Budget
from perfkit.tuner import TuneSettings
from perfkit.tuner._search._kind import choose_search

BATCHING = ["max_batch_size", "dynamic_batching", "max_queue_delay_us", "preferred_batch_sizes", "instance_count"]
AUTO = TuneSettings(model="m", budget=Budget(20.0, 99.0))


def _choose(
    s: TuneSettings = AUTO, *, subject="model", open_loop=True, load_mode="rate", knobs=BATCHING, streaming=False
):
    return choose_search(s, subject=subject, open_loop=open_loop, load_mode=load_mode, knobs=knobs, streaming=streaming)


def test_auto_is_the_default_and_predicts_one_model_an_ensemble_or_a_bls_model_under_open_loop_rates():
    assert AUTO.search == "auto"
    assert TuneSettings.from_mapping("m", {"latency_budget": "20ms", "trials": 5}).search == "auto"
    model = _choose()
    assert (model.kind, model.why_measured) == ("predict", None)
    assert model.line().lstrip().startswith("--search auto: predicting")
    ensemble = _choose(subject="ensemble", knobs=[f"{step}.{k}" for step in ("pre", "infer") for k in BATCHING])
    assert ensemble.kind == "predict"
    # a BLS model's calls are read from the server's statistics when its study is seeded
    bls = _choose(subject="bls", knobs=[f"{step}.{k}" for step in ("bls", "infer") for k in BATCHING])
    assert (bls.kind, bls.why_measured) == ("predict", None)
    mix = _choose(subject="mix", knobs=[f"{m}.{k}" for m in ("a", "b") for k in BATCHING])
    assert mix.kind == "predict"


@pytest.mark.parametrize(
    ("subject", "open_loop", "load_mode", "said"),
    [
        ("mix", False, "concurrency", "closed-loop"),
        ("bls", False, "concurrency", "closed-loop"),
        ("mix", True, "trace", "trace"),
        ("ensemble", True, "trace", "trace"),
        ("ensemble", False, "concurrency", "closed-loop"),
    ],
)
def test_auto_measures_what_the_prediction_does_not_model_and_says_why(subject, open_loop, load_mode, said):
    c = _choose(subject=subject, open_loop=open_loop, load_mode=load_mode)
    assert c.kind == "measure" and said in (c.why_measured or "")
    # --search predict refuses these or falls back: no hint to force it
    assert c.line().lstrip().startswith("--search auto: measuring every trial:") and "--search predict" not in c.line()


def test_one_models_trace_is_predicted():
    c = _choose(open_loop=True, load_mode="trace")  # its arrivals replayed in the simulator
    assert (c.kind, c.why_measured) == ("predict", None)


def test_one_models_closed_loop_is_predicted():
    # its figure, the throughput at the highest concurrency within budget, is predicted
    # (tuner/_search/_predict_load.py); an ensemble's closed loop is not (above)
    c = _choose(open_loop=False, load_mode="concurrency")
    assert (c.kind, c.why_measured) == ("predict", None)
    # a decoupled model's closed loop (its default load) waits on streams: measured, said so
    streamed = choose_search(AUTO, subject="model", open_loop=False, load_mode="concurrency", knobs=BATCHING,
                             streaming=True)  # fmt: skip
    assert streamed.kind == "measure" and "decoupled" in (streamed.why_measured or "")


def test_a_ttft_budget_is_measured():
    c = _choose(TuneSettings(model="m", budget=Budget(300.0, 99.0, metric="ttft")))
    assert c.kind == "measure" and "TTFT" in (c.why_measured or "")


@pytest.mark.parametrize("metric", ["ttft", "itl", "latency"])
def test_a_decoupled_models_stream_budget_is_predicted_unless_its_space_batches_streams(metric):
    s = TuneSettings(model="m", budget=Budget(300.0, 99.0, metric=metric))
    assert _choose(s, knobs=["instance_count"], streaming=True).kind == "predict"
    batched = _choose(s, knobs=BATCHING, streaming=True)
    assert batched.kind == "measure" and "batched streams" in (batched.why_measured or "")
    assert "max_batch_size" in (batched.why_measured or "")
    # the streaming default, closed loop, is not predicted
    closed = _choose(s, knobs=["instance_count"], streaming=True, open_loop=False, load_mode="concurrency")
    assert closed.kind == "measure" and "closed-loop" in (closed.why_measured or "")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"objective": "goodput", "goodput_slo_ms": {"ttft": 200.0}}, "--objective goodput"),
        ({"sampler": "grid"}, "--sampler grid"),
        ({"trials": 1}, "--trials 1"),
        ({"objective": "pareto", "subject": "ensemble"}, "--objective pareto"),
        ({"resume": True, "subject": "ensemble"}, "resumed"),
    ],
)
def test_auto_measures_where_the_predicted_search_would_not_answer_as_asked_and_says_predict_forces_it(change, said):
    change = dict(change)
    subject = change.pop("subject", "model")
    c = _choose(dataclasses.replace(AUTO, **change), subject=subject)
    assert c.kind == "measure" and said in (c.why_measured or "")
    assert c.predict_anyway and "--search predict predicts anyway" in c.line()


@pytest.mark.parametrize("change", [{"objective": "pareto"}, {"objective": "per-instance"}, {"objective": "per-gpu"},
                                    {"resume": True}])  # fmt: skip
def test_one_models_objectives_and_a_resumed_study_are_predicted(change):
    # ranked by the objective over the predictions, a resumed study by what it has not measured
    # (tuner/_search/_predict_rank.py)
    c = _choose(dataclasses.replace(AUTO, **change))
    assert (c.kind, c.why_measured) == ("predict", None)


def test_a_space_that_searches_a_knob_the_simulator_does_not_model_is_measured_naming_it():
    model = _choose(knobs=[*BATCHING, "sequence_strategy"])
    assert model.kind == "measure" and "sequence_strategy" in (model.why_measured or "")
    step = _choose(subject="ensemble", knobs=["pre.max_batch_size", "infer.sequence_strategy", "infer.precision"])
    assert step.kind == "measure"
    assert step.why_measured == "the space searches sequence_strategy, which the prediction does not model"  # the knob


@pytest.mark.parametrize("given", ["measure", "predict"])
def test_an_explicit_search_is_taken_as_given_whatever_the_subject(given):
    s = dataclasses.replace(AUTO, search=given)
    for c in (_choose(s), _choose(s, subject="mix", open_loop=False, load_mode="concurrency", knobs=["precision"])):
        assert (c.kind, c.why_measured) == (given, None)


def test_a_tune_file_names_the_search_field_it_cannot_read():
    with pytest.raises(InputError, match="search.*'fast'.*auto, measure or predict"):
        TuneSettings.from_mapping("m", {"latency_budget": "20ms", "trials": 5, "search": "fast"})


def _subject(kind: str = "model", knobs=BATCHING):
    """A stand-in subject: its kind, its space's dimension names, and a BLS model's calls."""
    from types import SimpleNamespace

    steps = [SimpleNamespace(model=m) for m in ("bls", "pre", "infer")]
    space = SimpleNamespace(dimensions=[SimpleNamespace(name=k) for k in knobs])
    pipeline = SimpleNamespace(steps=steps) if kind != "model" else None
    return SimpleNamespace(kind=kind, model="m", space=space, pipeline=pipeline)


def test_choose_picks_the_search_once_and_the_search_says_which_and_why():
    from types import SimpleNamespace

    from perfkit.errors import UsageError
    from perfkit.tuner._search import ON_RAY, MeasuredSearch, PredictedSearch, choose

    rates = SimpleNamespace(open_loop=True, load_mode="rate", streaming=False)
    auto = choose(AUTO, _subject(), rates)
    assert isinstance(auto, PredictedSearch) and auto.kind == "predict" and auto.told is not None
    assert auto.reason.startswith("--search auto") and auto.told.line().lstrip().startswith("--search auto: predicting")
    asked = choose(dataclasses.replace(AUTO, search="measure"), _subject(), rates)
    assert (asked.kind, asked.reason, asked.told) == ("measure", "asked for with --search measure", None)
    assert choose(dataclasses.replace(AUTO, search="predict"), _subject(), rates).reason == (
        "asked for with --search predict"
    )
    # auto's reason for measuring is the one its line tells
    closed = SimpleNamespace(open_loop=False, load_mode="concurrency", streaming=False)
    mix = choose(AUTO, _subject("mix"), closed)
    assert (
        mix.kind == "measure"
        and mix.reason == "a traffic mix's prediction models open-loop arrival rates, not closed-loop clients"
    )
    assert mix.told is not None and mix.reason in mix.told.line()
    # a traffic mix in open loop: predicted, by the mix's own predictor (made when the study is seeded)
    mixed = choose(AUTO, _subject("mix"), rates)
    assert isinstance(mixed, PredictedSearch) and mixed.kind == "predict"
    # a study shared by --ray's workers: measured, the launcher having said so (nothing told here)
    ray = choose(AUTO, _subject(), rates, shared=True)
    assert (ray.kind, ray.reason, ray.told) == ("measure", ON_RAY, None)
    assert isinstance(ray, MeasuredSearch) and isinstance(mix, MeasuredSearch)
    assert choose(dataclasses.replace(AUTO, search="predict"), _subject(), rates, shared=True).kind == "predict"
    # a BLS model: predicted, by its own predictor (its calls read when the study is seeded)
    from perfkit.tuner._search._predict_bls import BlsPredictor

    for s in (AUTO, dataclasses.replace(AUTO, search="predict")):
        bls = choose(s, _subject("bls"), rates)
        assert isinstance(bls, PredictedSearch) and bls.kind == "predict" and bls.told_before is None
        assert bls._make is BlsPredictor
    with pytest.raises(UsageError, match="open-loop arrival rates only"):
        choose(dataclasses.replace(AUTO, search="predict"), _subject("bls"), SimpleNamespace(open_loop=False,
               load_mode="concurrency", streaming=False))  # fmt: skip


def test_one_models_precision_and_instance_kind_are_predicted_calibrated_per_value():
    # the calibration measures a curve at each value (tuner/_search/_value_calibrate.py)
    model = _choose(knobs=[*BATCHING, "precision", "instance_kind"])
    assert (model.kind, model.why_measured) == ("predict", None)
    assert model.line().lstrip().startswith("--search auto: predicting")
    # a knob still not modelled is still a reason, named alone
    mixed = _choose(knobs=[*BATCHING, "precision", "max_sequence_idle_us"])
    assert mixed.kind == "measure" and mixed.why_measured == (
        "the space searches max_sequence_idle_us, which the prediction does not model"
    )


def test_backend_threads_are_predicted_for_one_model_and_said_to_be_measured_per_value():
    one = _choose(knobs=[*BATCHING, "intra_op_threads", "ort_graph_level"])
    assert one.kind == "predict"
    assert one.measured_per_value == ("intra_op_threads", "ort_graph_level")
    assert "intra_op_threads, ort_graph_level: measured, not simulated" in one.line()
    assert "measured, not simulated" not in _choose().line()
    # an ensemble's steps are calibrated per value too: predicted, the step's knob said to be measured
    steps = _choose(subject="ensemble", knobs=["pre.instance_count", "infer.intra_op_threads"])
    assert (steps.kind, steps.measured_per_value) == ("predict", ("infer.intra_op_threads",))
    assert "infer.intra_op_threads: measured, not simulated" in steps.line()
    # a BLS model's called models are too (each on its own); a mix's models are not: measured, said precisely why
    called = _choose(subject="bls", knobs=["bls.instance_count", "infer.intra_op_threads"])
    assert (called.kind, called.measured_per_value) == ("predict", ("infer.intra_op_threads",))
    mixed = _choose(subject="mix", knobs=["a.instance_count", "a.intra_op_threads"])
    assert mixed.kind == "measure"
    assert "intra_op_threads, whose curves are measured at each value for one model or a pipeline's steps only" in (
        mixed.line()
    )
    assert "the traffic mix's models are not calibrated per value yet" in mixed.line()


@pytest.mark.parametrize("knobs", [["infer.precision"], ["infer.precision", "infer.instance_kind"]])
def test_a_pipeline_whose_steps_search_precision_or_instance_kind_is_predicted_calibrated_per_value(knobs):
    # each step calibrated at each value: through the ensemble, or a BLS model's called model on its
    # own (tuner/_search/_pipeline_calibrate.py, _bls_calibrate.py)
    for subject in ("ensemble", "bls"):
        steps = [f"{step}.{k}" for step in ("pre", "infer") for k in BATCHING]
        c = _choose(subject=subject, knobs=[*steps, *knobs])
        assert (c.kind, c.why_measured) == ("predict", None), subject
        assert c.line().lstrip().startswith("--search auto: predicting") and "measured, not simulated" not in c.line()
    # a mix's models are not yet: measured, said why, --search predict forces it
    other = _choose(subject="mix", knobs=["a.instance_count", *knobs])
    assert other.kind == "measure" and other.predict_anyway, other.line()
    assert "the traffic mix's models are not calibrated per value yet" in (other.why_measured or "")
