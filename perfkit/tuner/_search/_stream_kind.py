"""What of a decoupled (streaming) model's tune the stream model (perfkit/predict/_stream.py) does
not predict, for --search auto's rule (tuner/_search/_kind.py): a space that batches streams (each
stream is modelled as its own execution, holding its instance)."""

from __future__ import annotations

from collections.abc import Sequence

from perfkit.tuner._pipeline import SEP
from perfkit.tuner._space import P_DB, P_DELAY, P_MBS, P_PREF

BATCHING = (P_MBS, P_DB, P_DELAY, P_PREF)


def stream_unpredictable(knobs: Sequence[str]) -> str | None:
    """Why a decoupled model's space (its dimension names) is searched by measurement, or None."""
    batched = sorted({k.rpartition(SEP)[2] for k in knobs} & set(BATCHING))
    if batched:
        return f"a decoupled model's batched streams are not simulated (the space searches {', '.join(batched)})"
    return None
