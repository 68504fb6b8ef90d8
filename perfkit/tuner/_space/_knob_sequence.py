"""Sequence batcher knobs: the strategy (direct or oldest), how long an idle sequence keeps its
slot, the strategy's queue delay, direct's minimum slot utilization, and oldest-first's candidate
sequences and preferred batch sizes. A sequence model gets these instead of dynamic batching:
model_config.proto holds one scheduler per model (the `scheduling_choice` oneof), so a candidate never has both.
"""

from __future__ import annotations

from typing import Any

from perfkit.server.modelconfig import ModelConfig
from perfkit.tuner._space._core import (
    P_SEQ_CANDIDATES,
    P_SEQ_DELAY,
    P_SEQ_IDLE,
    P_SEQ_PREF,
    P_SEQ_STRATEGY,
    SEQUENCE_MEASURABLE,
    Dimension,
)
from perfkit.tuner._space._knob_base import ABSENT, Ctx, ExtractInfo, Knob, with_values
from perfkit.tuner._space._knob_batching import pref_label, pref_sizes

STRATEGIES = ("direct", "oldest")
# Triton core's default when max_sequence_idle_microseconds is 0 (src/constants.h
# SEQUENCE_IDLE_DEFAULT_MICROSECONDS, applied in src/model_config_utils.cc NormalizeModelConfig).
SEQUENCE_IDLE_DEFAULT_US = 1_000_000
# Idle timeouts searched: a slot held by an abandoned sequence blocks others until it expires,
# while a timeout shorter than a client's gap between steps ends live sequences (their next
# step fails), so none below one second.
SEQUENCE_IDLE_CHOICES_US = (1_000_000, 5_000_000, 30_000_000)
# Oldest-first max_candidate_sequences searched (0 means max_batch_size: triton-inference-server/core
# src/sequence_batch_scheduler/sequence_batch_scheduler.cc, seq_slot_cnt_).
CANDIDATE_CHOICES = (1, 4, 16, 64)
P_SEQ_MIN_UTIL = "minimum_slot_utilization"
# Direct's minimum_slot_utilization searched: 0 (the default: a batch runs as soon as one slot is
# ready), half, or every slot ready before the queue delay ends (model_config.proto
# StrategyDirect; read in core src/sequence_batch_scheduler/sequence_batch_scheduler.cc DirectSequenceBatch).
MIN_UTIL_CHOICES = (0.0, 0.5, 1.0)


def _strategy_name(cfg: ModelConfig) -> str | None:
    if not cfg.HasField("sequence_batching"):
        return None
    return cfg.sequence_batching.WhichOneof("strategy_choice") or "direct"  # none set: Triton uses direct


def _seq_strategy(cfg: ModelConfig) -> Any | None:
    sb = cfg.sequence_batching
    if sb.HasField("oldest"):
        return sb.oldest
    if sb.HasField("direct"):
        return sb.direct
    return None


def _strategies(ctx: Ctx) -> tuple[str, ...]:
    """The strategies candidates may have (the knob resolves first and decides)."""
    if not ctx.sequence:
        return ()
    orig = _strategy_name(ctx.cfg) or "direct"
    if ctx.mbs <= 0:
        return (orig,)  # neither strategy batches without a batch dimension: keep the model's
    return with_values(STRATEGIES, orig)


# -- strategy -------------------------------------------------------------------------------------
def _resolve_strategy(ctx: Ctx) -> tuple[Dimension | None, str]:
    if not ctx.sequence:
        return None, "not searched: no sequence batcher"
    choices = _strategies(ctx)
    if len(choices) < 2:
        return None, f"fixed {choices[0]}: max_batch_size 0 (nothing to batch)"
    why = "direct (one batch slot per sequence) or oldest (batches the oldest ready sequences' requests)"
    return Dimension(P_SEQ_STRATEGY, tuple(choices)), why


def _extract_strategy(cfg: ModelConfig, info: ExtractInfo) -> Any:
    name = _strategy_name(cfg)
    return ABSENT if name is None else name


def _apply_strategy(cfg: ModelConfig, value: Any, space: Any) -> None:
    if not cfg.HasField("sequence_batching") or _strategy_name(cfg) == value:
        return
    sb = cfg.sequence_batching
    current = _seq_strategy(cfg)
    delay_us = int(current.max_queue_delay_microseconds) if current is not None else 0
    if value == "oldest":
        sb.oldest.SetInParent()  # the oneof clears direct; preferred sizes unset: Triton uses [max_batch_size]
        sb.oldest.max_queue_delay_microseconds = delay_us
    else:
        sb.direct.SetInParent()
        sb.direct.max_queue_delay_microseconds = delay_us


# -- idle timeout ---------------------------------------------------------------------------------
def _resolve_idle(ctx: Ctx) -> tuple[Dimension | None, str]:
    if not ctx.sequence:
        return None, "not searched: no sequence batcher"
    orig = int(ctx.cfg.sequence_batching.max_sequence_idle_microseconds) or SEQUENCE_IDLE_DEFAULT_US
    choices = tuple(sorted(set(SEQUENCE_IDLE_CHOICES_US) | {orig}))
    return Dimension(P_SEQ_IDLE, choices), "max_sequence_idle_microseconds: how long an idle sequence keeps its slot"


def _extract_idle(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if not cfg.HasField("sequence_batching"):
        return ABSENT
    return int(cfg.sequence_batching.max_sequence_idle_microseconds) or SEQUENCE_IDLE_DEFAULT_US


def _apply_idle(cfg: ModelConfig, value: Any, space: Any) -> None:
    if cfg.HasField("sequence_batching"):
        cfg.sequence_batching.max_sequence_idle_microseconds = int(value)


# -- queue delay ----------------------------------------------------------------------------------
def _resolve_seq_delay(ctx: Ctx) -> tuple[Dimension | None, str]:
    if not ctx.sequence:
        return None, "not searched: no sequence batcher"
    if ctx.mbs <= 0:
        return None, "not searched: max_batch_size 0 (nothing to wait for)"
    high = int(max(200, min(ctx.latency_budget_us / 2, 50_000)))
    why = "the strategy's max_queue_delay_microseconds, log range, never past half the latency budget"
    return Dimension(P_SEQ_DELAY, low=1, high=high), why


def _extract_seq_delay(cfg: ModelConfig, info: ExtractInfo) -> Any:
    strategy = _seq_strategy(cfg) if cfg.HasField("sequence_batching") else None
    return ABSENT if strategy is None else int(strategy.max_queue_delay_microseconds)


def _apply_seq_delay(cfg: ModelConfig, value: Any, space: Any) -> None:
    if not cfg.HasField("sequence_batching"):
        return
    strategy = _seq_strategy(cfg)
    if strategy is None:
        cfg.sequence_batching.direct.SetInParent()
        strategy = cfg.sequence_batching.direct
    strategy.max_queue_delay_microseconds = int(value)


# -- direct: minimum slot utilization -------------------------------------------------------------
def _resolve_min_util(ctx: Ctx) -> tuple[Dimension | None, str]:
    if "direct" not in _strategies(ctx):
        return None, "not searched: no direct sequence batcher"
    if ctx.mbs <= 1:
        return None, "not searched: max_batch_size 1 or 0 (one slot: nothing to wait for)"
    orig = float(ctx.cfg.sequence_batching.direct.minimum_slot_utilization)
    choices = tuple(sorted(set(MIN_UTIL_CHOICES) | {orig}))
    why = (
        "direct minimum_slot_utilization: the share of slots ready that runs a batch before the queue delay"
        " ends (applies to direct only, and only with a queue delay)"
    )
    return Dimension(P_SEQ_MIN_UTIL, choices), why


def _extract_min_util(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if _strategy_name(cfg) != "direct":
        return ABSENT
    return float(cfg.sequence_batching.direct.minimum_slot_utilization)


def _apply_min_util(cfg: ModelConfig, value: Any, space: Any) -> None:
    if _strategy_name(cfg) != "direct" or (not value and not cfg.sequence_batching.HasField("direct")):
        return
    cfg.sequence_batching.direct.minimum_slot_utilization = float(value)


# -- oldest-first: candidate sequences and preferred batch sizes ----------------------------------
def _resolve_seq_candidates(ctx: Ctx) -> tuple[Dimension | None, str]:
    if "oldest" not in _strategies(ctx):
        return None, "not searched: no oldest-first sequence batcher"
    current = int(ctx.cfg.sequence_batching.oldest.max_candidate_sequences) or max(1, ctx.mbs)
    choices = tuple(sorted(set(CANDIDATE_CHOICES) | {current}))
    return Dimension(P_SEQ_CANDIDATES, choices), "oldest-first max_candidate_sequences (applies to oldest only)"


def _extract_seq_candidates(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if cfg.HasField("sequence_batching") and cfg.sequence_batching.HasField("oldest"):
        return int(cfg.sequence_batching.oldest.max_candidate_sequences) or max(1, int(cfg.max_batch_size))
    return ABSENT


def _apply_seq_candidates(cfg: ModelConfig, value: Any, space: Any) -> None:
    if cfg.HasField("sequence_batching") and cfg.sequence_batching.HasField("oldest"):
        cfg.sequence_batching.oldest.max_candidate_sequences = int(value)


def _resolve_seq_pref(ctx: Ctx) -> tuple[Dimension | None, str]:
    if "oldest" not in _strategies(ctx) or ctx.mbs <= 1:
        return None, "not searched: no oldest-first sequence batcher with a batch to prefer"
    choices: tuple[Any, ...] = ("max", "pow2")
    if ctx.cfg.sequence_batching.HasField("oldest"):
        choices = with_values(choices, _extract_seq_pref(ctx.cfg, ExtractInfo(ctx.facts.backend)))
    why = "oldest-first preferred_batch_size: max (Triton's default) or pow2 (powers of two up to max_batch_size)"
    return Dimension(P_SEQ_PREF, choices), why


def _extract_seq_pref(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if not (cfg.HasField("sequence_batching") and cfg.sequence_batching.HasField("oldest")):
        return ABSENT
    mbs = int(cfg.max_batch_size)
    sizes = list(cfg.sequence_batching.oldest.preferred_batch_size) or ([mbs] if mbs > 0 else [])
    return pref_label(sizes, mbs)


def _apply_seq_pref(cfg: ModelConfig, value: Any, space: Any) -> None:
    if not (cfg.HasField("sequence_batching") and cfg.sequence_batching.HasField("oldest")):
        return
    oldest = cfg.sequence_batching.oldest
    keep = pref_sizes(value, int(cfg.max_batch_size), list(oldest.preferred_batch_size))
    del oldest.preferred_batch_size[:]
    oldest.preferred_batch_size.extend(keep)


_SEQ_RULES = ("sequence-batcher-kept",)
# Order matters: the strategy first, so the oldest-only knobs find the strategy a candidate has.
KNOBS: tuple[Knob, ...] = (
    Knob(P_SEQ_STRATEGY, _resolve_strategy, _extract_strategy, _apply_strategy, _SEQ_RULES, SEQUENCE_MEASURABLE),
    Knob(P_SEQ_IDLE, _resolve_idle, _extract_idle, _apply_idle, _SEQ_RULES, SEQUENCE_MEASURABLE),
    Knob(
        P_SEQ_DELAY,
        _resolve_seq_delay,
        _extract_seq_delay,
        _apply_seq_delay,
        ("sequence-batcher-kept", "sequence-direct-slot-utilization"),
        SEQUENCE_MEASURABLE,
    ),
    Knob(
        P_SEQ_MIN_UTIL,
        _resolve_min_util,
        _extract_min_util,
        _apply_min_util,
        ("sequence-batcher-kept", "sequence-direct-slot-utilization"),
        SEQUENCE_MEASURABLE,
    ),
    Knob(
        P_SEQ_CANDIDATES,
        _resolve_seq_candidates,
        _extract_seq_candidates,
        _apply_seq_candidates,
        _SEQ_RULES,
        SEQUENCE_MEASURABLE,
    ),
    Knob(
        P_SEQ_PREF,
        _resolve_seq_pref,
        _extract_seq_pref,
        _apply_seq_pref,
        ("sequence-batcher-kept", "sequence-preferred-le-mbs"),
        SEQUENCE_MEASURABLE,
    ),
)
