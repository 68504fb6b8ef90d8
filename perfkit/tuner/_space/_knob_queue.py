"""Admission-control knobs: the dynamic batcher's default queue policy (model_config.proto
ModelDynamicBatching.default_queue_policy, a ModelQueuePolicy): a bounded queue (max_queue_size)
and a queue timeout with its action (default_timeout_microseconds, timeout_action REJECT|DELAY).

Triton applies the policy in its priority queue (triton-inference-server/core src/scheduler_utils.cc):
`PriorityQueue::PolicyQueue::Enqueue` refuses a request when the queue already holds max_queue_size
("Exceeds maximum queue size", Status UNAVAILABLE), and `PolicyQueue::ApplyPolicy`, when a batch is
formed, moves a request queued past its timeout to the rejected queue (REJECT: it fails with
"Request timeout expired", src/dynamic_batch_scheduler.cc) or behind the requests still in time
(DELAY: `delayed_queue_`, dequeued only once the unexpired ones are gone).

Searched only where they can help and can be judged:
- with dynamic batching on: the policy is a field of the dynamic batcher (the sequence batcher
  has none, and without a batcher Triton queues nothing of the model's own);
- with an error budget (--max-error-rate above 0): a policy that rejects turns tail latency into
  failed requests, and with no error budget any failure fails the level, so a bounded queue could
  only tie with the unbounded one (when it rejects nothing) or lose.

Not searched: allow_timeout_override (it matters only to requests carrying their own `timeout`
parameter, and a trial's requests carry none: the model's value is kept) and priority_levels with
priority_queue_policy (a trial's requests carry no `priority`: every one takes
default_priority_level, so levels change nothing).
"""

from __future__ import annotations

import math
from typing import Any

from perfkit.errors import UsageError
from perfkit.server.modelconfig import ModelConfig
from perfkit.tuner._space._core import P_COUNT, Dimension
from perfkit.tuner._space._knob_base import ABSENT, Ctx, ExtractInfo, Knob, with_values

P_QUEUE_SIZE = "max_queue_size"
P_QUEUE_TIMEOUT = "queue_timeout"

# Queue depths searched, in batches: max_queue_size = depth x max_batch_size x instances (the
# original config's batch and instance count). Under overload the last request admitted waits for
# the `depth` batches queued ahead of it and then its own, about (depth + 1) batch times, so a
# depth is within a budget B when (depth + 1) x t_batch <= B. The batch time t_batch is not known
# before a trial measures it; a config within B at all has t_batch <= B / 2 with one batch queued,
# so the depths 1..8 cover batch times from B / 2 down to B / 9. Below that a deeper queue already
# holds the budget and rejects nothing an unbounded one would not: 0 (unbounded) stays a choice.
QUEUE_DEPTHS_BATCHES = (1, 2, 4, 8)
# Queue timeouts searched, as shares of the latency budget B. A request that leaves the queue at
# its timeout T still needs its batch's execution, t_batch, so it can finish within B only when
# T + t_batch <= B: T = B / 2 for batch times up to B / 2 (the queue delay's own bound), T = B / 4
# for batch times up to 3B / 4. REJECT fails such a request at once (counted in the error budget);
# DELAY serves it after the requests still in time (it fails nothing, and it only moves the tail).
TIMEOUT_SHARES = (("reject", 0.25), ("reject", 0.5), ("delay", 0.5))
ACTIONS = {"reject": 0, "delay": 1}  # ModelQueuePolicy.TimeoutAction numbers


def _applies(ctx: Ctx) -> str | None:
    """Why the queue policy is not searched for this model, or None where it is."""
    if ctx.sequence:
        return "not searched: the sequence batcher has no queue policy"
    if True not in ctx.db_choices:
        return "not searched: no dynamic batching (the policy is the dynamic batcher's)"
    if ctx.max_error_rate <= 0:
        return "not searched: no error budget (--max-error-rate 0): a request the policy rejects fails its level"
    return None


def _batch_unit(ctx: Ctx) -> int:
    """Requests in one batch on every instance of the original config (the depth's unit)."""
    return max(1, ctx.mbs) * max(1, int(ctx.orig.get(P_COUNT) or 1))


# -- max_queue_size -------------------------------------------------------------------------------
def _resolve_size(ctx: Ctx) -> tuple[Dimension | None, str]:
    why_not = _applies(ctx)
    if why_not:
        return None, why_not
    unit = _batch_unit(ctx)
    sizes = (0, *(d * unit for d in QUEUE_DEPTHS_BATCHES))
    why = (
        f"0 (unbounded) or {', '.join(map(str, QUEUE_DEPTHS_BATCHES))} batches of {unit} requests queued"
        " (a full queue rejects the next request: each depth holds a budget for a range of batch times)"
    )
    if ctx.space.max_queue_sizes is not None:
        sizes, why = ctx.space.max_queue_sizes, "the values asked for (and the model's own)"
    choices = with_values(tuple(sizes), ctx.orig.get(P_QUEUE_SIZE, 0))
    if len(choices) < 2:
        return None, f"only {choices[0]}: " + why
    return Dimension(P_QUEUE_SIZE, tuple(sorted(choices)), when_dynamic_batching=True), why


def _extract_size(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if not cfg.HasField("dynamic_batching"):
        return ABSENT
    return int(cfg.dynamic_batching.default_queue_policy.max_queue_size)


def _policy_is_default(cfg: ModelConfig) -> bool:
    policy = cfg.dynamic_batching.default_queue_policy
    return not (
        policy.max_queue_size
        or policy.default_timeout_microseconds
        or policy.allow_timeout_override
        or policy.timeout_action
    )


def _apply_size(cfg: ModelConfig, value: Any, space: Any) -> None:
    if not cfg.HasField("dynamic_batching"):
        return
    cfg.dynamic_batching.default_queue_policy.max_queue_size = int(value)
    if _policy_is_default(cfg):
        cfg.dynamic_batching.ClearField("default_queue_policy")  # Triton's defaults: no field, as before


# -- queue timeout and its action -----------------------------------------------------------------
def timeout_label(action: int, timeout_us: int) -> str:
    """A queue timeout as the knob names it: 'none' (no timeout), or 'reject:US' / 'delay:US'."""
    if timeout_us <= 0:
        return "none"
    name = next((n for n, v in ACTIONS.items() if v == action), "reject")
    return f"{name}:{int(timeout_us)}"


def parse_timeout_label(label: Any) -> tuple[int, int]:
    """(timeout_action number, default_timeout_microseconds) of a label; raises UsageError."""
    text = str(label)
    if text == "none":
        return ACTIONS["reject"], 0
    name, _, us = text.partition(":")
    try:
        timeout_us = int(us)
    except ValueError:
        timeout_us = -1
    if name not in ACTIONS or timeout_us <= 0:
        raise UsageError(
            f"queue_timeout {label!r} unknown", hint="give none, reject:MICROSECONDS or delay:MICROSECONDS"
        )
    return ACTIONS[name], timeout_us


def _resolve_timeout(ctx: Ctx) -> tuple[Dimension | None, str]:
    why_not = _applies(ctx)
    if why_not:
        return None, why_not
    budget_us = ctx.latency_budget_us
    timeouts = [timeout_label(ACTIONS[a], max(1, math.floor(budget_us * share))) for a, share in TIMEOUT_SHARES]
    labels = ["none", *timeouts]
    why = (
        "none, or REJECT at a quarter or half of the latency budget, or DELAY at half (a request leaving the"
        " queue then still has its batch's execution to fit in the budget); allow_timeout_override kept"
        " (a trial's requests carry no timeout of their own)"
    )
    if ctx.space.queue_timeouts is not None:
        labels, why = list(ctx.space.queue_timeouts), "the values asked for (and the model's own)"
    choices = with_values(tuple(labels), ctx.orig.get(P_QUEUE_TIMEOUT, "none"))
    if len(choices) < 2:
        return None, f"only {choices[0]}: " + why
    return Dimension(P_QUEUE_TIMEOUT, choices, when_dynamic_batching=True), why


def _extract_timeout(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if not cfg.HasField("dynamic_batching"):
        return ABSENT
    policy = cfg.dynamic_batching.default_queue_policy
    return timeout_label(int(policy.timeout_action), int(policy.default_timeout_microseconds))


def _apply_timeout(cfg: ModelConfig, value: Any, space: Any) -> None:
    if not cfg.HasField("dynamic_batching"):
        return
    action, timeout_us = parse_timeout_label(value)
    policy = cfg.dynamic_batching.default_queue_policy
    policy.timeout_action = action  # type: ignore[assignment]  # protobuf enum fields take their numbers
    policy.default_timeout_microseconds = timeout_us
    if _policy_is_default(cfg):
        cfg.dynamic_batching.ClearField("default_queue_policy")


KNOBS: tuple[Knob, ...] = (
    Knob(P_QUEUE_SIZE, _resolve_size, _extract_size, _apply_size),
    Knob(P_QUEUE_TIMEOUT, _resolve_timeout, _extract_timeout, _apply_timeout),
)
