"""Sequence batcher knobs: in the registry, shown by --dry-run, sampled once SEQUENCE_MEASURABLE is on."""

from __future__ import annotations

from typing import Any

from perfkit.server.modelconfig import ModelConfig
from perfkit.tuner._space._core import (
    P_SEQ_CANDIDATES,
    P_SEQ_DELAY,
    SEQUENCE_MEASURABLE,
    Dimension,
)
from perfkit.tuner._space._knob_base import (
    ABSENT,
    Ctx,
    ExtractInfo,
    Knob,
)


def _resolve_seq_delay(ctx: Ctx) -> tuple[Dimension | None, str]:
    if not ctx.sequence:
        return None, "not searched: no sequence batcher"
    high = int(max(200, min(ctx.latency_budget_us / 2, 50_000)))
    return Dimension(P_SEQ_DELAY, low=1, high=high), "sequence batcher max_queue_delay_microseconds"


def _seq_strategy(cfg: ModelConfig) -> Any | None:
    sb = cfg.sequence_batching
    if sb.HasField("oldest"):
        return sb.oldest
    if sb.HasField("direct"):
        return sb.direct
    return None


def _extract_seq_delay(cfg: ModelConfig, info: ExtractInfo) -> Any:
    strategy = _seq_strategy(cfg) if cfg.HasField("sequence_batching") else None
    return ABSENT if strategy is None else int(strategy.max_queue_delay_microseconds)


def _apply_seq_delay(cfg: ModelConfig, value: Any, space: Any) -> None:
    strategy = _seq_strategy(cfg) if cfg.HasField("sequence_batching") else None
    if strategy is not None:
        strategy.max_queue_delay_microseconds = int(value)


def _resolve_seq_candidates(ctx: Ctx) -> tuple[Dimension | None, str]:
    if not (ctx.sequence and ctx.cfg.sequence_batching.HasField("oldest")):
        return None, "not searched: no oldest-first sequence batcher"
    current = int(ctx.cfg.sequence_batching.oldest.max_candidate_sequences) or 1
    choices = tuple(sorted({1, 4, 16, 64, current}))
    return Dimension(P_SEQ_CANDIDATES, choices), "oldest-first max_candidate_sequences"


def _extract_seq_candidates(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if cfg.HasField("sequence_batching") and cfg.sequence_batching.HasField("oldest"):
        return int(cfg.sequence_batching.oldest.max_candidate_sequences)
    return ABSENT


def _apply_seq_candidates(cfg: ModelConfig, value: Any, space: Any) -> None:
    if cfg.HasField("sequence_batching") and cfg.sequence_batching.HasField("oldest"):
        cfg.sequence_batching.oldest.max_candidate_sequences = int(value)


KNOBS: tuple[Knob, ...] = (
    Knob(P_SEQ_DELAY, _resolve_seq_delay, _extract_seq_delay, _apply_seq_delay, (), SEQUENCE_MEASURABLE),
    Knob(
        P_SEQ_CANDIDATES,
        _resolve_seq_candidates,
        _extract_seq_candidates,
        _apply_seq_candidates,
        ("sequence-preferred-le-mbs",),
        SEQUENCE_MEASURABLE,
    ),
)
