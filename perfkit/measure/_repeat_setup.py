"""The repeats a run's requests carry: --repeat-fraction's generated sequence, or an input file's own.

`repeat_workload` gives the distinct inputs to encode, the order the load sends them in (None:
each once, in turn, as before) and the record's RepeatStats (None where nothing states repeats:
generated data without --repeat-fraction is one input sent every time).
"""

from __future__ import annotations

import time

import numpy as np

from perfkit.errors import UsageError
from perfkit.loadgen import FileRequest, ModelIO, Tensor, check_synthetic, synthetic_tensors
from perfkit.loadgen._repeats import REPEAT_SEQUENCE_REQUESTS, count_repeats, distinct_needed, repeat_order
from perfkit.loadgen._requests import NP_DTYPES, to_wire
from perfkit.records import ProfileSpec, RepeatStats


def check_repeat_spec(spec: ProfileSpec) -> None:
    """What --repeat-fraction cannot carry, refused by flag; raises UsageError."""
    f = spec.repeat_fraction
    if f == 0:
        return
    if not 0 < f < 1:
        raise UsageError(f"--repeat-fraction {f:g}: give a fraction in [0, 1) (0.5: half the requests repeat)")
    if spec.input_data != "random":
        raise UsageError(
            f"--repeat-fraction with --input-data {spec.input_data}: it generates random inputs",
            hint="drop --input-data, or write the repeats into the file (perfkit counts a file's own repeats)",
        )
    refused = [
        (spec.workers > 1, "--workers above 1 (each worker would send the same sequence)"),
        (bool(spec.mix), "--mix"),
        (spec.streaming, "--streaming (Triton's response cache does not serve decoupled models)"),
        (spec.shared_memory != "none", "--shared-memory (the inputs travel in the request body)"),
        (bool(spec.trace) or spec.fixed_schedule, "a trace replay"),
    ]
    for bad, what in refused:
        if bad:
            raise UsageError(f"--repeat-fraction {f:g}: not with {what}")


def repeat_workload(
    io: ModelIO, spec: ProfileSpec, steps: list[list[Tensor]], file_requests: list[FileRequest]
) -> tuple[list[list[Tensor]], list[int] | None, RepeatStats | None]:
    """(distinct steps to encode, the order they are sent in or None, the record's RepeatStats)."""
    if spec.repeat_fraction > 0:
        return _generated(io, spec)
    if file_requests:
        fraction, distinct = count_repeats([r.tensors for r in file_requests])
        return steps, None, RepeatStats(fraction, distinct, len(file_requests), spec.input_data)
    return steps, None, None


def _generated(io: ModelIO, spec: ProfileSpec) -> tuple[list[list[Tensor]], list[int], RepeatStats]:
    check_synthetic(io)
    requests = REPEAT_SEQUENCE_REQUESTS
    order = repeat_order(requests, spec.repeat_fraction, seed=spec.seed)
    # The distinct inputs differ from run to run (seeds from the clock): a server's cache that saw an earlier
    # run's inputs would otherwise hit on this run's "first" requests, above the fraction stated.
    base = int(np.random.SeedSequence([spec.seed, time.time_ns()]).generate_state(2, np.uint64)[0]) >> 2
    distinct = _distinct_inputs(io, spec, distinct_needed(requests, spec.repeat_fraction), base)
    fraction, count = count_repeats([distinct[k] for k in order])  # counted as sent, not as asked
    return distinct, order, RepeatStats(fraction, count, requests, "generated", spec.repeat_fraction)


def _distinct_inputs(io: ModelIO, spec: ProfileSpec, count: int, seed: int) -> list[list[Tensor]]:
    """`count` requests of random inputs, drawn as generated data is (loadgen's synthetic_tensors),
    each input's values for every request drawn at once."""
    template = synthetic_tensors(
        io, mode="random", batch_size=spec.batch_size, shapes=spec.shapes, string_length=spec.string_length,
        seed=seed, string_data=spec.string_data,
    )  # fmt: skip
    if any(t.datatype == "BYTES" for t in template):  # strings: one generated request at a time
        return [
            synthetic_tensors(
                io, mode="random", batch_size=spec.batch_size, shapes=spec.shapes, string_length=spec.string_length,
                seed=seed + k, string_data=spec.string_data,
            )
            for k in range(count)
        ]  # fmt: skip
    rng = np.random.default_rng(seed)
    columns = []
    for t in template:
        size = (count, *t.shape)
        values: np.ndarray
        if t.datatype == "BOOL":
            values = rng.integers(0, 2, size=size).astype(np.bool_)
        elif t.datatype in ("FP16", "FP32", "FP64", "BF16"):
            values = rng.random(size, dtype=np.float64)
        else:
            values = rng.integers(0, 100, size=size)
        if t.datatype != "BF16":
            values = values.astype(NP_DTYPES[t.datatype])
        columns.append([Tensor(t.name, t.datatype, t.shape, to_wire(v, t.datatype)) for v in values])
    return [list(step) for step in zip(*columns)]
