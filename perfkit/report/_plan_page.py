"""The capacity plan page: replicas for a target rate, the evidence per replica and its interval,
and the fleet check when one ran (`perfkit plan --report`)."""

from __future__ import annotations

from typing import Any

from perfkit.capacity import CapacityPlan, PredictedPlan
from perfkit.report._figure_types import Table
from perfkit.report._page import Banner, Card, Page, PageBuilder


def plan_page(
    plan: CapacityPlan, verification: dict[str, Any] | None = None, predicted: PredictedPlan | None = None
) -> Page:
    """The page of one plan (verification: the 'verification' object of plan --json, if any;
    predicted: the plan from a predicted rate, shown beside the measured one)."""
    e = plan.evidence
    page = Page(
        kind="plan",
        title=f"{e.model or 'model'}: {plan.replicas} replicas for {plan.target_rps:,.0f} req/s",
        subtitle=f"p{e.percentile:g} <= {e.budget_ms:g} ms · headroom {plan.headroom:.0%}",
        data=plan.to_json()
        | ({"verification": verification} if verification else {})
        | ({"predicted": predicted.to_json()} if predicted else {}),
    )
    page.sentence = plan.lines()[2]
    page.cards += [
        Card("replicas", str(plan.replicas), "", f"{plan.replicas_at_point} at the point estimate", "good"),
        Card("per replica", f"{e.rate_rps:,.1f}", "req/s", f"95% interval {e.low_rps:,.1f}–{e.high_rps:,.1f}"),
        Card("target", f"{plan.target_rps:,.0f}", "req/s", f"{plan.per_replica_rps:,.1f} req/s per replica"),
    ]
    for note in plan.notes:
        page.banners.append(Banner("warn", note))
    if verification is not None:
        page.banners.append(Banner("info" if verification.get("held") else "bad", str(verification.get("line", ""))))
    builder = PageBuilder(page)
    section = builder.section("evidence", "Evidence", "One replica's sustainable rate within the budget.")
    rows = (
        ("sustainable rate (req/s)", e.rate_rps),
        ("95% interval low (req/s)", e.low_rps),
        ("95% interval high (req/s)", e.high_rps),
        ("measured at", e.load),
        ("load kind", "open loop (arrival rate)" if e.open_loop else "closed loop (concurrency)"),
        (f"p{e.percentile:g} at that load (ms)", e.latency_ms),
        ("source", e.source),
    )
    builder.table(section, Table(key="evidence", title="Per replica", columns=("", "value"), rows=rows))
    if predicted is not None:
        _predicted_section(builder, page, predicted)
    return page


def _predicted_section(builder: PageBuilder, page: Page, pp: PredictedPlan) -> None:
    p = pp.evidence
    page.cards.append(
        Card(
            "predicted",
            str(pp.replicas),
            "replicas",
            f"{pp.replicas_low}–{pp.replicas_high} over the calibration error",
        )
    )
    which = f"the best of {p.configs_scored} predicted" if p.configs_scored > 1 else "named for the plan"
    intro = (
        f"Replicas from the rate the batcher simulator predicts for {p.label} ({which}): a prediction, not a"
        " measurement. Its band is the calibration fit's worst error."
    )
    section = builder.section("predicted", "Predicted", intro)
    rows: list[tuple[str, Any]] = [
        ("replicas (predicted)", pp.replicas),
        ("replicas over the calibration error", f"{pp.replicas_low}–{pp.replicas_high}"),
        ("predicted sustainable rate (req/s)", p.rate_rps),
        ("band low (req/s)", p.low_rps),
        ("band high (req/s)", p.high_rps),
        ("calibration error (fit, worst)", f"±{p.error_rel:.1%}"),
        ("calibration error (fit, RMS)", f"{p.fit_rms_rel:.1%}"),
        (f"p{p.percentile:g} predicted at that rate (ms)", p.latency_ms),
        ("arrivals", p.arrival),
    ]
    if p.checked and p.measured_median_rel is not None and p.measured_worst_rel is not None:
        rows.append(
            (
                "predictions the tune measured",
                f"off by {p.measured_median_rel:.0%} median, {p.measured_worst_rel:.0%} worst ({p.checked} configs)",
            )
        )
    for note in pp.lines()[3:]:
        if note.startswith("note: "):
            page.banners.append(Banner("warn", note.removeprefix("note: ")))
    builder.table(
        section, Table(key="predicted", title="Per replica, predicted", columns=("", "value"), rows=tuple(rows))
    )
