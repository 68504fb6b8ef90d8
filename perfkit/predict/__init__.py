"""Predict what a config sustains from a calibrated model of the server, before measuring it.

A discrete-event simulator of Triton's dynamic batcher and instance scheduling (_sim), each
config's sustainable rate within a latency budget (_rate), and the calibration that fits the
service-time and contention models from Triton's own statistics (_calibrate). Pure: numpy, and
numba for the simulator's event loop (_simloop), imported on the first simulation only.
"""

from perfkit.predict._calibrate import (
    batch_points,
    calibration,
    contention,
    execution_stretch,
    fit_host_us,
    fit_service,
    fit_shared_fraction,
    host_bound,
    instance_busy,
    merge_points,
    scaling,
    service_model,
)
from perfkit.predict._model import BatcherConfig, Contention, Load, Prediction, ServiceModel
from perfkit.predict._pipeline import (
    PipelinePrediction,
    PipelineRate,
    PipelineStep,
    StepFigures,
    pipeline_rate,
    score_pipelines,
    simulate_pipeline,
    step_departures,
)
from perfkit.predict._rate import RateResult, behaviour, capacity_rps, score_space, sustainable_rate
from perfkit.predict._sim import departures, simulate, simulate_within, through_request_path, unit_arrivals

__all__ = [
    "batch_points",
    "calibration",
    "contention",
    "fit_service",
    "execution_stretch",
    "fit_host_us",
    "host_bound",
    "fit_shared_fraction",
    "instance_busy",
    "merge_points",
    "scaling",
    "service_model",
    "BatcherConfig",
    "Contention",
    "Load",
    "Prediction",
    "PipelinePrediction",
    "PipelineRate",
    "PipelineStep",
    "StepFigures",
    "pipeline_rate",
    "score_pipelines",
    "simulate_pipeline",
    "step_departures",
    "RateResult",
    "ServiceModel",
    "behaviour",
    "capacity_rps",
    "departures",
    "score_space",
    "simulate",
    "simulate_within",
    "sustainable_rate",
    "through_request_path",
    "unit_arrivals",
]
