"""The search's seed: the batching corner of the resolved space, next to the original."""

from __future__ import annotations

from pathlib import Path

from perfkit.server.modelconfig import read_config
from perfkit.tuner import TuneSpace, resolve
from perfkit.tuner._seed import batching_seed
from perfkit.tuner._space import P_COUNT, P_DB, P_DELAY, P_MBS, P_PREF, apply_params

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "models"


def _space(name: str, space: TuneSpace):
    cfg = read_config(FIXTURES / name / "config.pbtxt")
    return cfg, resolve(space, cfg, FIXTURES / name, latency_budget_us=100_000)


def test_the_seed_is_the_original_with_batching_at_its_corner():
    space = TuneSpace(max_batch_sizes=(8, 32, 128), queue_delay_us=(500, 10_000), instance_counts=(1, 2, 3))
    cfg, rs = _space("hungry", space)
    original = {P_MBS: 8, P_DB: False, P_COUNT: 1}  # hungry starts unbatched, one instance
    seed = batching_seed(rs, original)
    assert seed is not None
    assert seed[P_MBS] == 128 and seed[P_DB] is True and seed[P_DELAY] == 10_000
    assert seed[P_COUNT] == 1  # what is not batching stays the original's
    assert seed.get(P_PREF, "none") == "none"
    applied = apply_params(cfg, seed, rs)  # a config the server can load
    assert applied.max_batch_size == 128 and applied.dynamic_batching.max_queue_delay_microseconds == 10_000


def test_no_seed_without_a_batching_knob_or_when_the_original_is_the_corner():
    space = TuneSpace(max_batch_sizes=(8,), dynamic_batching=(False,), instance_counts=(1, 2))
    _, rs = _space("hungry", space)
    assert batching_seed(rs, {P_MBS: 8, P_DB: False, P_COUNT: 1}) is None
    corner = TuneSpace(max_batch_sizes=(8,), queue_delay_us=(500, 2000), preferred_batch_sizes=("none",))
    _, rs = _space("hungry", corner)
    at_corner = {P_MBS: 8, P_DB: True, P_DELAY: 2000, P_PREF: "none", P_COUNT: 1}
    assert batching_seed(rs, {k: v for k, v in at_corner.items() if rs.dimension(k)}) is None
