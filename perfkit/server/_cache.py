"""The response cache of a server perfkit launches: Triton's `--cache-config local,size=BYTES`.

Triton answers from its response cache only when the server was started with one and the model's
config enables it (triton-inference-server/server docs/user_guide/response_cache.md, "Enable Caching
on Server-side" and "Enable Caching for a Model").
"""

from __future__ import annotations

# Room for the distinct responses of a --repeat-fraction sequence of small outputs.
RESPONSE_CACHE_BYTES = 256 * 1024 * 1024
CACHE_FLAG = f"--cache-config=local,size={RESPONSE_CACHE_BYTES}"


def cache_args(enabled: bool) -> list[str]:
    """The server's response-cache flags: the local cache where `enabled`, else none."""
    return [CACHE_FLAG] if enabled else []
