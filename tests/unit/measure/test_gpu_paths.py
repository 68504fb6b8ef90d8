"""Every GPU code path that can run without a GPU: Triton's nv_gpu_* metrics, pynvml readings
(through a stand-in module), instance kind gpu with GPU lists, accelerators, GPU memory bounds."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from perfkit.errors import UsageError
from perfkit.measure._metrics import nvml_sample, parse_prometheus
from perfkit.server.modelconfig import format_config, parse_config
from perfkit.tuner import TuneSpace, apply_params, resolve
from perfkit.tuner._validate import Context, validate
from perfkit.units import parse_bytes

# As Triton 2.x serves it: HELP/TYPE lines, labels, an unrelated power limit, NaN.
TRITON_METRICS = """\
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-a1"} 0.5
nv_gpu_utilization{gpu_uuid="GPU-b2"} NaN
# HELP nv_gpu_memory_total_bytes GPU total memory, in bytes
nv_gpu_memory_total_bytes{gpu_uuid="GPU-a1"} 85899345920
nv_gpu_memory_total_bytes{gpu_uuid="GPU-b2"} 85899345920
nv_gpu_memory_used_bytes{gpu_uuid="GPU-a1"} 1.073741824e+09
nv_gpu_memory_used_bytes{gpu_uuid="GPU-b2"} 0
nv_gpu_power_usage{gpu_uuid="GPU-a1"} 70.25
nv_gpu_power_limit{gpu_uuid="GPU-a1"} 700
nv_energy_consumption{gpu_uuid="GPU-a1"} 12345.5
nv_gpu_power_usage{extra="x",gpu_uuid="GPU-b2"} 61 1700000000000
nv_inference_count{model="m",version="1"} 10
"""


def test_triton_gpu_metrics_parse_per_gpu_and_skip_non_finite_values():
    samples = parse_prometheus(TRITON_METRICS, 1.5)
    assert [s.gpu for s in samples] == ["GPU-a1", "GPU-b2"]
    a, b = samples
    assert (a.utilization, a.memory_used_bytes, a.memory_total_bytes, a.power_w) == (0.5, 2**30, 80 * 2**30, 70.25)
    assert b.utilization is None  # NaN is no reading
    assert b.power_w == 61  # label order and a trailing timestamp do not matter
    assert b.memory_used_bytes == 0.0
    assert parse_prometheus("nv_gpu_utilization 0.3\n", 0.0) == []  # no gpu_uuid: not a per-GPU sample


class _NotSupported(Exception):
    pass


def _fake_pynvml(monkeypatch: pytest.MonkeyPatch, devices: list[dict[str, Any]], *, init_fails: bool = False) -> None:
    mod: Any = types.ModuleType("pynvml")
    calls: list[str] = []

    def init() -> None:
        if init_fails:
            raise _NotSupported("NVML Shared Library Not Found")
        calls.append("init")

    def reading(key: str) -> Any:
        def get(h: int) -> Any:
            value = devices[h][key]
            if isinstance(value, Exception):
                raise value
            return value

        return get

    mod.nvmlInit = init
    mod.nvmlShutdown = lambda: calls.append("shutdown")
    mod.nvmlDeviceGetCount = lambda: len(devices)
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetUtilizationRates = reading("util")
    mod.nvmlDeviceGetMemoryInfo = reading("mem")
    mod.nvmlDeviceGetPowerUsage = reading("power_mw")
    mod.nvmlDeviceGetUUID = reading("uuid")
    mod.calls = calls
    monkeypatch.setitem(sys.modules, "pynvml", mod)


def test_pynvml_readings_become_samples_and_an_unsupported_reading_keeps_the_others(monkeypatch: pytest.MonkeyPatch):
    util = types.SimpleNamespace(gpu=37, memory=5)
    mem = types.SimpleNamespace(used=2 * 2**30, total=16 * 2**30, free=14 * 2**30)
    _fake_pynvml(
        monkeypatch,
        [
            {"util": util, "mem": mem, "power_mw": 150_500, "uuid": b"GPU-old-bytes"},
            {"util": _NotSupported("MIG"), "mem": mem, "power_mw": _NotSupported("MIG"), "uuid": "GPU-mig"},
        ],
    )
    first, mig = nvml_sample(3.0)
    assert first.gpu == "GPU-old-bytes" and first.utilization == 0.37 and first.power_w == 150.5
    assert first.memory_used_bytes == 2 * 2**30 and first.memory_total_bytes == 16 * 2**30
    assert mig.gpu == "GPU-mig" and mig.utilization is None and mig.power_w is None
    assert mig.memory_used_bytes == 2 * 2**30
    assert sys.modules["pynvml"].calls[-1] == "shutdown"  # type: ignore[attr-defined]  # the stand-in records calls


def test_no_nvidia_driver_means_no_samples(monkeypatch: pytest.MonkeyPatch):
    _fake_pynvml(monkeypatch, [], init_fails=True)
    assert nvml_sample(0.0) == []


def test_gpu_lists_survive_count_and_kind_changes_and_cpu_drops_them(tmp_path: Path):
    text = (
        'name: "m" backend: "onnxruntime" max_batch_size: 8 instance_group [{ count: 1 kind: KIND_GPU gpus: [0, 1] }]'
    )
    (tmp_path / "m").mkdir()
    cfg = parse_config(text)
    rs = resolve(TuneSpace(), cfg, tmp_path / "m", latency_budget_us=20_000, gpus=2)
    two = apply_params(cfg, {"instance_count": 3}, rs)
    assert list(two.instance_group[0].gpus) == [0, 1] and two.instance_group[0].count == 3
    cpu = apply_params(cfg, {"instance_kind": "cpu"}, rs)
    assert "KIND_CPU" in format_config(cpu) and not cpu.instance_group[0].gpus
    # Planned for one GPU, the model's own list names GPU 1: Triton would refuse the model.
    one = resolve(TuneSpace(), cfg, tmp_path / "m", latency_budget_us=20_000, gpus=1, refuse=False)
    assert one.refused and "invalid or unsupported gpu id 1" in one.refused


def test_gpu_rules_cite_triton_and_reject_gpu_lists_on_cpu_and_model_kinds():
    cpu = parse_config('name: "m" instance_group [{ name: "g" kind: KIND_CPU gpus: [0] }]')
    (v,) = validate(cpu, Context("onnxruntime", gpus=1))
    assert v.reason == "instance group g of model m has kind KIND_CPU but specifies one or more GPUs"
    assert "core src/model_config_utils.cc" in v.cite
    model = parse_config('name: "m" instance_group [{ kind: KIND_MODEL gpus: [0] }]')
    assert "KIND_MODEL but specifies one or more GPUs" in validate(model, Context("python"))[0].reason
    no_gpu = parse_config('name: "m" instance_group [{ kind: KIND_GPU }]')
    assert validate(no_gpu, Context("python", gpus=None)) == []  # unknown server: not judged
    assert "no GPUs are available" in validate(no_gpu, Context("python", gpus=0))[0].reason


def test_accelerator_rules_per_backend():
    ort_bad = parse_config(
        'name: "m" optimization { execution_accelerators { gpu_execution_accelerator [{ name: "tensorrt"'
        ' parameters { key: "precision_mode" value: "FP8" } }] } }'
    )
    assert "unsupported precision mode 'FP8'" in validate(ort_bad, Context("onnxruntime"))[0].reason
    tf_both = parse_config(
        'name: "m" optimization { execution_accelerators { gpu_execution_accelerator [{ name: "tensorrt" },'
        ' { name: "auto_mixed_precision" }] } }'
    )
    assert validate(tf_both, Context("tensorflow"))[0].reason == (
        "Auto mixed precision can not be set with TFTRT optimization"
    )
    assert validate(tf_both, Context("onnxruntime"))[0].rule == "onnxruntime-accelerators"  # unknown to ORT
    int8 = parse_config(
        'name: "m" optimization { execution_accelerators { gpu_execution_accelerator [{ name: "tensorrt"'
        ' parameters { key: "precision_mode" value: "INT8" } }] } }'
    )
    assert validate(int8, Context("onnxruntime"))[0].rule == "onnxruntime-int8-calibration"


def test_preferred_sizes_that_no_longer_fit_are_dropped_not_sent(tmp_path: Path):
    text = 'name: "m" backend: "python" max_batch_size: 8 dynamic_batching { preferred_batch_size: [2, 8] }'
    (tmp_path / "m").mkdir()
    cfg = parse_config(text)
    rs = resolve(TuneSpace(), cfg, tmp_path / "m", latency_budget_us=20_000)
    four = apply_params(cfg, {"max_batch_size": 4, "preferred_batch_sizes": "custom:2,8"}, rs)
    assert list(four.dynamic_batching.preferred_batch_size) == [2]
    assert validate(four, Context("python")) == []
    broken = parse_config(text.replace("max_batch_size: 8", "max_batch_size: 4"))
    assert validate(broken, Context("python"))[0].rule == "dynamic-preferred-le-mbs"


def test_max_gpu_memory_sizes():
    assert parse_bytes("8GiB") == 8 * 2**30
    assert parse_bytes("500MB") == 500e6
    with pytest.raises(UsageError, match="not a size"):
        parse_bytes("lots")
