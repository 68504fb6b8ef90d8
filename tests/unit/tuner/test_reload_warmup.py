"""The first measurement after a config is put on the server warms up longer (TuneSettings.
reload_warmup_s): right after a reload a model serves slowly for a second or so, and a level whose
first window lands there is decided over the budget by it. A whole measured tune, confirmation
included, on a stand-in server and route: every measurement right after a config was put warms up
at least reload_warmup_s, every other one the level's own warm-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfkit.gate.synthetic import synthetic_level, synthetic_record
from perfkit.records import Budget, ProfileSpec, RunRecord
from perfkit.tuner import TuneSettings, TuneSpace, parse_max_output_diff, tune
from tests.conftest import copy_models
from tests.support.stand_in_server import StandInRoute, StandInServer

LATENCY_MS = 10.0  # every level reads this, far within the budget


def test_the_first_measurement_after_a_config_is_put_warms_up_for_the_reload_warmup(tmp_path: Path):
    repo = copy_models(tmp_path, ["queue"])
    log: list[tuple[str, float]] = []

    def measure(server: Any, spec: ProfileSpec, **kw: Any) -> RunRecord:
        log.append(("measure", spec.warmup_s))
        lv = spec.levels[0]
        return synthetic_record([synthetic_level(concurrency=lv.value, latency_ms=LATENCY_MS, noise=0.0)],
                                model=spec.model)  # fmt: skip

    settings = TuneSettings(model="queue", budget=Budget(100.0, 99.0), trials=3, output_dir=tmp_path / "out",
                            load="concurrency", max_concurrency=4, confirm_repeats=2, search="measure",
                            max_output_diff=parse_max_output_diff("off"))  # fmt: skip
    assert settings.reload_warmup_s > settings.warmup_s
    route = StandInRoute(on_serve=lambda text: log.append(("put", 0.0)))  # says so in the shared log
    tune(StandInServer(), settings, TuneSpace(instance_counts=(1, 2)), model_repository=repo, measure=measure,
         route=route)  # fmt: skip
    after_put = [w for (prev, _), (what, w) in zip(log, log[1:], strict=False) if what == "measure" and prev == "put"]
    others = [w for (prev, _), (what, w) in zip(log, log[1:], strict=False) if what == "measure" and prev != "put"]
    assert len(after_put) >= 3 and others, log  # each trial's config, and the confirmation's put again
    assert all(w == settings.reload_warmup_s for w in after_put), log
    assert all(w == settings.warmup_s for w in others), log
