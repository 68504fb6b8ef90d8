"""Distributed runs in the profile report: each server's share of a fleet, each load worker's."""

from __future__ import annotations

from typing import Any

from perfkit.records import RunRecord
from perfkit.report._figure_types import Table, us_to_ms


def fleet_table(record: RunRecord) -> Table | None:
    """Per level and server: requests, throughput, latency, errors, server queue time; None without a fleet."""
    rows: list[tuple[Any, ...]] = []
    for lv in record.levels:
        if not lv.fleet:
            continue
        total = lv.corrected or lv.service
        rows.append(
            (
                lv.load.label,
                "fleet total",
                lv.request_count,
                lv.throughput_infer_per_s,
                us_to_ms(total.p50_us),
                us_to_ms(total.p99_us),
                lv.error_count,
                None,
            )  # fmt: skip
        )
        for s in lv.fleet:
            lat = s.corrected or s.service
            queue = us_to_ms(s.server.queue_avg_us) if s.server is not None else None
            rows.append(
                (
                    lv.load.label,
                    s.url,
                    s.request_count,
                    s.throughput_infer_per_s,
                    us_to_ms(lat.p50_us),
                    us_to_ms(lat.p99_us),
                    s.error_count,
                    queue,
                )  # fmt: skip
            )
    if not rows:
        return None
    return Table(
        key="fleet",
        title="Fleet: total and per server",
        columns=("load", "server", "requests", "infer/s", "p50 ms", "p99 ms", "errors", "server queue ms"),
        rows=tuple(rows),
        note="Load spread round robin over the servers; each server's latency from the requests sent to it.",
    )


def workers_table(record: RunRecord) -> Table | None:
    """Per level and load worker: its share, late/dropped sends, clock offset and uncertainty, fate."""
    rows: list[tuple[Any, ...]] = []
    for lv in record.levels:
        for w in lv.workers:
            rows.append(
                (
                    lv.load.label,
                    w.worker,
                    w.node[:12],
                    w.request_count,
                    w.late_count,
                    w.dropped_count,
                    w.clock_offset_ns / 1e3,
                    w.clock_uncertainty_ns / 1e3,
                    w.cpu_s,
                    w.status,
                    w.note,
                )  # fmt: skip
            )
    if not rows:
        return None
    return Table(
        key="workers",
        title="Load workers (Ray)",
        columns=(
            "load",
            "worker",
            "node",
            "requests",
            "late",
            "dropped",
            "clock offset us",
            "± us",
            "CPU s",
            "status",
            "note",
        ),  # fmt: skip
        rows=tuple(rows),
        note="Clock offset: the worker's clock minus the coordinator's, from the fastest of 15 round trips;"
        " windows of different workers line up to within ± that.",
    )
