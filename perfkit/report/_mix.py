"""A traffic mix in the profile report: each model's figures beside the whole mix's, level by level."""

from __future__ import annotations

from perfkit.gate import mix_views
from perfkit.records import RunRecord
from perfkit.report._figure_types import LineFigure, Table
from perfkit.report._figures import throughput_latency_per_model


def mix_table(record: RunRecord) -> Table:
    """Per level: the whole mix, then each model (weight, requests, throughput, latency, errors)."""
    rows = []
    for lv in record.levels:
        parts = [("whole mix", sum(w for _, w in record.spec.mix), lv)]
        parts += [(share.model, share.weight, share.result) for share in lv.models]
        for name, weight, r in parts:
            s = r.latency()
            rows.append(
                (
                    lv.load.label,
                    name,
                    weight,
                    r.request_count,
                    r.throughput_infer_per_s,
                    s.p50_us / 1000,
                    s.p90_us / 1000,
                    s.p95_us / 1000,
                    s.p99_us / 1000,
                    r.error_count,
                    r.dropped_count,
                )
            )
    return Table(
        key="mix",
        title=f"Traffic mix {record.spec.mix_label}",
        columns=(
            "load",
            "model",
            "weight",
            "requests",
            "infer/s",
            "p50 ms",
            "p90 ms",
            "p95 ms",
            "p99 ms",
            "errors",
            "dropped",
        ),
        rows=tuple(rows),
        note=f"latency: {record.levels[0].latency().kind if record.levels else 'service'}; "
        "each model's requests counted once, so the models' counts add up to the whole mix's",
    )


def mix_figures(record: RunRecord) -> list[LineFigure]:
    """Each model's throughput-latency curve under the mix (one small multiple per model)."""
    return throughput_latency_per_model(mix_views([record])[1:])
