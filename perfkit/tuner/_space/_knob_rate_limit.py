"""The rate limiter knob: which model's instances run first when the models of a traffic mix
compete for one device.

Triton's rate limiter (triton-inference-server/server docs/user_guide/rate_limiter.md; core
src/rate_limiter.cc) lets an instance execute only once the resources its group's
`rate_limiter { resources { name count global } }` claims are free
(RateLimiter::ResourceManager::AllocateResources), and among the instances ready to run allocates
the one of least `exec_count x max(priority, 1)` first (RateLimiter::ModelInstanceContext::
ScaledPriority, the min-heap of ScaledPriorityComparator): an instance of priority 2 runs half as
often as one of priority 1 while both have work. A resource's count on the server is the largest
any instance claims (RateLimiter::ResourceManager::UpdateMaxResource) unless the server is given
`--rate-limit-resource`; nothing of this applies unless the server runs with `--rate-limit
execution_count` (its default is off: the config still loads, and resources and priorities are
ignored, RateLimiter::RegisterModelInstance's ignore_resources_and_priority_).

The knob's value is the priority with which every instance of the model claims one unit of the
one resource DEVICE_RESOURCE, global across the server's devices: with each claim 1 and the
count 1, one claiming execution runs at a time, and the priorities decide whose. 0: no
rate_limiter block (the model's instances run whenever they are free, as without the limiter).
Searched only in a traffic mix (between one model's own instances, priority and a one-at-a-time
claim do nothing the instance count does not).
"""

from __future__ import annotations

from typing import Any

from perfkit.server.modelconfig import ModelConfig
from perfkit.tuner._space._core import Dimension
from perfkit.tuner._space._knob_base import ABSENT, Ctx, ExtractInfo, Knob, with_values

P_RATE_LIMIT = "rate_limit_priority"
DEVICE_RESOURCE = "perfkit_device"
OFF = 0
# Priorities searched: equal, and one model run twice or four times as often as another while both
# wait (ScaledPriority is a ratio: 2 against 4 behaves as 1 against 2).
PRIORITY_CHOICES = (OFF, 1, 2, 4)


def claims(cfg: ModelConfig) -> bool:
    """Whether any instance group of the config carries a rate_limiter block."""
    return any(g.HasField("rate_limiter") for g in cfg.instance_group)


def _own_block(group: Any) -> bool:
    """The group's rate_limiter is the one this knob writes (one claim of DEVICE_RESOURCE, 1, global)."""
    rl = group.rate_limiter
    if len(rl.resources) != 1:
        return False
    res = rl.resources[0]
    return res.name == DEVICE_RESOURCE and res.count == 1 and bool(getattr(res, "global"))


def _extract(cfg: ModelConfig, info: ExtractInfo) -> Any:
    groups = list(cfg.instance_group)
    if not any(g.HasField("rate_limiter") for g in groups):
        return ABSENT  # no block: nothing to record (the knob's 0 writes none)
    if all(g.HasField("rate_limiter") and _own_block(g) for g in groups):
        return max(int(groups[0].rate_limiter.priority), 1)
    return ABSENT  # the user's own resources: not this knob's to read


def _resolve(ctx: Ctx) -> tuple[Dimension | None, str]:
    if not ctx.space.shared_with:
        return None, "not searched: the rate limiter arbitrates between models served together (tune a --mix)"
    groups = list(ctx.cfg.instance_group)
    if any(g.HasField("rate_limiter") and not _own_block(g) for g in groups):
        return None, "not searched: the model's instance groups claim rate limiter resources of their own (kept)"
    if ctx.machine.gpus > 1:
        return None, (
            "not searched: on several GPUs one global claim would run one execution across all of them"
            " (per-device resources are not searched)"
        )
    others = ", ".join(ctx.space.shared_with)
    why = (
        f"priority of its claim on the device it shares with {others} (0: no claim; rate limiter"
        " resources and priority, the server run with --rate-limit execution_count)"
    )
    if ctx.space.rate_limit_priorities is not None:
        choices, why = ctx.space.rate_limit_priorities, "the priorities asked for (0: no claim)"
    else:
        choices = PRIORITY_CHOICES
    # searched: the original's point holds its value too (0 where it has no block), so trial 0 is a point of the space
    ctx.orig.setdefault(P_RATE_LIMIT, OFF)
    values = with_values(tuple(choices), ctx.orig[P_RATE_LIMIT])
    if len(values) < 2:
        return None, f"only {values[0]}: {why}"
    return Dimension(P_RATE_LIMIT, values), why


def _apply(cfg: ModelConfig, value: Any, space: Any) -> None:
    priority = int(value)
    if not cfg.instance_group:
        cfg.instance_group.add()
    for group in cfg.instance_group:
        if group.HasField("rate_limiter") and not _own_block(group):
            continue  # the user's own resources stay as written
        if priority == OFF:
            group.ClearField("rate_limiter")
            continue
        group.rate_limiter.ClearField("resources")
        res = group.rate_limiter.resources.add()
        res.name, res.count = DEVICE_RESOURCE, 1
        setattr(res, "global", True)  # the proto field is named `global`, a Python keyword
        group.rate_limiter.priority = priority


KNOBS: tuple[Knob, ...] = (Knob(P_RATE_LIMIT, _resolve, _extract, _apply),)
