"""The profile report page: what was measured, curves, distributions, server side, GPU, quality."""

from __future__ import annotations

import json
from typing import Any

from perfkit.records import RunRecord, ServerInfo, to_dict
from perfkit.report import _figures as F
from perfkit.report import _streaming_figures as SF
from perfkit.report._fleet import fleet_table, workers_table
from perfkit.report._mix import mix_figures, mix_table
from perfkit.report._page import Banner, Block, Card, Page, PageBuilder, Section, command_line, fmt_value, machine_facts


def config_summary(config: dict[str, Any]) -> str:
    """The served config's tuning-relevant fields in a few words."""
    parts = []
    if "max_batch_size" in config:
        parts.append(f"max_batch_size {config['max_batch_size']}")
    dyn = config.get("dynamic_batching")
    if isinstance(dyn, dict):
        delay = dyn.get("max_queue_delay_microseconds")
        parts.append(f"dynamic batching ({delay} µs queue delay)" if delay else "dynamic batching")
    elif "max_batch_size" in config:
        parts.append("no dynamic batching")
    groups = config.get("instance_group")
    if isinstance(groups, list) and groups:
        parts.append(
            ", ".join(f"{g.get('count', 1)} × {str(g.get('kind', '')).removeprefix('KIND_')}" for g in groups)
            + " instances"
        )
    params = config.get("parameters")
    if isinstance(params, dict) and "precision" in params:
        prec = params["precision"]
        parts.append(str(prec.get("string_value", prec) if isinstance(prec, dict) else prec))
    return ", ".join(parts) or "—"


def server_line(server: ServerInfo) -> str:
    """'Triton 2.51.0 · mode local · protocol http · http_url ...': every field the record holds."""
    fields = to_dict(server)
    rest = [f"{k.replace('_', ' ')} {v}" for k, v in fields.items() if k != "version" and v not in (None, "")]
    return " · ".join([f"Triton {server.version or '?'}", *rest])


def measured_facts(rec: RunRecord) -> list[tuple[str, str]]:
    """'What was measured': model, config, server, spec, command, versions, time."""
    model = rec.model
    spec = rec.spec
    facts = [
        ("model", f"{model.name} (version {model.version or 'latest'})"),
        *([("traffic mix", f"{spec.mix_label} (the config shown is {model.name}'s)")] if spec.mix else []),
        ("config served", config_summary(model.config)),
        ("served config sha256", model.served_config_sha256 or "—"),
        ("server", server_line(rec.server)),
    ]
    spec_bits = []
    for key, name in (
        ("protocol", "protocol"),
        ("batch_size", "batch size"),
        ("measurement_interval_ms", "window ms"),
        ("stability_percentage", "stability %"),
        ("percentile", "percentile"),
        ("input_data", "input data"),
        ("shared_memory", "shared memory"),
    ):
        v = getattr(spec, key)
        if v is not None:
            spec_bits.append(f"{name} {v:g}" if isinstance(v, float) else f"{name} {v}")
    if spec_bits:
        facts.append(("measurement", ", ".join(spec_bits)))
    facts.append(("command", command_line(rec.command)))
    facts.append(("perfkit", rec.perfkit_version))
    facts.append(("when", rec.created_utc))
    facts.append(("status", rec.status + (f": {rec.error}" if rec.error else "")))
    return facts


def _cards(rec: RunRecord) -> list[Card]:
    h = F.headline(rec)
    cards = []
    if h["peak_infer_per_s"] is not None:
        cards.append(Card("peak throughput", fmt_value(h["peak_infer_per_s"]), "infer/s", f"at {h['peak_level']}"))
        cards.append(
            Card(
                "p99 at peak", fmt_value(h["peak_p99_ms"]), "ms", f"{h['latency_kind']}; p50 {h['peak_p50_ms']:.2f} ms"
            )
        )
    cards.append(
        Card(
            "levels",
            str(h["levels"]),
            "",
            "all stable" if not h["unstable"] else f"{h['unstable']} unstable",
            "" if not h["unstable"] else "warn",
        )
    )
    problems = h["errors"] + h["dropped"]
    cards.append(
        Card(
            "errors / dropped",
            f"{h['errors']:,} / {h['dropped']:,}",
            "",
            f"{h['late']:,} late sends",
            "bad" if problems else "good",
        )
    )
    return cards


def _banners(rec: RunRecord, prefix: str) -> list[Banner]:
    out = []
    if rec.status != "ok":
        out.append(Banner("bad", f"{prefix}the run {rec.status}: {rec.error or 'no reason recorded'}"))
    unstable = [lv.load.label for lv in rec.levels if not lv.stable]
    if unstable:
        out.append(
            Banner("warn", f"{prefix}not stable within the requested precision: {', '.join(unstable)}; read with care.")
        )
    errs = sum(lv.error_count for lv in rec.levels)
    if errs:
        out.append(Banner("warn", f"{prefix}{errs:,} requests failed; see Measurement quality."))
    lost = [lv.load.label for lv in rec.levels if lv.incomplete]
    if lost:
        out.append(Banner("bad", f"{prefix}a load worker died during {', '.join(lost)}; partial results kept."))
    dropped = sum(lv.dropped_count for lv in rec.levels)
    if dropped:
        out.append(
            Banner(
                "warn", f"{prefix}{dropped:,} sends dropped: the target rate was not offered in full at some levels."
            )
        )
    return out


def add_run_sections(b: PageBuilder, rec: RunRecord, sid: str, heading: str) -> None:
    """Every per-run section of the profile report, ids suffixed with sid."""
    s: Section = b.section(f"measured{sid}", f"What was measured{heading}")
    s.blocks.append(Block(kind="facts", facts=measured_facts(rec)))
    s.blocks.append(Block(kind="facts", title="Machine", facts=machine_facts(rec.machine)))
    if rec.model.config:
        s.blocks.append(
            Block(kind="pre", title="Model config as served (JSON)", text=json.dumps(rec.model.config, indent=2))
        )

    if rec.spec.mix:
        s = b.section(
            f"mix{sid}",
            f"Traffic mix{heading}",
            "Each model of the mix under the same load: its own requests, throughput and latency.",
        )
        b.table(s, mix_table(rec))  # the figures first-hand: each model beside the whole mix
        for fig in mix_figures(rec):
            b.figure(s, fig)

    s = b.section(
        f"distribution{sid}",
        f"Latency distribution{heading}",
        "How latency spreads at each load level: a steep curve is a consistent service.",
    )
    for kind in F.level_kinds(rec):
        b.figure(s, F.latency_cdf(rec, kind), F.percentile_table(rec, kind))

    if SF.has_streaming(rec):
        s = b.section(
            f"streaming{sid}",
            f"Streaming{heading}",
            "Time to first token, the gaps between tokens, and token throughput per load level.",
        )
        b.figure(s, SF.streaming_cdf(rec, "ttft"), SF.streaming_table(rec))
        b.figure(s, SF.streaming_cdf(rec, "itl"))
        b.figure(s, SF.tokens_vs_load([rec]))

    breakdown = F.server_breakdown(rec)
    batches = F.batch_sizes(rec)
    if breakdown or batches:
        s = b.section(f"server{sid}", f"Inside the server{heading}", "Triton's statistics, as deltas over each level.")
        if breakdown:
            b.figure(s, *breakdown)
        if batches:
            b.figure(s, *batches)

    gpu = F.gpu_timeline(rec)
    if gpu:
        s = b.section(f"gpu{sid}", f"GPU{heading}")
        util, mem, table = gpu
        b.figure(s, util)
        b.figure(s, mem, table)

    fleet, workers = fleet_table(rec), workers_table(rec)
    if fleet or workers:  # distributed runs (perfkit profile --ray)
        s = b.section(f"fleet{sid}", f"Fleet and load workers{heading}", "Where the load came from and went to.")
        for found in (fleet, workers):
            if found is not None:
                b.table(s, found)

    s = b.section(
        f"quality{sid}",
        f"Measurement quality{heading}",
        "Stability, the precision reached, errors, and sends that fell behind or were dropped.",
    )
    b.table(s, F.quality_table(rec))
    win = F.windows_figure(rec)
    if win:
        b.figure(s, *win)


def profile_page(records: list[RunRecord]) -> Page:
    """The profile report for one or more runs."""
    first = records[0]
    names = sorted({str(r.model.name) for r in records})
    title = f"{', '.join(names)}: throughput and latency"
    sub = (
        f"{len(records)} runs · " if len(records) > 1 else ""
    ) + f"Triton {first.server.version} · {first.created_utc}"
    page = Page(kind="profile", title=title, subtitle=sub, data={"runs": records})
    b = PageBuilder(page)
    if len(records) == 1:
        page.cards = _cards(first)
    for i, rec in enumerate(records):
        prefix = f"{F.run_label(rec, i, records)}: " if len(records) > 1 else ""
        page.banners.extend(_banners(rec, prefix))

    s = b.section("curve", "Throughput vs latency", "Where latency starts to climb is the useful capacity.")
    figures = F.throughput_latency_per_model(records)
    for fig in figures[:-1]:
        b.figure(s, fig)
    b.figure(s, figures[-1], *(F.levels_table(r) for r in records))
    for i, rec in enumerate(records):
        sid = "" if len(records) == 1 else f"-{i + 1}"
        heading = "" if len(records) == 1 else f" — {F.run_label(rec, i, records)}"
        add_run_sections(b, rec, sid, heading)
    return page
