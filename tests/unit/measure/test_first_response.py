"""Triton's first-response histogram: parsed from the metrics text, kept per level, exported live.

The sample text is the server's own documentation of the metric, line for line
(triton-inference-server/server `docs/user_guide/metrics.md`, "Histograms": the family name, the
`model`/`version`/`le` labels, Triton's buckets named by the family itself, `_count` and `_sum`).
The bundled server (2.51.0) does not report the family, so levels measured against it carry none.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from perfkit.gate.synthetic import synthetic_level
from perfkit.live import LiveMetrics
from perfkit.measure import LevelDone
from perfkit.measure._first_response import (
    FAMILY,
    histogram_delta,
    level_first_response,
    parse_first_response,
)
from perfkit.measure._metrics import MetricsSampler
from perfkit.records import FirstResponseHistogram, LevelResult, from_dict, to_dict

TRITON_DOCS_SAMPLE = """\
# HELP nv_first_response_histogram_ms Duration from request to first response in milliseconds
# TYPE nv_first_response_histogram_ms histogram
nv_inference_first_response_histogram_ms_count{model="my_model",version="1"} 37
nv_inference_first_response_histogram_ms_sum{model="my_model",version="1"} 10771
nv_inference_first_response_histogram_ms{model="my_model",version="1", le="100"} 8
nv_inference_first_response_histogram_ms{model="my_model",version="1", le="500"} 30
nv_inference_first_response_histogram_ms{model="my_model",version="1", le="2000"} 36
nv_inference_first_response_histogram_ms{model="my_model",version="1", le="5000"} 37
nv_inference_first_response_histogram_ms{model="my_model",version="1", le="+Inf"} 37
"""

# What a 2.51 server reports instead: counters and summaries, no first-response family
OLDER_SERVER = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="identity",version="1"} 120
nv_inference_request_duration_us{model="identity",version="1"} 53120
nv_gpu_utilization{gpu_uuid="GPU-1"} 0.5
"""


def _scaled(text: str, factor: int, extra: int = 0) -> str:
    """The docs' sample with every count multiplied (a later scrape of the same server)."""
    out = []
    for line in text.splitlines():
        if line.startswith(FAMILY):
            head, value = line.rsplit(" ", 1)
            line = f"{head} {int(value) * factor + extra}"
        out.append(line)
    return "\n".join(out) + "\n"


def test_the_family_name_is_tritons():
    assert FAMILY == "nv_inference_first_response_histogram_ms"


def test_the_docs_sample_parses_to_one_models_histogram():
    got = parse_first_response(TRITON_DOCS_SAMPLE)
    assert list(got) == [("my_model", "1")]
    h = got[("my_model", "1")]
    assert h == FirstResponseHistogram(
        model="my_model",
        version="1",
        count=37,
        sum_ms=10771.0,
        bounds_ms=(100.0, 500.0, 2000.0, 5000.0),
        counts=(8, 30, 36, 37),
    )


def test_a_server_without_the_histogram_gives_none():
    assert parse_first_response(OLDER_SERVER) == {}
    assert parse_first_response("") == {}


def test_the_bucket_suffix_and_several_models_are_read_too():
    text = (
        TRITON_DOCS_SAMPLE
        + 'nv_inference_first_response_histogram_ms_bucket{model="b",version="2",le="10"} 3\n'
        + 'nv_inference_first_response_histogram_ms_count{model="b",version="2"} 4\n'
        + 'nv_inference_first_response_histogram_ms_sum{model="b",version="2"} NaN\n'
    )
    got = parse_first_response(text)
    assert sorted(got) == [("b", "2"), ("my_model", "1")]
    assert got[("b", "2")].counts == (3,) and got[("b", "2")].count == 4 and got[("b", "2")].sum_ms == 0.0


def test_a_level_is_the_change_between_the_scrapes_around_it():
    first = parse_first_response(TRITON_DOCS_SAMPLE)
    later = parse_first_response(_scaled(TRITON_DOCS_SAMPLE, 3))
    snapshots = [(0.0, first), (1.0, first), (2.5, later), (9.0, parse_first_response(_scaled(TRITON_DOCS_SAMPLE, 5)))]
    (h,) = level_first_response(snapshots, 1.5, 3.0)  # before it: the 1.0 scrape; its last: 2.5
    assert h.count == 74 and h.sum_ms == pytest.approx(21542.0)
    assert h.counts == (16, 60, 72, 74) and h.bounds_ms == (100.0, 500.0, 2000.0, 5000.0)
    assert level_first_response(snapshots, 3.0, 8.0) == ()  # no scrape inside it
    assert level_first_response([], 0.0, 10.0) == ()
    assert level_first_response([(2.0, first), (3.0, first)], 1.0, 4.0) == ()  # nothing answered


def test_a_counter_reset_takes_the_later_scrape_whole():
    before = parse_first_response(_scaled(TRITON_DOCS_SAMPLE, 5))[("my_model", "1")]
    after = parse_first_response(TRITON_DOCS_SAMPLE)[("my_model", "1")]  # the model was reloaded
    assert histogram_delta(before, after) == after
    assert histogram_delta(None, after) == after


def test_the_sampler_keeps_the_scrapes_that_report_it():
    texts = iter([TRITON_DOCS_SAMPLE, OLDER_SERVER, _scaled(TRITON_DOCS_SAMPLE, 2)])
    sampler = MetricsSampler("http://stand-in/metrics", 0.001, use_nvml=False)
    sampler._fetch = lambda: next(texts)
    for t_s in (0.5, 1.5, 2.5):
        sampler.scrape(t_s)
    assert [t for t, _ in sampler.first_response] == [0.5, 2.5]
    (h,) = sampler.first_response_between(1.0, 3.0)
    assert h.count == 37 and h.counts == (8, 30, 36, 37)


def test_levels_keep_it_in_the_record_and_old_records_load():
    h = parse_first_response(TRITON_DOCS_SAMPLE)[("my_model", "1")]
    level = dataclasses.replace(synthetic_level(), first_response=(h,))
    back = from_dict(LevelResult, json.loads(json.dumps(to_dict(level))))
    assert back.first_response == (h,)
    old = to_dict(synthetic_level())
    del old["first_response"]  # a record written before the field
    assert from_dict(LevelResult, old).first_response == ()


def _samples(exporter: LiveMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(exporter.registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_live_metrics_export_the_servers_histogram_at_level_end_and_only_where_reported():
    h = parse_first_response(TRITON_DOCS_SAMPLE)[("my_model", "1")]
    level = dataclasses.replace(synthetic_level(), first_response=(h,))
    exporter = LiveMetrics(model="my_model")
    exporter.handle(LevelDone(level.load, level))
    got = _samples(exporter)
    key = (("level", "concurrency 1"), ("model", "my_model"), ("server_model", "my_model"), ("version", "1"))
    name = "perfkit_server_first_response_seconds"
    assert got[(f"{name}_count", key)] == 37
    assert got[(f"{name}_sum", key)] == pytest.approx(10.771)

    def bucket(le: str) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((*key, ("le", le))))

    assert got[(f"{name}_bucket", bucket("0.1"))] == 8
    assert got[(f"{name}_bucket", bucket("5"))] == 37
    assert got[(f"{name}_bucket", bucket("+Inf"))] == 37

    plain = LiveMetrics(model="identity")
    plain.handle(LevelDone(synthetic_level().load, synthetic_level()))
    assert not [k for k in _samples(plain) if k[0].startswith(name)]
