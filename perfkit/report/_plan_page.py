"""The capacity plan page: replicas for a target rate, the evidence per replica and its interval,
and the fleet check when one ran (`perfkit plan --report`)."""

from __future__ import annotations

from typing import Any

from perfkit.capacity import CapacityPlan
from perfkit.report._figure_types import Table
from perfkit.report._page import Banner, Card, Page, PageBuilder


def plan_page(plan: CapacityPlan, verification: dict[str, Any] | None = None) -> Page:
    """The page of one plan (verification: the 'verification' object of plan --json, if any)."""
    e = plan.evidence
    page = Page(
        kind="plan",
        title=f"{e.model or 'model'}: {plan.replicas} replicas for {plan.target_rps:,.0f} req/s",
        subtitle=f"p{e.percentile:g} <= {e.budget_ms:g} ms · headroom {plan.headroom:.0%}",
        data=plan.to_json() | ({"verification": verification} if verification else {}),
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
    return page
