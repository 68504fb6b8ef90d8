"""Triton's request-to-first-response histogram, read from its Prometheus metrics text.

`nv_inference_first_response_histogram_ms` is a per-model histogram (labels `model`, `version`,
and `le` on its buckets; `_count` and `_sum` series beside them), described in the server's
`docs/user_guide/metrics.md` ("Histograms"). Servers report it with
`--metrics-config histogram_latencies=true`: decoupled models since 2.52 (24.11; core PR #396),
every model since 2.65 (26.01; server PR #8580, core PR #464). Servers that do not report it
(the bundled 2.51 among them) leave it out of the text, and the levels measured against them
carry no histogram.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from perfkit.records import FirstResponseHistogram

FAMILY = "nv_inference_first_response_histogram_ms"
_LINE = re.compile(rf"^{FAMILY}(_count|_sum|_bucket)?\{{([^}}]*)\}}\s+(\S+)")
_LABEL = re.compile(r'\s*(\w+)="((?:[^"\\]|\\.)*)"\s*(?:,|$)')

Key = tuple[str, str]  # (model, version)


@dataclass
class _Cumulative:
    count: float = 0.0
    sum_ms: float = 0.0
    buckets: dict[float, float] = field(default_factory=dict)  # le bound (ms) -> cumulative count


def _labels(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in _LABEL.finditer(text)}


def parse_first_response(text: str) -> dict[Key, FirstResponseHistogram]:
    """Each model's cumulative first-response histogram in one scrape of Triton's /metrics text;
    empty where the server does not report it. Lines that are not finite numbers are skipped."""
    found: dict[Key, _Cumulative] = {}
    for line in text.splitlines():
        if not line.startswith(FAMILY):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        labels = _labels(m.group(2))
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if not math.isfinite(value) or "model" not in labels:
            continue
        h = found.setdefault((labels["model"], labels.get("version", "")), _Cumulative())
        suffix = m.group(1)
        if suffix == "_count":
            h.count = value
        elif suffix == "_sum":
            h.sum_ms = value
        elif "le" in labels:
            # Triton names its buckets by the family itself (no _bucket suffix); exposition libraries add it
            bound = float(labels["le"])
            if math.isfinite(bound):
                h.buckets[bound] = value
    return {key: _histogram(key, h) for key, h in sorted(found.items())}


def _histogram(key: Key, h: _Cumulative) -> FirstResponseHistogram:
    bounds = sorted(h.buckets)
    return FirstResponseHistogram(
        model=key[0],
        version=key[1],
        count=round(h.count),
        sum_ms=h.sum_ms,
        bounds_ms=tuple(bounds),
        counts=tuple(round(h.buckets[b]) for b in bounds),
    )


def histogram_delta(
    before: FirstResponseHistogram | None, after: FirstResponseHistogram
) -> FirstResponseHistogram | None:
    """What was observed between two scrapes of one model's histogram; None when nothing was.

    A count that went down means the server's series started again (the model was reloaded or
    the server restarted), so `after` is taken whole, as Prometheus treats a counter reset.
    """
    if before is None or after.count < before.count or before.bounds_ms != after.bounds_ms:
        delta = after
    else:
        delta = FirstResponseHistogram(
            model=after.model,
            version=after.version,
            count=after.count - before.count,
            sum_ms=after.sum_ms - before.sum_ms,
            bounds_ms=after.bounds_ms,
            counts=tuple(a - b for a, b in zip(after.counts, before.counts)),
        )
    return delta if delta.count > 0 else None


Snapshot = tuple[float, dict[Key, FirstResponseHistogram]]  # (seconds from the sampler's origin, histograms)


def level_first_response(snapshots: list[Snapshot], t0_s: float, t1_s: float) -> tuple[FirstResponseHistogram, ...]:
    """Each model's first responses over [t0_s, t1_s): the last scrape in it less the last one
    before it (the first one in it where none was taken before). Empty where none was reported."""
    before = [h for t, h in snapshots if t < t0_s]
    inside = [h for t, h in snapshots if t0_s <= t < t1_s]
    if not inside:
        return ()
    base = before[-1] if before else inside[0]
    out = []
    for key, after in inside[-1].items():
        delta = histogram_delta(base.get(key), after)
        if delta is not None:
            out.append(delta)
    return tuple(out)
