"""The registry of the search space's knobs. Each knob is one unit in its module: how it resolves
for a model (values and why), how it is read from a config (extract), how it is written (apply),
and the validator rules that guard it. A new knob is one Knob in one of these modules.
"""

from __future__ import annotations

from perfkit.tuner._space import (
    _knob_backend,
    _knob_batching,
    _knob_cache,
    _knob_instances,
    _knob_parameters,
    _knob_precision,
    _knob_queue,
    _knob_rate_limit,
    _knob_sequence,
)
from perfkit.tuner._space._knob_base import ABSENT, Ctx, ExtractInfo, Knob, pow2_sizes
from perfkit.tuner._space._knob_batching import pref_label, pref_sizes

# Order matters: max_batch_size before what must fit it; kind before count and precision.
KNOBS: tuple[Knob, ...] = (
    *_knob_batching.KNOBS,
    *_knob_instances.KNOBS,
    *_knob_precision.KNOBS,
    *_knob_sequence.KNOBS,
    *_knob_parameters.KNOBS,
    *_knob_backend.KNOBS,
    *_knob_queue.KNOBS,  # after instances: a queue's depth counts the original's batch on every instance
    *_knob_rate_limit.KNOBS,
    *_knob_cache.KNOBS,
)
KNOB_BY_NAME = {k.name: k for k in KNOBS}

__all__ = ["ABSENT", "KNOBS", "KNOB_BY_NAME", "Ctx", "ExtractInfo", "Knob", "pow2_sizes", "pref_label", "pref_sizes"]
