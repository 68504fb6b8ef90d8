"""The coordinator: place load workers on a Ray cluster, drive levels together, merge exactly."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import math
import pickle
from collections.abc import Iterator
from pathlib import Path
from time import perf_counter_ns
from typing import Any

from perfkit.distributed._assemble import level_result, partial_digest, snapshots
from perfkit.distributed._cluster import CALL_TIMEOUT_S, Placed, call_all, call_start, connect, place, sync_clocks
from perfkit.distributed._digest import LevelDigest, MergedWindows, WindowDigest
from perfkit.distributed._worker import LevelPlan, Unit
from perfkit.errors import UsageError
from perfkit.loadgen import EngineConfig, ModelIO, grpc_payload, http_payload, sleep_until, synthetic_tensors
from perfkit.measure import (
    LevelOutcome,
    LevelStop,
    MeasureOne,
    PlacedWorker,
    Progress,
    WindowMeasured,
    WorkersPlaced,
    run_levels,
)
from perfkit.measure._context import make_record, server_info
from perfkit.measure._server_stats import composing_models
from perfkit.recorder import tails_certified
from perfkit.records import (
    LevelResult,
    LoadLevel,
    ProfileSpec,
    RunRecord,
)
from perfkit.schedule import read_intervals_file, split_concurrency
from perfkit.server.base import Server
from perfkit.server.remote import parse_host_port

log = logging.getLogger(__name__)

START_LEAD_NS = 300_000_000  # levels start this far ahead of the order, so every worker has it in time


def _units(
    servers: list[Server], spec: ProfileSpec, io: ModelIO, client_hosts: int, intervals: tuple[int, ...]
) -> list[Unit]:
    step = synthetic_tensors(
        io,
        mode=spec.input_data,  # type: ignore[arg-type]  # checked by _check: 'random' or 'zero'
        batch_size=spec.batch_size,
        shapes=spec.shapes,
        string_length=spec.string_length,
        seed=spec.seed,
    )
    n_servers = len(servers)
    count = client_hosts * n_servers
    lcm = math.lcm(n_servers, client_hosts)
    units = []
    for u in range(count):
        # Unit u sends to server u % S from worker (u % H + u // lcm(S, H)) % H: every (worker,
        # server) pair once, and any run of consecutive units spreads over servers and workers
        # alike (consecutive due times, or the first units given a concurrency share).
        server_index = u % n_servers
        worker = (u % client_hosts + u // lcm) % client_hosts
        server = servers[server_index]
        url = server.endpoints.http_url if spec.protocol == "http" else server.endpoints.grpc_url
        if url is None:
            raise UsageError("-i grpc needs every server's gRPC URL", hint="pass -u HOST:GRPC_PORT with -i grpc")
        host, port = parse_host_port(url)
        params = spec.request_parameters
        payload = (
            http_payload(io, step, server.endpoints.http_url, parameters=params)
            if spec.protocol == "http"
            else grpc_payload(io, step, parameters=params)
        )
        cfg = EngineConfig(
            spec.protocol, host, port, (payload,), intervals, seed=spec.seed, max_outstanding=spec.max_outstanding
        )
        units.append(Unit(server=server_index, cfg=cfg, index=u, count=count, worker=worker))
    return units


def _check(spec: ProfileSpec, client_hosts: int, io: ModelIO) -> None:
    if client_hosts < 1:
        raise UsageError(f"--client-hosts {client_hosts}: need at least 1")
    if spec.shared_memory != "none":
        raise UsageError("--shared-memory is local to one host: it cannot be used with --ray")
    if spec.input_data not in ("random", "zero"):
        raise UsageError("--ray supports --input-data random or zero (a data file would have to be on every host)")
    if spec.binary_search:
        raise UsageError("--binary-search is not supported with --ray yet; give the levels to measure")
    if spec.periodic_concurrency is not None:
        raise UsageError("--ray measures time windows: drop --periodic-concurrency-range (or --ray)")
    if spec.batch_size < 1 or (io.max_batch_size == 0 and spec.batch_size > 1):
        raise UsageError(f"-b {spec.batch_size}: model {io.name!r} does not take that batch size")
    if not spec.levels:
        raise UsageError("no load levels to measure")


def profile_distributed(
    servers: list[Server],
    spec: ProfileSpec,
    *,
    address: str = "auto",
    client_hosts: int = 2,
    node_resource: str | None = None,
    command: tuple[str, ...] = (),
    on_progress: Progress | None = None,
    record_path: Path | None = None,
) -> RunRecord:
    """Measure every level of spec with load workers on a Ray cluster, against one or more servers.

    Each of `client_hosts` workers (Ray actors spread over the cluster's nodes) runs one engine
    per server (only nodes offering the custom resource `node_resource`, when given); the
    schedule is split exactly among all of them, levels start at one
    coordinated time, and only digests (histograms and counts) come back. Raises UsageError
    (bad input, no Ray), MeasurementError (with `.record`) when every worker or a server is lost.
    """
    if not servers:
        raise UsageError("no server to measure")
    if spec.mix:
        raise UsageError(
            f"a traffic mix ({spec.mix_label}) is drawn by one engine on this machine; it is not distributed",
            hint="profile the mix without Ray",
        )
    ray = connect(address)
    main = servers[0]
    metadata = main.model_metadata(spec.model, spec.model_version)
    config = main.model_config(spec.model)
    io = ModelIO.from_server(metadata, config, spec.model_version)
    _check(spec, client_hosts, io)
    intervals = tuple(read_intervals_file(spec.request_intervals_file)) if spec.request_intervals_file else ()
    stats_models = [spec.model, *composing_models(config)]
    info = server_info(main, spec.protocol)
    urls = [s.endpoints.http_url for s in servers]
    created = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    units = _units(servers, spec, io, client_hosts, intervals)
    workers = place(ray, units, client_hosts, node_resource)
    if on_progress:
        on_progress(
            WorkersPlaced(
                tuple(
                    PlacedWorker(
                        worker=w.index,
                        host=str(w.identity.get("host", "?")),
                        pid=int(w.identity.get("pid", 0)),
                        node_id=str(w.identity.get("node_id", "")),
                    )
                    for w in workers
                )
            )
        )
    meta: dict[str, Any] = {
        "address": address,
        "client_hosts": client_hosts,
        "node_resource": node_resource,
        "servers": urls,
        "spread": "round_robin",
    }

    def record(levels: list[LevelResult], status: str = "ok", error: str | None = None) -> RunRecord:
        meta["nodes"] = sorted({str(w.identity.get("node_id", "")) for w in workers})
        meta["workers"] = [
            {
                "worker": w.index,
                **w.identity,
                "servers": sorted({urls[u.server] for u in w.units}),
                "clock_offset_ns": w.clock.offset_ns if w.clock else None,
                "clock_uncertainty_ns": w.clock.uncertainty_ns if w.clock else None,
                "status": "died" if w.dead else "ok",
                "note": w.note,
            }
            for w in workers
        ]
        known = [w.clock.uncertainty_ns for w in workers if w.clock]
        meta["clock_uncertainty_max_ns"] = max(known) if known else None
        rec = make_record(
            spec=spec,
            command=command,
            server=info,  # the fleet's URLs are in the record's "distributed" object
            model_config=config,
            levels=levels,
            status=status,
            error=error,
            created_utc=created,
        )
        rec = dataclasses.replace(rec, distributed=dict(meta))
        if record_path is not None:
            rec.save(record_path)
        return rec

    def measure(level: LoadLevel) -> LevelOutcome:
        result, server_died = _measure_level(ray, servers, workers, units, spec, level, stats_models, on_progress)
        outcome = LevelOutcome(result, server_died)
        if server_died or all(w.dead for w in workers):
            why = "a server stopped answering" if server_died else "every load worker was lost"
            outcome.error = f"{why} during {level.label}"
        return outcome

    return run_levels(spec, _closing(ray, workers, measure), record, on_progress)


@contextlib.contextmanager
def _closing(ray: Any, workers: list[Placed], measure: MeasureOne) -> Iterator[MeasureOne]:
    """The placed workers, closed (and their actors killed) when the levels are done, whatever happens."""
    try:
        yield measure
    finally:
        for w in workers:
            if not w.dead:
                try:
                    ray.get(w.handle.close.remote(), timeout=30)
                except Exception:
                    pass
            ray.kill(w.handle)


def _measure_level(
    ray: Any,
    servers: list[Server],
    workers: list[Placed],
    units: list[Unit],
    spec: ProfileSpec,
    level: LoadLevel,
    stats_models: list[str],
    progress: Progress | None,
) -> tuple[LevelResult, bool]:
    closed = level.mode == "concurrency"
    sync_clocks(ray, [w for w in workers if not w.dead])
    live = [w for w in workers if not w.dead]
    for w in live:
        w.digest_bytes, w.usage = 0, (0.0, 0)
    live_units = sorted(u for w in live for u in w.unit_ids)
    shares_all = [0] * len(units)
    if closed:
        for pos, share in zip(live_units, split_concurrency(int(level.value), len(live_units))):
            shares_all[pos] = share
    window_ns = int(spec.measurement_interval_ms * 1e6)
    lead_ns = START_LEAD_NS + max((w.clock.uncertainty_ns * 4 for w in live if w.clock), default=0)
    t0 = perf_counter_ns() + lead_ns
    measure_from = t0 + int(spec.warmup_s * 1e9)
    refs = {}
    for w in live:
        assert w.clock is not None
        plan = LevelPlan(
            level=level,
            t0_ns=w.clock.to_worker(t0),
            measure_from_ns=w.clock.to_worker(measure_from),
            window_ns=window_ns,
            batch_size=spec.batch_size,
            shares=tuple(shares_all[u] for u in w.unit_ids),
            slots=tuple((live_units.index(u), len(live_units)) for u in w.unit_ids),
        )
        refs[w.index] = plan
    call_start(ray, live, refs)
    sleep_until(measure_from)
    before = snapshots(servers, stats_models)
    merged = MergedWindows()
    by_worker: dict[int, list[list[WindowDigest]]] = {w.index: [] for w in workers}
    # the local loop's stopping rule: precision reached, or a drift, the level's budget, or a precision
    # out of its reach; the merged windows are the level's windows
    rule = LevelStop(spec, closed)
    tgt_tput, tgt_lat = rule.targets
    died = False
    windows = 0
    for k in range(1, spec.max_trials + 1):
        end = measure_from + k * window_ns
        sleep_until(end)
        answers = call_all(ray, live, "window", k, timeout_s=CALL_TIMEOUT_S)
        parts: list[WindowDigest] = []
        for w in live:
            if w.index in answers:
                w.digest_bytes += len(pickle.dumps(answers[w.index]))
                by_worker[w.index].append(answers[w.index])
                parts.extend(answers[w.index])
        if not parts:
            break
        windows = k
        last = merged.add(parts)
        merged.sent = sum(p.sent for p in parts)
        merged.completed = sum(p.completed for p in parts)
        precision = merged.precision(spec.percentile, closed)
        if progress:
            progress(WindowMeasured(level, k, last.infer_per_s, merged.p_us(99.0), precision))
        conn_lost = last.completed == 0 and last.errors > 0 and merged.connection_errors
        if conn_lost and not all(s.is_ready() for s in servers):
            died = True
            break
        if closed:
            throughput_ok = precision.throughput_rel is not None and precision.throughput_rel <= tgt_tput
        else:
            throughput_ok = merged.sent > 0 and merged.completed >= merged.sent * (1 - tgt_tput)
        lat_ok = precision.latency_rel is not None and precision.latency_rel <= tgt_lat
        tail_ok = tails_certified(sum(merged.level_n), spec.tail_percentiles)
        if rule.ends_after(k, merged.windows, precision, throughput_ok=throughput_ok, latency_ok=lat_ok,
                           tail_ok=tail_ok):  # fmt: skip
            break
    after = None if died else snapshots(servers, stats_models)
    finals = call_all(ray, live, "finish", windows, 0.5 if died else 30.0, timeout_s=CALL_TIMEOUT_S + 30)
    for index, usage in call_all(ray, live, "usage", timeout_s=CALL_TIMEOUT_S).items():
        workers[index].usage = usage
    for index, answer in finals.items():
        workers[index].digest_bytes += len(pickle.dumps(answer))
    period_s = windows * window_ns / 1e9
    unit_digests: dict[int, LevelDigest] = {}
    for w in live:
        if w.index in finals:
            for pos, d in zip(w.unit_ids, finals[w.index]):
                unit_digests[pos] = d
        else:  # died: keep what it reported, window by window
            reported = by_worker[w.index]
            for j, pos in enumerate(w.unit_ids):
                per_unit = [answer[j] for answer in reported]
                unit_digests[pos] = partial_digest(per_unit, closed, period_s, spec.batch_size)
    lost = [w for w in live if w.dead]
    result = level_result(
        servers, workers, live, units, unit_digests, spec, level, merged, windows, rule.stable, before, after,
        stats_models,
    )  # fmt: skip
    result = rule.noted(result)
    if lost:
        note = "; ".join(
            f"worker {w.index} ({w.identity.get('host', '?')}) died after {len(by_worker[w.index])} window(s):"
            f" its results up to then kept"
            for w in lost
        )
        result = dataclasses.replace(
            result, stable=False, incomplete=True, note=(note + "; " + result.note).strip("; ")
        )
    if died:
        result = dataclasses.replace(result, note=("server died; " + result.note).strip("; "))
    return result, died
