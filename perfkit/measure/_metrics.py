"""GPU metrics during a run: Triton's Prometheus endpoint, and pynvml where a local GPU exists; the
server's first-response histogram where it reports one."""

from __future__ import annotations

import math
import re
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from perfkit.measure._first_response import Snapshot, level_first_response, parse_first_response
from perfkit.records import FirstResponseHistogram, MetricSample

# One sample line: name{labels} value [timestamp]. Prometheus values may be NaN or +Inf.
_LINE = re.compile(r"^(nv_gpu_\w+)\{([^}]*)\}\s+(\S+)")
_UUID = re.compile(r'(?:^|,)\s*gpu_uuid="([^"]+)"')
_FIELDS = {
    "nv_gpu_utilization": "utilization",
    "nv_gpu_memory_used_bytes": "memory_used_bytes",
    "nv_gpu_memory_total_bytes": "memory_total_bytes",
    "nv_gpu_power_usage": "power_w",
}


def parse_prometheus(text: str, t_s: float) -> list[MetricSample]:
    """GPU samples out of one scrape of Triton's /metrics text (one per gpu_uuid, sorted).
    Values that are not finite numbers are left out (None)."""
    per_gpu: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m or m.group(1) not in _FIELDS:
            continue
        uuid = _UUID.search(m.group(2))
        if uuid is None:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            per_gpu.setdefault(uuid.group(1), {})[_FIELDS[m.group(1)]] = value
    return [
        MetricSample(
            t_s=t_s,
            gpu=gpu,
            utilization=f.get("utilization"),
            memory_used_bytes=f.get("memory_used_bytes"),
            memory_total_bytes=f.get("memory_total_bytes"),
            power_w=f.get("power_w"),
        )
        for gpu, f in sorted(per_gpu.items())
    ]


def _nvml_or_none(call: Callable[..., Any], *args: Any) -> Any:
    """One NVML query; None where the device does not support it (MIG slices have no power or
    utilization readings, some boards no power), so the other readings of the GPU are kept."""
    try:
        return call(*args)
    except Exception:  # pynvml raises NVMLError subclasses per return code
        return None


def nvml_sample(t_s: float) -> list[MetricSample]:
    """Samples of every local GPU through pynvml; empty where there is no NVIDIA driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver, no device: no samples
        return []
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            util = _nvml_or_none(pynvml.nvmlDeviceGetUtilizationRates, h)
            mem = _nvml_or_none(pynvml.nvmlDeviceGetMemoryInfo, h)
            power_mw = _nvml_or_none(pynvml.nvmlDeviceGetPowerUsage, h)
            uuid = _nvml_or_none(pynvml.nvmlDeviceGetUUID, h)
            if isinstance(uuid, bytes):  # older nvidia-ml-py returns bytes
                uuid = uuid.decode()
            out.append(
                MetricSample(
                    t_s=t_s,
                    gpu=str(uuid) if uuid else f"gpu{i}",
                    utilization=util.gpu / 100.0 if util is not None else None,
                    memory_used_bytes=float(mem.used) if mem is not None else None,
                    memory_total_bytes=float(mem.total) if mem is not None else None,
                    power_w=power_mw / 1000.0 if power_mw is not None else None,
                )
            )
        return out
    except Exception:  # the driver went away mid-scrape: no samples this time
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


class MetricsSampler:
    """Scrapes in a background thread every interval; samples are timed from `origin` (monotonic s)."""

    def __init__(self, url: str | None, interval_s: float, *, use_nvml: bool = True) -> None:
        self.url = url
        self.interval_s = interval_s
        self.use_nvml = use_nvml
        self.samples: list[MetricSample] = []
        self.first_response: list[Snapshot] = []  # the scrapes that reported Triton's first-response histogram
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="perfkit-metrics", daemon=True)
        self.origin = time.monotonic()
        self._fetch: Callable[[], str] = self._http_get

    def _http_get(self) -> str:
        assert self.url
        with urllib.request.urlopen(self.url, timeout=2) as resp:
            return resp.read().decode(errors="replace")

    def start(self) -> MetricsSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.scrape(time.monotonic() - self.origin)
            self._stop.wait(self.interval_s)

    def scrape(self, t_s: float) -> None:
        """One scrape, timed t_s from origin: GPU samples, and the first-response histogram where reported."""
        got: list[MetricSample] = []
        if self.url:
            try:
                text = self._fetch()
            except OSError:
                self.errors += 1
            else:
                got = parse_prometheus(text, t_s)
                histograms = parse_first_response(text)
                if histograms:
                    self.first_response.append((t_s, histograms))
        if not got and self.use_nvml:
            got = nvml_sample(t_s)
        self.samples.extend(got)

    def between(self, t0_s: float, t1_s: float) -> tuple[MetricSample, ...]:
        """Samples taken in [t0_s, t1_s) (seconds from origin)."""
        return tuple(s for s in self.samples if t0_s <= s.t_s < t1_s)

    def first_response_between(self, t0_s: float, t1_s: float) -> tuple[FirstResponseHistogram, ...]:
        """Each model's first-response histogram over [t0_s, t1_s) (seconds from origin); empty
        where the server does not report it."""
        return level_first_response(self.first_response, t0_s, t1_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
