"""The search's informative start: the batching corner of the space, measured right after the
original so the sampler sees both ends of the batching axes early.

A tuner's first trials are random (TPE's start-up), and with a budget of ~25 trials over a
space of max_batch_size x dynamic batching x queue delay x instances, the far corner where
batching pays most (the largest max_batch_size, dynamic batching on, the longest queue delay
the budget allows) is often never drawn; yet for any model whose execution has a fixed cost
it is where throughput is, and when it is not (the budget cannot afford the delay, or the
model gains nothing from batches) one trial says so and the sampler learns the trend. The
other knobs keep the original's values, so the seed differs from trial 0 in batching alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfkit.tuner._space import P_DB, P_DELAY, P_MBS, P_PREF, ResolvedSpace


def batching_seed(space: ResolvedSpace, original: Mapping[str, Any]) -> dict[str, Any] | None:
    """The original's parameters (as fitted to the space) with batching pushed to its corner:
    the largest max_batch_size searched, dynamic batching on with the longest queue delay and
    no preferred sizes (batches up to max_batch_size). None when the space searches no batching
    knob or the corner is the original itself."""
    mbs, db = space.dimension(P_MBS), space.dimension(P_DB)
    if mbs is None and db is None:
        return None
    seed = dict(original)
    if mbs is not None:
        seed[P_MBS] = max(mbs.choices)
    db_on = True in db.choices if db is not None else bool(space.original_params.get(P_DB))
    if db is not None and db_on:
        seed[P_DB] = True
    for d in space.dimensions:
        if not d.when_dynamic_batching:
            continue
        if not db_on:
            seed.pop(d.name, None)
        elif d.name == P_DELAY and d.is_range:
            seed[d.name] = d.high
        elif d.name == P_PREF and "none" in d.choices:
            seed[d.name] = "none"
        elif d.name not in seed:  # the original had dynamic batching off: nothing of its own
            seed[d.name] = d.low if d.is_range else d.choices[0]
    return None if seed == dict(original) else seed
