"""Request building, metrics parsing and CLI parsing: pure units, no server."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from perfkit.cli._profile_options import build_levels
from perfkit.errors import InputError, UsageError
from perfkit.loadgen import ModelIO, file_tensors, http_payload, synthetic_tensors, to_wire
from perfkit.measure._metrics import parse_prometheus
from perfkit.schedule import read_intervals_file

IO = ModelIO("m", "", 8, (("X", "FP32", (4,)),), ("Y",))


def test_wire_formats_of_half_bfloat_and_bytes():
    x = np.array([1.0, -2.5], dtype=np.float32)
    assert to_wire(x.astype(np.float16), "FP16") == np.array([1.0, -2.5], dtype="<f2").tobytes()
    bf = to_wire(x, "BF16")  # the top 16 bits of each float32
    assert [struct.unpack("<H", bf[i : i + 2])[0] for i in (0, 2)] == [0x3F80, 0xC020]
    s = to_wire(np.array([b"ab", b""], dtype=object), "BYTES")
    assert s == b"\x02\x00\x00\x00ab\x00\x00\x00\x00"


def test_synthetic_inputs_are_seeded_and_batched():
    a = synthetic_tensors(IO, mode="random", batch_size=3, shapes={}, string_length=4, seed=1)
    b = synthetic_tensors(IO, mode="random", batch_size=3, shapes={}, string_length=4, seed=1)
    assert a == b and a[0].shape == (3, 4) and len(a[0].data) == 3 * 4 * 4
    z = synthetic_tensors(IO, mode="zero", batch_size=1, shapes={}, string_length=4, seed=1)
    assert z[0].data == bytes(16)


def test_http_payload_carries_binary_data_and_lengths():
    t = synthetic_tensors(IO, mode="zero", batch_size=1, shapes={}, string_length=1, seed=0)
    raw = http_payload(IO, t, "h:1")
    head, body = raw.split(b"\r\n\r\n", 1)
    assert head.startswith(b"POST /v2/models/m/infer HTTP/1.1")
    assert f"Content-Length: {len(body)}".encode() in head
    n = int(head.split(b"Inference-Header-Content-Length: ")[1].split(b"\r\n")[0])
    header = json.loads(body[:n])
    assert header["inputs"][0]["parameters"] == {"binary_data_size": 16}
    assert header["outputs"] == [{"name": "Y", "parameters": {"binary_data": True}}]
    assert body[n:] == bytes(16)


def test_data_file_errors_name_file_step_and_input(tmp_path):
    p = tmp_path / "d.json"
    p.write_text(json.dumps({"data": [{"X": {"content": ["a", "b", "c", "d"], "shape": [4]}}]}))
    with pytest.raises(InputError, match=r"d.json: data\[0\].X: values are not FP32"):
        file_tensors(IO, p, batch_size=1, shapes={})
    p.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        file_tensors(IO, p, batch_size=1, shapes={})
    p.write_text(json.dumps({"data": [{"X": {"b64": "AAAA"}}]}))
    with pytest.raises(InputError, match="b64 holds 3 bytes"):
        file_tensors(IO, p, batch_size=1, shapes={})


def test_prometheus_gpu_metrics_are_parsed_per_gpu():
    text = "\n".join(
        [
            "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)",
            'nv_gpu_utilization{gpu_uuid="GPU-1"} 0.75',
            'nv_gpu_memory_used_bytes{gpu_uuid="GPU-1"} 1.5e+09',
            'nv_gpu_memory_total_bytes{gpu_uuid="GPU-1"} 8e+09',
            'nv_gpu_power_usage{gpu_uuid="GPU-1"} 120.5',
            'nv_gpu_utilization{gpu_uuid="GPU-2"} 0.1',
            'nv_inference_count{model="m",version="1"} 10',
        ]
    )
    samples = parse_prometheus(text, 2.0)
    assert [s.gpu for s in samples] == ["GPU-1", "GPU-2"]
    first = samples[0]
    assert (first.utilization, first.memory_used_bytes, first.memory_total_bytes, first.power_w) == (
        0.75,
        1.5e9,
        8e9,
        120.5,
    )
    assert samples[1].memory_used_bytes is None and samples[0].t_s == 2.0


def test_perf_analyzer_ranges_and_intervals(tmp_path):
    assert [lv.value for lv in build_levels("1:7:2", None, "constant", None)] == [1, 3, 5, 7]
    rates = build_levels(None, "100:300:100", "poisson", None)
    assert [(lv.mode, lv.value, lv.distribution) for lv in rates] == [
        ("request_rate", 100.0, "poisson"),
        ("request_rate", 200.0, "poisson"),
        ("request_rate", 300.0, "poisson"),
    ]
    with pytest.raises(UsageError, match="only one of"):
        build_levels("1", "10", "constant", None)
    with pytest.raises(UsageError, match="start <= end"):
        build_levels("4:2", None, "constant", None)
    f = tmp_path / "gaps.txt"
    f.write_text("1000\n2500.5\n")
    assert read_intervals_file(f) == [1_000_000, 2_500_500]
    f.write_text("1000\nten\n")
    with pytest.raises(InputError, match="entry 2 'ten'"):
        read_intervals_file(f)
