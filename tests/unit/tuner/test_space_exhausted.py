"""A finite space ends its search when every distinct config it holds has been tried, not after a
streak of repeats: a mix's joint space of four configs was re-drawn 25 times after its fourth
trial before the streak stopped it."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace
from typing import Any

import optuna
from optuna.trial import TrialState

from perfkit.errors import CandidateRejectedError
from perfkit.tuner import _trial_state
from perfkit.tuner._exhausted import MAX_LISTED_POINTS, exhausted, space_configs
from perfkit.tuner._space import Dimension
from perfkit.tuner._subject import Candidate


def _subject(dims: list[Dimension], reject: Any = None) -> SimpleNamespace:
    """Dynamic batching off makes the queue delay moot (as the model subject says); a point's config
    is its applicable params, so two points differing only in a moot value are one config."""

    def applies(d: Dimension, params: dict[str, Any]) -> bool:
        return not d.when_dynamic_batching or bool(params.get("dynamic_batching"))

    def candidate(params: dict[str, Any], *, is_original: bool, number: int) -> Candidate:
        if reject is not None and reject(params):
            raise CandidateRejectedError("max_batch_size 0 with dynamic batching")
        text = repr(sorted(params.items()))
        return Candidate(text, dict(params), hashlib.sha256(text.encode()).hexdigest())

    return SimpleNamespace(space=SimpleNamespace(dimensions=dims), applies=applies, candidate=candidate)


DIMS = [
    Dimension("dynamic_batching", (True, False)),
    Dimension("max_queue_delay_us", (0, 2000), when_dynamic_batching=True),
    Dimension("instance_count", (1, 2)),
]


def _tell(study: optuna.Study, sha: str, state: TrialState = TrialState.COMPLETE, **attrs: Any) -> None:
    trial = study.ask()
    _trial_state.store(trial, config_pbtxt_sha256=sha, **attrs)
    study.tell(trial, 1.0 if state == TrialState.COMPLETE else None, state=state)


def test_the_moot_values_of_a_point_are_one_config():
    shas = space_configs(_subject(DIMS))
    assert shas is not None and len(shas) == 6  # (on: 2 delays + off) x 2 counts, not 8


def test_the_search_ends_when_the_last_distinct_config_is_tried():
    shas = sorted(space_configs(_subject(DIMS)) or ())
    study = optuna.create_study()
    for sha in shas[:-1]:
        _tell(study, sha)
    _tell(study, shas[0], duplicate_of=0)  # a repeat answered from its trial tries nothing new
    _tell(study, shas[-1], TrialState.FAIL, interrupted=True)  # cut short: queued again, not tried
    assert not exhausted(study, frozenset(shas))
    _tell(study, shas[-1], TrialState.FAIL)  # failed on its own (it did not load): tried
    assert exhausted(study, frozenset(shas))


def test_rejected_points_are_not_waited_for():
    subject = _subject(DIMS, reject=lambda p: p.get("instance_count") == 2 and not p["dynamic_batching"])
    shas = space_configs(subject)
    assert shas is not None and len(shas) == 5


def test_a_range_or_a_large_space_is_not_listed():
    assert space_configs(_subject([Dimension("max_queue_delay_us", low=100, high=10_000)])) is None
    # --queue-delays-us 2000 is a range of one value: a choice (the mix whose search was not stopped)
    one = [*DIMS[:1], Dimension("max_queue_delay_us", low=2000, high=2000, when_dynamic_batching=True), DIMS[2]]
    assert len(space_configs(_subject(one)) or ()) == 4
    big = [Dimension(f"k{i}", tuple(range(2))) for i in range(MAX_LISTED_POINTS.bit_length())]
    assert space_configs(_subject(big)) is None
    assert not exhausted(optuna.create_study(), None)
