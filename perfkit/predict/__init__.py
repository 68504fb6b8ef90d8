"""Predict what a config sustains from a calibrated model of the server, before measuring it.

A discrete-event simulator of Triton's dynamic batcher and instance scheduling (_sim), each
config's sustainable rate within a latency budget (_rate), and the calibration that fits the
service-time and contention models from Triton's own statistics (_calibrate); a decoupled
model's streams run through the same simulator, each holding its instance for the whole stream
(_stream). Pure: numpy, and numba for the simulator's event loop (_simloop), imported on the
first simulation only.
"""

from perfkit.predict._bls import BLS_REQUESTS
from perfkit.predict._cache import ResponseCache, lookup_us_from
from perfkit.predict._calibrate import (
    batch_points,
    calibration,
    contention,
    fit_service,
    host_bound,
    merge_points,
    scaling,
    service_model,
)
from perfkit.predict._closed import score_space_closed, sustainable_concurrency
from perfkit.predict._mix import (
    MemberFigures,
    MixMember,
    MixRate,
    fit_mix_contention,
    mix_rate,
    shared_device,
    simulate_mix,
)
from perfkit.predict._model import BatcherConfig, Contention, Load, Prediction, ServiceModel
from perfkit.predict._pipeline import (
    PIPELINE_REQUESTS,
    PipelinePrediction,
    PipelineRate,
    PipelineStep,
    StepFigures,
    pipeline_rate,
    score_pipelines,
    simulate_pipeline,
)
from perfkit.predict._rate import RateResult, ceiling_rps, score_space, sustainable_rate, trace_unit
from perfkit.predict._sim import simulate, unit_arrivals
from perfkit.predict._sim_cache import simulate_cached
from perfkit.predict._stream import StreamModel, StreamPrediction, end_to_end_budget_us, simulate_stream, stream_service

__all__ = [
    # the response cache: its hits answered before the queue (predict/_cache.py)
    "ResponseCache",
    "lookup_us_from",
    "simulate_cached",
    # the model of a server: a config, its service time and contention, a load
    "BatcherConfig",
    "Contention",
    "Load",
    "ServiceModel",
    # the calibration that fits them from Triton's statistics (the tuner's predicted search)
    "batch_points",
    "merge_points",
    "fit_service",
    "host_bound",
    "scaling",
    "calibration",
    "service_model",
    "contention",
    # one config: simulated, its ceiling, its sustainable rate; a space scored
    "Prediction",
    "RateResult",
    "simulate",
    "ceiling_rps",
    "sustainable_rate",
    "score_space",
    # the same under a closed loop: the highest concurrency within the budget, its throughput
    "sustainable_concurrency",
    "score_space_closed",
    "unit_arrivals",
    # a decoupled model's streams, each holding its instance (_stream)
    "StreamModel",
    "StreamPrediction",
    "stream_service",
    "simulate_stream",
    "end_to_end_budget_us",
    "trace_unit",
    # a pipeline of steps
    "PipelineStep",
    "StepFigures",
    "PipelinePrediction",
    "PipelineRate",
    "simulate_pipeline",
    "pipeline_rate",
    "score_pipelines",
    "PIPELINE_REQUESTS",
    # a BLS model and the models it calls: a pipeline given its fan-out (fanout=)
    "BLS_REQUESTS",
    # a traffic mix: several models on one shared device (_mix)
    "MixMember",
    "MemberFigures",
    "MixRate",
    "simulate_mix",
    "mix_rate",
    "fit_mix_contention",
    "shared_device",
]
