"""The grid of benchmarks/predict_cases.py: every point of a tune's (small) space, as the tune's own
subject builds and names it, and each point's prediction as the tune's own predictor made it.

Capture watches one `perfkit tune` run in this process for its TrialRunner (the subject and the
space searched: the tune's own, not those a mix's calibration makes for each of its models) and,
where the predicted search ran, its Predictor (what it predicted for each point): wrapping their
constructors for the run's duration only, and putting them back after. A benchmark's instrument:
the tune itself runs unchanged."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from perfkit.tuner import parts
from perfkit.tuner.parts import dimension_values


class Capture:
    """The first TrialRunner (the tune's own) and the last Predictor a tune in this process made
    (None where none was)."""

    def __init__(self) -> None:
        self.runner: Any = None
        self.predictor: Any = None
        self._saved: tuple[Any, Any] | None = None

    def __enter__(self) -> Capture:
        init, seed = parts.TrialRunner.__init__, parts.PredictedSearch.seed
        self._saved = (init, seed)
        cap = self

        def runner_init(runner: Any, *a: Any, **kw: Any) -> None:
            init(runner, *a, **kw)
            # the tune's own runner is the first: a mix's calibration makes one more per model after it
            if cap.runner is None:
                cap.runner = runner

        def search_seed(search: Any, *a: Any, **kw: Any) -> None:
            try:
                seed(search, *a, **kw)
            finally:
                cap.predictor = search.predictor

        parts.TrialRunner.__init__ = runner_init  # type: ignore[method-assign]  # restored in __exit__
        parts.PredictedSearch.seed = search_seed  # type: ignore[method-assign]  # restored in __exit__
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._saved is not None
        parts.TrialRunner.__init__, parts.PredictedSearch.seed = self._saved  # type: ignore[method-assign]

    def predicted_for(self, params: Mapping[str, Any]) -> float | None:
        """The predictor's rate for a point (None where it did not predict, or scored it below the best)."""
        p = self.predictor
        if p is None or not getattr(p, "seeded", False):
            return None
        try:
            return p.predicted_for(params)
        except (KeyError, ValueError, TypeError):
            return None


def applicable(runner: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """The params that have an effect (dynamic batching off: no queue delay), as the subject says."""
    dims = {d.name: d for d in runner.space.dimensions}
    return {k: v for k, v in params.items() if k in dims and runner.subject.applies(dims[k], params)}


def grid_points(runner: Any, *, limit: int) -> list[dict[str, Any]]:
    """Every distinct point of the runner's space (each dimension at the values the prediction
    scores); at most `limit`: a case whose space is larger is a case to shrink (SystemExit)."""
    dims = list(runner.space.dimensions)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for values in itertools.product(*(dimension_values(d) for d in dims)):
        p = applicable(runner, {d.name: v for d, v in zip(dims, values, strict=True)})
        if (k := label(p)) not in seen:
            seen.add(k)
            out.append(p)
    if len(out) > limit:
        raise SystemExit(f"the space holds {len(out)} configs, over --max-grid {limit}: shrink the case's flags")
    return out


SHORT = {"max_batch_size": "mbs", "dynamic_batching": "db", "instance_count": "inst", "max_queue_delay_us": "delay_us",
         "precision": "prec", "preferred_batch_sizes": "pref", "instance_kind": "kind"}  # fmt: skip


def label(params: Mapping[str, Any]) -> str:
    """A point's name in the tables: its knobs, sorted (a model's own prefix kept in a joint space);
    with dynamic batching off no max_batch_size (batch-1 requests without a batcher never use it)."""
    off = {k.rpartition(".")[0] for k, v in params.items() if k.rpartition(".")[2] == "dynamic_batching" and not v}
    parts = []
    for k, v in sorted(params.items()):
        model, _, knob = k.rpartition(".")
        if knob == "max_batch_size" and model in off:
            continue
        parts.append(f"{model + '.' if model else ''}{SHORT.get(knob, knob)}={v}")
    return " ".join(parts)
