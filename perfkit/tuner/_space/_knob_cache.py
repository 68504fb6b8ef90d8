"""The response cache: `response_cache { enable }`, searched for a workload whose repeats are stated.

Triton answers a request from its response cache when both the server (`--cache-config local,size=N`)
and the model's config enable it (triton-inference-server/server docs/user_guide/response_cache.md,
"Usage"; core src/dynamic_batch_scheduler.cc DynamicBatchScheduler's constructor, which ANDs
model_->ResponseCacheEnabled() with the server's). The lookup happens in
DynamicBatchScheduler::Enqueue before the request is queued (src/scheduler_utils.cc CacheLookUpUtil):
a hit is answered without queueing or running the model; a miss runs and is inserted. It is searched:
- only where the workload states its repeats (--repeat-fraction F, or an input file's own): with
  generated data and no fraction every request sends one input, so every request would hit;
- not for decoupled models (core src/model_config_utils.cc ValidateModelConfig refuses the cache
  with the decoupled transaction policy);
- not for sequence models (the sequence batcher never looks the cache up: only the dynamic batch
  and ensemble schedulers call CacheLookUp).
Servers perfkit launches for a tune that states repeats get `--cache-config local,size=N`
(server/_cache.py, tuner/_launch.py); on a server perfkit only reaches, a level of a model whose
config enables the cache and whose statistics count no lookup is an error (measure/_cache_check.py).
"""

from __future__ import annotations

from typing import Any

from perfkit.server.modelconfig import ModelConfig
from perfkit.tuner._space._core import Dimension
from perfkit.tuner._space._knob_base import ABSENT, Ctx, ExtractInfo, Knob

P_CACHE = "response_cache"


def _resolve(ctx: Ctx) -> tuple[Dimension | None, str]:
    if ctx.cfg.model_transaction_policy.decoupled:
        return None, "not searched: Triton's response cache does not serve decoupled models"
    if ctx.sequence:
        return None, "not searched: the sequence batcher does not look up the response cache"
    if ctx.repeat_fraction <= 0:
        return None, (
            "not searched: the workload states no repeats (give --repeat-fraction F: with one generated input"
            " every request would hit the cache, a rate no real traffic has)"
        )
    why = (
        f"response_cache {{ enable }}: {ctx.repeat_fraction:.0%} of requests repeat an earlier one's inputs, and a"
        " hit is answered before the queue, without running the model"
    )
    ctx.orig.setdefault(P_CACHE, False)  # no response_cache field: off, the original's value (trial 0)
    return Dimension(P_CACHE, (False, True)), why


def _extract(cfg: ModelConfig, info: ExtractInfo) -> Any:
    return bool(cfg.response_cache.enable) if cfg.HasField("response_cache") else ABSENT


def _apply(cfg: ModelConfig, value: Any, space: Any) -> None:
    if bool(value):
        cfg.response_cache.enable = True
    elif cfg.HasField("response_cache"):
        cfg.ClearField("response_cache")


KNOBS: tuple[Knob, ...] = (Knob(P_CACHE, _resolve, _extract, _apply),)
