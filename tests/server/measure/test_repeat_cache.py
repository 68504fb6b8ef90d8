"""--repeat-fraction against a real server: the cache answers the repeats it is told of, and a
model asking for a cache on a server without one is a one-line error."""

from __future__ import annotations

import pytest

from perfkit.errors import MeasurementError
from perfkit.measure import profile
from perfkit.records import LoadLevel, ProfileSpec
from perfkit.server import LocalLaunch, launch_local
from perfkit.server._cache import cache_args
from tests.conftest import copy_models


def _enable_cache(repo) -> None:
    cfg = repo / "cacheable" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "response_cache { enable: true }\n")


def _spec(**kw) -> ProfileSpec:
    base = {"measurement_interval_ms": 1000.0, "max_trials": 3, "min_windows": 3, "warmup_s": 0.3}
    base.update(kw)
    return ProfileSpec(model="cacheable", levels=(LoadLevel("concurrency", 2),), **base)


@pytest.mark.usefixtures("tritonserver")
def test_half_the_requests_repeat_and_the_cache_answers_them(tmp_path):
    repo = copy_models(tmp_path, ["cacheable"])
    _enable_cache(repo)
    with launch_local(LocalLaunch(repo, extra_args=tuple(cache_args(True)))) as server:
        rec = profile(server, _spec(repeat_fraction=0.5))
    assert rec.repeats is not None
    assert rec.repeats.fraction_asked == 0.5 and rec.repeats.fraction_sent == pytest.approx(0.5, abs=1e-3)
    lv = rec.levels[0]
    srv = lv.server
    assert lv.error_count == 0 and srv is not None and srv.request_count > 50
    # About half hit (a repeat of an input already cached); every other request ran the model, one
    # request an execution. (A miss is counted after its response is inserted, so a level's last
    # misses may be counted after the level: executions, not misses, add up with the hits.)
    assert srv.cache_hit_count + srv.execution_count == srv.request_count
    assert srv.cache_hit_count / srv.request_count == pytest.approx(0.5, abs=0.05)
    assert 0 < srv.cache_miss_count <= srv.execution_count
    assert srv.cache_hit_avg_us < 5_000  # a lookup, not an execution


@pytest.mark.usefixtures("tritonserver")
def test_a_cache_enabled_model_on_a_server_started_without_a_cache_is_named(tmp_path):
    repo = copy_models(tmp_path, ["cacheable"])
    _enable_cache(repo)
    with launch_local(LocalLaunch(repo)) as server:
        with pytest.raises(MeasurementError, match="has no response cache") as err:
            profile(server, _spec(repeat_fraction=0.5, max_trials=3))
    assert "--cache-config" in str(err.value)
    assert err.value.record is not None and err.value.record.status == "failed"  # the level's record is kept
