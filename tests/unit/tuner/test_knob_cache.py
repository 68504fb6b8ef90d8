"""The response cache knob: searched only for stated repeats on a model the cache serves; written
and read back through the config; the flag a launched server gets; a server without a cache named."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.errors import ServerError
from perfkit.measure._cache_check import check_cache_served
from perfkit.records import ServerStats
from perfkit.server._cache import RESPONSE_CACHE_BYTES, cache_args
from perfkit.server.modelconfig import read_config
from perfkit.tuner import TuneSpace, apply_params, resolve
from perfkit.tuner._space import extract_params
from perfkit.tuner._space._knob_cache import P_CACHE

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "models"


def _resolve(name: str, repeat_fraction: float):
    cfg = read_config(FIXTURES / name / "config.pbtxt")
    rs = resolve(TuneSpace(), cfg, FIXTURES / name, latency_budget_us=50_000, repeat_fraction=repeat_fraction)
    return cfg, rs


def test_stated_repeats_search_the_cache_on_and_off() -> None:
    _, rs = _resolve("cacheable", 0.5)
    dim = rs.dimension(P_CACHE)
    assert dim is not None and tuple(dim.choices) == (False, True)
    assert "50% of requests repeat" in rs.reasons[P_CACHE]


def test_without_stated_repeats_the_cache_is_not_searched_and_says_why() -> None:
    _, rs = _resolve("cacheable", 0.0)
    assert rs.dimension(P_CACHE) is None
    assert "states no repeats" in rs.reasons[P_CACHE]


@pytest.mark.parametrize(("model", "why"), [("streamer", "decoupled"), ("accumulator", "sequence batcher")])
def test_decoupled_and_sequence_models_are_not_searched(model: str, why: str) -> None:
    _, rs = _resolve(model, 0.5)
    assert rs.dimension(P_CACHE) is None
    assert why in rs.reasons[P_CACHE]


def test_apply_then_extract_gives_the_value_back_and_off_clears_the_field() -> None:
    cfg, rs = _resolve("cacheable", 0.5)
    assert P_CACHE not in extract_params(cfg, backend="python")  # the config has no response_cache
    assert rs.original_params[P_CACHE] is False  # searched: the original's value is off (trial 0)
    assert P_CACHE not in _resolve("cacheable", 0.0)[1].original_params  # not searched: not a parameter
    on = apply_params(cfg, {P_CACHE: True}, rs)
    assert on.response_cache.enable is True
    assert extract_params(on, backend="python")[P_CACHE] is True
    off = apply_params(on, {P_CACHE: False}, rs)
    assert not off.HasField("response_cache")
    assert off.input == cfg.input and off.instance_group == cfg.instance_group  # the rest kept


def test_a_launched_server_gets_a_local_cache_only_when_asked() -> None:
    assert cache_args(False) == []
    assert cache_args(True) == [f"--cache-config=local,size={RESPONSE_CACHE_BYTES}"]


def _stats(hits: int, misses: int, requests: int = 100) -> ServerStats:
    return ServerStats("cacheable", requests, requests, requests, 0, 0, 0, 0, 0, cache_hit_count=hits,
                       cache_miss_count=misses)  # fmt: skip


def test_a_cache_enabled_model_on_a_server_with_no_cache_is_a_one_line_error() -> None:
    enabled = {"response_cache": {"enable": True}}
    with pytest.raises(ServerError, match="looked none of its 100 requests up") as err:
        check_cache_served(enabled, _stats(0, 0), "http://127.0.0.1:8000")
    assert "--cache-config=local,size=" in (err.value.hint or "")
    check_cache_served(enabled, _stats(50, 50), "u")  # lookups counted: a cache
    check_cache_served({}, _stats(0, 0), "u")  # the model does not ask for one
    check_cache_served(enabled, _stats(0, 0, requests=0), "u")  # nothing measured, nothing to say
