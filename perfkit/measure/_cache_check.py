"""A model whose config enables the response cache, on a server that has none, is a clear error.

Triton uses the cache only when the server was started with one (`--cache-config`) and the model's
config enables it (core src/dynamic_batch_scheduler.cc, DynamicBatchScheduler's constructor); every
lookup counts a hit or a miss in the model's statistics (core src/infer_stats.cc
UpdateSuccessCacheHit / UpdateSuccessCacheMiss, `cache_hit_count` / `cache_miss_count`). A level
whose requests succeeded with neither count moving was served with no cache: measured as if it
had one, the figures would say the cache does nothing.
"""

from __future__ import annotations

from typing import Any

from perfkit.errors import ServerError
from perfkit.records import ServerStats
from perfkit.server._cache import CACHE_FLAG


def cache_enabled(config: dict[str, Any]) -> bool:
    """Whether a served config (the server's JSON) enables the response cache."""
    return bool((config.get("response_cache") or {}).get("enable"))


def check_cache_served(config: dict[str, Any], stats: ServerStats | None, url: str) -> None:
    """Raise ServerError when the config enables the cache and the level looked nothing up."""
    if stats is None or not cache_enabled(config) or stats.request_count <= 0:
        return
    if stats.cache_hit_count + stats.cache_miss_count > 0:
        return
    raise ServerError(
        f"model {stats.model!r} enables response_cache but the server at {url} looked none of its"
        f" {stats.request_count} requests up in a cache (cache_hit_count and cache_miss_count stayed 0):"
        f" the server has no response cache",
        hint=f"start tritonserver with {CACHE_FLAG} (perfkit starts the servers it launches so)",
    )
