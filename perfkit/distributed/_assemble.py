"""Assembling a level's result from the workers' digests: fleet total, per server, per worker."""

from __future__ import annotations

import dataclasses
from typing import Any

from perfkit.distributed._cluster import Placed
from perfkit.distributed._digest import LevelDigest, MergedWindows, WindowDigest, merge_counts, merge_summaries
from perfkit.distributed._worker import Unit
from perfkit.errors import ServerError
from perfkit.measure import rerun_precision
from perfkit.measure._server_stats import delta, snapshot
from perfkit.records import (
    LatencySummary,
    LevelCounts,
    LevelResult,
    LoadLevel,
    ProfileSpec,
    ServerShare,
    WorkerShare,
    status_name,
)
from perfkit.server.base import Server


def partial_digest(parts: list[WindowDigest], closed: bool, period_s: float, batch_size: int) -> LevelDigest:
    """What a worker that died had reported: its windows, as a level digest (late/dropped unknown)."""
    from perfkit.distributed._digest import summary_from_windows

    completed = sum(p.window.completed for p in parts)
    errors = sum(p.window.errors for p in parts)
    sent = parts[-1].sent if parts else 0
    per_s = 1 / period_s if period_s > 0 else 0.0
    counts = LevelCounts(
        request_count=completed + errors,
        inference_count=completed * batch_size,
        throughput_infer_per_s=completed * batch_size * per_s,
        sent_rps=sent * per_s,
        completed_rps=(completed + errors) * per_s,
        error_count=errors,
        errors={"worker_lost_errors": errors} if errors else {},
        late_count=0,
        dropped_count=0,
        send_lateness_p99_us=None,
    )
    service = summary_from_windows("service", parts, level=closed)
    corrected = None if closed else summary_from_windows("corrected", parts, level=True)
    return LevelDigest(counts, service, corrected, None)


def share_of(digests: list[LevelDigest], closed: bool) -> tuple[Any, LatencySummary, LatencySummary | None]:
    """Merged counts, service and corrected summaries of some units' digests."""

    counts = merge_counts([d.counts for d in digests], [d.lateness_hist for d in digests])
    service = merge_summaries("service", [d.service for d in digests])
    corrected = None if closed else merge_summaries("corrected", [d.corrected for d in digests if d.corrected])
    return counts, service, corrected


def snapshots(servers: list[Server], models: list[str]) -> list[dict[str, Any] | None]:
    """Each server's model statistics now (None where the server does not answer)."""

    out: list[dict[str, Any] | None] = []
    for s in servers:
        try:
            out.append(snapshot(s.model_stats, models))
        except ServerError:
            out.append(None)
    return out


def level_result(
    servers: list[Server],
    workers: list[Placed],
    live: list[Placed],
    units: list[Unit],
    unit_digests: dict[int, LevelDigest],
    spec: ProfileSpec,
    level: LoadLevel,
    merged: MergedWindows,
    windows: int,
    stable: bool,
    before: list[dict[str, Any] | None],
    after: list[dict[str, Any] | None] | None,
    stats_models: list[str],
) -> LevelResult:
    """The level's LevelResult: fleet total, per-server shares (a fleet), per-worker shares."""

    closed = level.mode == "concurrency"
    digests = list(unit_digests.values())
    counts, service, corrected = share_of(digests, closed)
    server_stats = []
    for i in range(len(servers)):
        b = before[i]
        a = after[i] if after is not None else None
        server_stats.append(delta(b, a, stats_models[0]) if b is not None and a is not None else None)
    fleet: tuple[ServerShare, ...] = ()
    if len(servers) > 1:
        shares = []
        for i, s in enumerate(servers):
            mine = [d for pos, d in unit_digests.items() if units[pos].server == i]
            c, sv, co = share_of(mine, closed)
            shares.append(
                ServerShare(
                    url=s.endpoints.http_url,
                    request_count=c.request_count,
                    inference_count=c.inference_count,
                    throughput_infer_per_s=c.throughput_infer_per_s,
                    error_count=c.error_count,
                    late_count=c.late_count,
                    dropped_count=c.dropped_count,
                    service=sv,
                    corrected=co,
                    server=server_stats[i],
                )
            )
        fleet = tuple(shares)
    worker_shares = []
    for w in live:
        mine = [unit_digests[pos] for pos in w.unit_ids if pos in unit_digests]
        c = merge_counts([d.counts for d in mine], [d.lateness_hist for d in mine])
        assert w.clock is not None
        worker_shares.append(
            WorkerShare(
                worker=w.index,
                node=str(w.identity.get("node_id", "")),
                servers=tuple(sorted({servers[u.server].endpoints.http_url for u in w.units})),
                request_count=c.request_count,
                error_count=c.error_count,
                late_count=c.late_count,
                dropped_count=c.dropped_count,
                clock_offset_ns=w.clock.offset_ns,
                clock_uncertainty_ns=w.clock.uncertainty_ns,
                status="died" if w.dead else "ok",
                note=w.note,
                cpu_s=w.usage[0],
                max_rss_bytes=w.usage[1],
                digest_bytes=w.digest_bytes,
            )
        )
    examples: dict[int, str] = {}
    for d in digests:
        for k, v in d.error_examples.items():
            examples.setdefault(k, v)
    note = "; ".join(f"{status_name(k)}: {v.strip()[:160]}" for k, v in sorted(examples.items()))
    return LevelResult(
        load=level,
        batch_size=spec.batch_size,
        stable=stable,
        precision=rerun_precision(merged.precision(spec.percentile, closed)),
        duration_s=windows * spec.measurement_interval_ms / 1e3,
        **dataclasses.asdict(counts),
        service=service,
        corrected=corrected,
        windows=tuple(merged.windows),
        server=server_stats[0] if len(servers) == 1 else None,
        note=note,
        fleet=fleet,
        workers=tuple(worker_shares),
    )
