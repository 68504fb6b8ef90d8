"""GPU metrics during a run: Triton's Prometheus endpoint, and pynvml where a local GPU exists."""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from collections.abc import Callable

from perfkit.records import MetricSample

_LINE = re.compile(r'^(nv_gpu_\w+)\{[^}]*gpu_uuid="([^"]+)"[^}]*\}\s+([0-9.eE+-]+)')
_FIELDS = {
    "nv_gpu_utilization": "utilization",
    "nv_gpu_memory_used_bytes": "memory_used_bytes",
    "nv_gpu_memory_total_bytes": "memory_total_bytes",
    "nv_gpu_power_usage": "power_w",
}


def parse_prometheus(text: str, t_s: float) -> list[MetricSample]:
    """GPU samples out of one scrape of Triton's /metrics text."""
    per_gpu: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m and m.group(1) in _FIELDS:
            per_gpu.setdefault(m.group(2), {})[_FIELDS[m.group(1)]] = float(m.group(3))
    return [MetricSample(t_s=t_s, gpu=gpu, **fields) for gpu, fields in sorted(per_gpu.items())]  # type: ignore[arg-type]


def nvml_sample(t_s: float) -> list[MetricSample]:
    """Samples of every local GPU through pynvml; empty where there is no NVIDIA driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            util = pynvml.nvmlDeviceGetUtilizationRates(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            power = pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0
            uuid = pynvml.nvmlDeviceGetUUID(h)
            out.append(
                MetricSample(
                    t_s=t_s,
                    gpu=uuid if isinstance(uuid, str) else uuid.decode(),
                    utilization=util.gpu / 100.0,
                    memory_used_bytes=float(mem.used),
                    memory_total_bytes=float(mem.total),
                    power_w=power,
                )
            )
        return out
    except Exception:
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
            t = time.monotonic() - self.origin
            got: list[MetricSample] = []
            if self.url:
                try:
                    got = parse_prometheus(self._fetch(), t)
                except OSError:
                    self.errors += 1
            if not got and self.use_nvml:
                got = nvml_sample(t)
            self.samples.extend(got)
            self._stop.wait(self.interval_s)

    def between(self, t0_s: float, t1_s: float) -> tuple[MetricSample, ...]:
        """Samples taken in [t0_s, t1_s) (seconds from origin)."""
        return tuple(s for s in self.samples if t0_s <= s.t_s < t1_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
