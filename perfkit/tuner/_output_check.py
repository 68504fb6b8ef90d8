"""The accuracy guard's two moments in a tune (tuner/_accuracy.py compares): the original
config's outputs on fixed inputs, captured once before any candidate is loaded, and each
candidate's outputs checked against them after it is put on the server."""

from __future__ import annotations

import math
from typing import Any

from perfkit.errors import PerfkitError, ServerError
from perfkit.server.base import Server
from perfkit.tuner import _accuracy


def capture(
    server: Server, model: str, original_cfg: Any, decoupled: bool, tol: _accuracy.OutputTolerance
) -> tuple[_accuracy.Probe | None, dict[str, Any] | None, str | None]:
    """(the probe, the original's outputs, None), or (None, None, why there is no check) for the
    progress line. The server must be serving the original config."""
    if not tol.enabled:
        return None, None, "output check off (--max-output-diff off)"
    if decoupled or original_cfg.HasField("sequence_batching"):
        # The probe sends one unary request: a decoupled model answers on a stream, and a
        # sequence model's outputs depend on the state its earlier steps built.
        kind = "decoupled" if decoupled else "a sequence model"
        return None, None, f"output check skipped: {model!r} is {kind}; the probe sends unary requests"
    try:
        metadata = server.model_metadata(model)
        probe = _accuracy.make_probe(server.endpoints.http_url, model, metadata, original_cfg.max_batch_size)
        if probe is None:
            return None, None, "output check skipped: inputs of this model cannot be synthesized"
        return probe, probe.run(), None
    except PerfkitError as err:
        return None, None, f"output check skipped: the original's outputs could not be read ({err.one_line()})"


def check(
    server: Server, probe: _accuracy.Probe, reference: dict[str, Any], tol: _accuracy.OutputTolerance
) -> tuple[dict[str, dict[str, float | None]] | None, str | None]:
    """A candidate on the server against the original's outputs: each output's differences (for
    the trial's state; None where inference failed) and why it fails the guard, or None. Raises
    ServerError when the server itself stopped answering."""
    try:
        got = probe.run()
    except ServerError as err:
        if not server.is_ready():
            raise
        return None, f"inference on the candidate failed: {err.one_line()}"
    diffs = _accuracy.compare_outputs(reference, got, probe.datatypes, tol)
    told = {d.name: {"max_abs": _finite(d.max_abs), "max_rel": _finite(d.max_rel)} for d in diffs}
    bad = [d for d in diffs if not d.within]
    if not bad:
        return told, None
    return told, "outputs differ from the original config's: " + "; ".join(d.describe() for d in bad)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
