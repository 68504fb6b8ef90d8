"""Batching knobs: max_batch_size, dynamic batching, its queue delay and preferred batch sizes."""

from __future__ import annotations

from typing import Any

from perfkit.errors import UsageError
from perfkit.server.modelconfig import ModelConfig
from perfkit.tuner._space._core import (
    DEFAULT_MAX_BATCH_SIZE_LIMIT,
    DEFAULT_PREFERRED,
    P_DB,
    P_DELAY,
    P_MBS,
    P_PREF,
    PREFERRED_CHOICES,
    Dimension,
)
from perfkit.tuner._space._knob_base import (
    ABSENT,
    FIXED_BATCH_CEILING,
    Ctx,
    ExtractInfo,
    Knob,
    pow2_sizes,
    with_values,
)


def _mbs_floor(ctx: Ctx) -> tuple[int, str]:
    floors = [(ctx.facts.warmup_max_batch, "its model_warmup sends that batch")]
    if ctx.facts.ensemble_max_batch and ctx.mbs >= ctx.facts.ensemble_max_batch:
        # Triton refuses to load an ensemble whose step batches less than it does
        # (triton-inference-server/core src/ensemble_scheduler/ensemble_utils.cc): a smaller
        # max_batch_size here would stop that ensemble loading on the next restart.
        floors.append(
            (
                ctx.facts.ensemble_max_batch,
                f"ensemble {', '.join(ctx.facts.ensembles)} batches up to {ctx.facts.ensemble_max_batch}"
                " and would no longer load",
            )
        )
    if ctx.sequence and ctx.cfg.sequence_batching.HasField("oldest"):
        pref = list(ctx.cfg.sequence_batching.oldest.preferred_batch_size)
        floors.append((max(pref, default=0), "its sequence batcher prefers that batch"))
    return max(floors, key=lambda f: f[0])


def _resolve_mbs(ctx: Ctx) -> tuple[Dimension | None, str]:
    mbs = ctx.mbs
    if mbs <= 0:
        if ctx.space.max_batch_sizes:
            ctx.notes.append(f"max_batch_size not searched: {ctx.name!r} has max_batch_size 0 (no batch dimension)")
        return None, "max_batch_size 0: the model takes no batch dimension; it stays 0"
    if ctx.space.max_batch_sizes:
        if 0 in ctx.space.max_batch_sizes:
            raise UsageError(f"--max-batch-sizes: 0 would remove the batch dimension of {ctx.name!r}; use sizes >= 1")
        choices = tuple(sorted(set(ctx.space.max_batch_sizes) | {mbs}))
        why = "the values asked for (and the model's own)"
    else:
        fixed = FIXED_BATCH_CEILING.get(ctx.facts.backend)
        if ctx.space.max_batch_size_limit is not None:
            ceiling, why = (
                ctx.space.max_batch_size_limit,
                f"by doubling up to the limit {ctx.space.max_batch_size_limit}",
            )
        elif fixed:
            ceiling, why = mbs, f"up to the model's {mbs}: {fixed} (raise with --max-batch-size-limit)"
        else:
            ceiling = max(DEFAULT_MAX_BATCH_SIZE_LIMIT, mbs)
            why = (
                f"by doubling up to {ceiling}, above the model's {mbs} (assumes a dynamic batch dimension;"
                " bound with --max-batch-size-limit)"
            )
        values = {2**i for i in range(0, 31) if 2**i <= ceiling} | {mbs, ceiling}
        choices = tuple(sorted(values))
    if ctx.facts.ensemble_max_batch > min(choices):
        ctx.notes.append(
            f"ensemble {', '.join(ctx.facts.ensembles)} batches up to {ctx.facts.ensemble_max_batch}: no candidate"
            f" goes below it (the ensemble would no longer load)"
            if ctx.mbs >= ctx.facts.ensemble_max_batch
            else f"ensemble {', '.join(ctx.facts.ensembles)} batches up to {ctx.facts.ensemble_max_batch}, more than"
            f" {ctx.name!r} allows already: that ensemble does not load with this repository as it is"
        )
    floor, because = _mbs_floor(ctx)
    if floor > 1 and any(c < floor for c in choices):
        choices = tuple(c for c in choices if c >= floor) or (mbs,)
        why += f"; none below {floor}: {because}"
    if len(choices) < 2:
        return None, f"only {choices[0]}: " + why
    return Dimension(P_MBS, choices), why


def _extract_mbs(cfg: ModelConfig, info: ExtractInfo) -> Any:
    return int(cfg.max_batch_size)


def _apply_mbs(cfg: ModelConfig, value: Any, space: Any) -> None:
    cfg.max_batch_size = int(value)


# -- dynamic batching -----------------------------------------------------------------------
def _resolve_db(ctx: Ctx) -> tuple[Dimension | None, str]:
    if ctx.mbs <= 0 or ctx.sequence:
        why = "has max_batch_size 0" if ctx.mbs <= 0 else "uses the sequence batcher"
        if ctx.space.dynamic_batching and True in ctx.space.dynamic_batching:
            ctx.notes.append(f"dynamic batching not searched: {ctx.name!r} {why}")
        ctx.db_choices = (bool(ctx.orig[P_DB]),)
        return None, f"not searched: the model {why}"
    choices = ctx.space.dynamic_batching if ctx.space.dynamic_batching is not None else (True, False)
    choices = with_values(choices, bool(ctx.orig[P_DB]))
    ctx.db_choices = tuple(choices)
    if len(choices) > 1:
        return Dimension(P_DB, tuple(sorted(choices, reverse=True))), "on and off (Triton batches only with it on)"
    return None, f"fixed {'on' if choices[0] else 'off'}"


def _extract_db(cfg: ModelConfig, info: ExtractInfo) -> Any:
    return cfg.HasField("dynamic_batching")


def _apply_db(cfg: ModelConfig, value: Any, space: Any) -> None:
    if value:
        cfg.dynamic_batching.SetInParent()
    else:
        cfg.ClearField("dynamic_batching")


def _resolve_delay(ctx: Ctx) -> tuple[Dimension | None, str]:
    if True not in ctx.db_choices or ctx.mbs <= 0 or ctx.sequence:
        return None, "not searched: no dynamic batching"
    low, high = ctx.space.queue_delay_us or (50, int(max(200, min(ctx.latency_budget_us / 2, 50_000))))
    if ctx.orig.get(P_DELAY):
        low, high = min(low, ctx.orig[P_DELAY]), max(high, ctx.orig[P_DELAY])
    low = max(low, 1)  # log scale: 0 is "no delay", represented by the range's low end
    why = "log range, never past half the latency budget; 0 when max_batch_size is 1 (nothing to wait for)"
    return Dimension(P_DELAY, low=low, high=max(high, low), when_dynamic_batching=True), why


def _extract_delay(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if not cfg.HasField("dynamic_batching"):
        return ABSENT
    return int(cfg.dynamic_batching.max_queue_delay_microseconds)


def _apply_delay(cfg: ModelConfig, value: Any, space: Any) -> None:
    if cfg.HasField("dynamic_batching"):
        cfg.dynamic_batching.max_queue_delay_microseconds = int(value)


def _resolve_pref(ctx: Ctx) -> tuple[Dimension | None, str]:
    if True not in ctx.db_choices or ctx.mbs <= 0 or ctx.sequence:
        return None, "not searched: no dynamic batching"
    pref = ctx.space.preferred_batch_sizes or DEFAULT_PREFERRED
    if P_PREF in ctx.orig:
        pref = with_values(pref, ctx.orig[P_PREF])  # the user's own sizes (custom:a,b) too: trial 0 fits
        if str(ctx.orig[P_PREF]).startswith("custom:"):
            pref = with_values(pref, "max")  # yours cut to a smaller max_batch_size can leave [max_batch_size]
    why = "none (batch up to max_batch_size) or pow2 (powers of two up to each max_batch_size); custom: yours that fit"
    return Dimension(P_PREF, tuple(pref), when_dynamic_batching=True), why


def pref_label(pref: list[int], mbs: int) -> str:
    """The label of preferred sizes: none, pow2, max, or custom:a,b (pow2 wins where they coincide)."""
    if not pref:
        return "none"
    if pref == pow2_sizes(mbs):
        return "pow2"
    if pref == [mbs]:
        return "max"
    return "custom:" + ",".join(map(str, pref))


def _extract_pref(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if not cfg.HasField("dynamic_batching"):
        return ABSENT
    return pref_label(list(cfg.dynamic_batching.preferred_batch_size), int(cfg.max_batch_size))


def pref_sizes(pref: Any, mbs: int, current: list[int]) -> list[int]:
    """The preferred sizes a label stands for at this max_batch_size. Raises UsageError."""
    if pref is None:
        return [s for s in current if s <= mbs]  # the original's own sizes that still fit
    if pref == "none":
        return []
    if pref == "max":
        return [mbs]
    if pref == "pow2":
        return pow2_sizes(mbs)
    if str(pref).startswith("custom:"):
        return [int(s) for s in str(pref)[7:].split(",") if s and int(s) <= mbs]
    raise UsageError(f"preferred_batch_sizes {pref!r} unknown", hint=f"choose from {', '.join(PREFERRED_CHOICES)}")


def _apply_pref(cfg: ModelConfig, value: Any, space: Any) -> None:
    if not cfg.HasField("dynamic_batching"):
        return
    db = cfg.dynamic_batching
    keep = pref_sizes(value, int(cfg.max_batch_size), list(db.preferred_batch_size))
    del db.preferred_batch_size[:]
    db.preferred_batch_size.extend(keep)


KNOBS: tuple[Knob, ...] = (
    Knob(
        P_MBS, _resolve_mbs, _extract_mbs, _apply_mbs, ("mbs-non-negative", "warmup-batch-le-mbs", "ensemble-step-mbs")
    ),
    Knob(P_DB, _resolve_db, _extract_db, _apply_db),
    Knob(P_DELAY, _resolve_delay, _extract_delay, _apply_delay),
    Knob(P_PREF, _resolve_pref, _extract_pref, _apply_pref, ("dynamic-preferred-le-mbs",)),
)
