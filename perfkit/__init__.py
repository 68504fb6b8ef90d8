"""perfkit: measure, tune and gate NVIDIA Triton Inference Server deployments."""

__version__ = "0.1.0"
