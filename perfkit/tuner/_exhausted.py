"""When a finite space has nothing left to measure: every distinct config it holds tried once.

A sampler over a few categorical values keeps re-proposing points it has seen (a mix's joint space
of four configs is re-drawn for every trial after the fourth), and each repeat is answered from
its earlier trial without measuring. Counting distinct configs (their text's hash, as the repeat
check does) ends such a search when the last one is tried, instead of after a streak of repeats.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from perfkit.errors import CandidateRejectedError, PerfkitError
from perfkit.tuner import _trial_state

if TYPE_CHECKING:
    from perfkit.tuner._subject import Subject

# Larger spaces are not listed: building each candidate's text costs a parse and a render, and a
# search that large ends on its --trials or --max-time long before it could exhaust the space.
MAX_LISTED_POINTS = 1024


def space_configs(subject: Subject) -> frozenset[str] | None:
    """The hashes of every distinct config the subject's space holds (points Triton would reject
    left out); None where the space has a range of more than one value, more than MAX_LISTED_POINTS points, or a point
    whose config cannot be built (then only the streak of repeats ends the search)."""
    dims = list(subject.space.dimensions)
    # a range of one value (a flag's single queue delay) is a choice; a wider one is not listed
    if any(d.is_range and d.low != d.high for d in dims):
        return None
    choices = [(d.low,) if d.is_range else tuple(d.choices) for d in dims]
    if math.prod(len(c) for c in choices) > MAX_LISTED_POINTS:
        return None
    shas: set[str] = set()
    for values in itertools.product(*choices):
        params: dict[str, Any] = {}
        for d, v in zip(dims, values, strict=True):
            if subject.applies(d, params):  # as TrialRunner.suggest draws: a moot dimension is left out
                params[d.name] = v
        try:
            shas.add(subject.candidate(params, is_original=False, number=-1).sha256)
        except CandidateRejectedError:
            continue
        except PerfkitError:
            return None
    return frozenset(shas)


def tried_configs(study: optuna.Study) -> set[str]:
    """The config hashes the study has tried: measured (complete or pruned) or failed on their own
    (not cut short by an interruption, which is queued again, nor answered as a repeat)."""
    out: set[str] = set()
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)):
        st = _trial_state.read(t)
        if st.config_pbtxt_sha256 and st.duplicate_of is None and not st.interrupted:
            out.add(st.config_pbtxt_sha256)
    return out


def exhausted(study: optuna.Study, configs: frozenset[str] | None) -> bool:
    """Whether every config of a listed space has been tried (False for an unlisted one)."""
    return bool(configs) and configs is not None and configs <= tried_configs(study)
