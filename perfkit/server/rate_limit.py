"""Triton's rate limiter on the server side: the flags a launched server gets, and whether a server
perfkit only reaches runs with it.

`tritonserver --rate-limit` is `off` by default (triton-inference-server/server
docs/user_guide/rate_limiter.md): a model config's `rate_limiter` blocks still load, and are
ignored. Neither the server's metadata (GET /v2) nor its statistics say which mode it runs, so
the check is behavioural: with the limiter on, the core registers each instance's resources with
its resource manager and refuses a resource an instance claims both globally and per device
(triton-inference-server/core src/rate_limiter.cc, RateLimiter::RegisterModelInstance ->
ResourceManager::AddModelInstance -> ValidateMaxResources: "is present as both global and
device-specific resource"); with it off, RegisterModelInstance skips the resource manager
(ignore_resources_and_priority_) and the same config loads.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from perfkit.errors import ModelLoadError, ServerError, UsageError

if TYPE_CHECKING:
    from perfkit.server.base import Server

log = logging.getLogger(__name__)

RATE_LIMIT_MODES = ("off", "execution_count")
PROBE_RESOURCE = "perfkit_rate_limit_probe"
_BOTH_KINDS_REFUSED = "is present as both global and device-specific resource"


def rate_limit_args(opts: Any) -> list[str]:
    """The rate limiter's flags for a launched server (opts: ServerOptions' rate_limit and
    rate_limit_resources): none where it stays off. Raises UsageError for an unknown mode."""
    mode = opts.rate_limit
    if mode not in RATE_LIMIT_MODES:
        raise UsageError(f"rate limit mode {mode!r} unknown", hint="off or execution_count")
    if mode == "off":
        return []
    resources: Sequence[str] = opts.rate_limit_resources
    return [f"--rate-limit={mode}"] + [f"--rate-limit-resource={r}" for r in resources]


def probe_config(served: dict[str, Any]) -> dict[str, Any]:
    """The served config (JSON, as GET .../config returns it) with two instances, one claiming
    PROBE_RESOURCE globally and one per device: what a server with the rate limiter on refuses."""
    probe = copy.deepcopy(served)
    groups = probe.get("instance_group") or [{}]
    base = {k: v for k, v in groups[0].items() if k not in ("name", "count", "rate_limiter")}
    probe["instance_group"] = [
        {**base, "count": 1, "rate_limiter": {"resources": [{"name": PROBE_RESOURCE, "count": 1, "global": g}]}}
        for g in (True, False)
    ]
    return probe


def rate_limiter_on(server: Server, model: str) -> bool:
    """Whether the server runs with `--rate-limit execution_count`, found by loading `model` with
    probe_config (a refused load leaves the served version in place; a probe that loaded is
    replaced by the config served before). Raises ServerError when the load fails otherwise
    (the answer cannot be told)."""
    served = server.model_config(model)
    try:
        server.load_model(model, config=probe_config(served))
    except ModelLoadError as err:
        if _BOTH_KINDS_REFUSED in err.message:
            return True
        raise ServerError(
            f"cannot tell whether the server at {server.endpoints.http_url} runs the rate limiter:"
            f" the probe load of {model!r} failed: {err.message}",
            hint="start it with --rate-limit execution_count, or let perfkit launch it (drop -u)",
        ) from None
    log.info("rate limiter probe loaded on %s: the server runs with --rate-limit off", model)
    server.load_model(model, config=served)
    return False


def require_rate_limiter(server: Server, model: str) -> None:
    """Raises ServerError (one line) when the reached server runs with its rate limiter off."""
    if not rate_limiter_on(server, model):
        raise ServerError(
            f"the server at {server.endpoints.http_url} runs with --rate-limit off (Triton's default):"
            " the mix's rate_limiter candidates would load and be ignored",
            hint="restart it with --rate-limit execution_count, or let perfkit launch the server (drop -u)",
        )
