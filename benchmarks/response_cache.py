"""The response cache's gain at a 50% repeat rate, read by perfkit and by perf_analyzer 2.60.0 in one run.

One bundled server with a local cache serves the cacheable fixture twice: `cacheable` (no cache)
and `cacheable_cached` (`response_cache { enable: true }`). perf_analyzer reads an `--input-data`
file whose requests repeat as perfkit's --repeat-fraction 0.5 sends them (loadgen/_repeats.py's
order, written by write_input_data); perfkit profile sends --repeat-fraction 0.5 itself. Both
measure each model at concurrency 4 (one 10 ms instance: about 100 req/s without the cache), in
alternating order; the figures are each tool's throughput with and without the cache, its ratio
(cached / uncached), the cache's hit share from the server's statistics, and perfkit's ratio over
perf_analyzer's. Writes benchmarks/results/response_cache-<time>.json.

    .venv/bin/python benchmarks/response_cache.py
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._anchor import perf_analyzer  # noqa: E402
from perfkit.loadgen import ModelIO  # noqa: E402
from perfkit.loadgen._repeats import repeat_order, write_input_data  # noqa: E402
from perfkit.measure import profile  # noqa: E402
from perfkit.measure._repeat_setup import _distinct_inputs  # noqa: E402
from perfkit.measure._server_stats import delta, snapshot  # noqa: E402
from perfkit.records import LoadLevel, ProfileSpec  # noqa: E402
from perfkit.server import LocalLaunch, launch_local  # noqa: E402
from perfkit.server._cache import cache_args  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
FRACTION = 0.5
CONCURRENCY = 4
FILE_REQUESTS = 8000  # perf_analyzer's input file: more requests than a level sends
WINDOW_MS = 3000
_THROUGHPUT = re.compile(r"Throughput: ([0-9.]+) infer/sec")


def _repository(where: Path) -> Path:
    repo = where / "models"
    shutil.copytree(ROOT / "fixtures" / "models" / "cacheable", repo / "cacheable")
    shutil.copytree(ROOT / "fixtures" / "models" / "cacheable", repo / "cacheable_cached")
    cfg = repo / "cacheable_cached" / "config.pbtxt"
    text = cfg.read_text().replace('name: "cacheable"', 'name: "cacheable_cached"')
    cfg.write_text(text + "response_cache { enable: true }\n")
    return repo


def _input_file(server, where: Path) -> Path:
    io = ModelIO.from_server(server.model_metadata("cacheable"), server.model_config("cacheable"))
    spec = ProfileSpec(model="cacheable", levels=(LoadLevel("concurrency", 1),), repeat_fraction=FRACTION)
    order = repeat_order(FILE_REQUESTS, FRACTION, seed=1)
    distinct = _distinct_inputs(io, spec, max(order) + 1, seed=12345)
    return write_input_data(where / "repeats.json", [distinct[k] for k in order], batched=False)


def _pa(server, model: str, data: Path) -> dict[str, object]:
    binary, env = perf_analyzer("2.60")
    before = snapshot(server.model_stats, [model])
    argv = [str(binary), "-m", model, "-u", server.endpoints.http_url.removeprefix("http://"), "--input-data",
            str(data), "--concurrency-range", str(CONCURRENCY), "-p", str(WINDOW_MS), "-s", "20"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    stats = delta(before, snapshot(server.model_stats, [model]), model)
    found = _THROUGHPUT.findall(proc.stdout)
    return {"throughput_rps": float(found[-1]) if found else None, "returncode": proc.returncode,
            "hit_share": round(stats.cache_hit_count / max(1, stats.request_count), 3),
            "tail": proc.stdout[-400:] if not found else ""}  # fmt: skip


def _perfkit(server, model: str) -> dict[str, object]:
    spec = ProfileSpec(model=model, levels=(LoadLevel("concurrency", CONCURRENCY),), repeat_fraction=FRACTION,
                       measurement_interval_ms=WINDOW_MS, min_windows=3, max_trials=6)  # fmt: skip
    lv = profile(server, spec).levels[0]
    srv = lv.server
    hit = srv.cache_hit_count / max(1, srv.request_count) if srv is not None else None
    return {"throughput_rps": round(lv.throughput_infer_per_s, 1), "hit_share": None if hit is None else round(hit, 3)}


def main() -> int:
    rows: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        launch = LocalLaunch(_repository(where), extra_args=tuple(cache_args(True)))
        with launch_local(launch) as server:
            data = _input_file(server, where)
            for i, model in enumerate(("cacheable", "cacheable_cached", "cacheable_cached", "cacheable")):
                tools = ("perf_analyzer_2.60", "perfkit") if i % 2 == 0 else ("perfkit", "perf_analyzer_2.60")
                for tool in tools:
                    got = _pa(server, model, data) if tool == "perf_analyzer_2.60" else _perfkit(server, model)
                    rows.setdefault(f"{tool}:{model}", {"runs": []})["runs"].append(got)  # type: ignore[union-attr]  # a list
                    print(f"{tool} {model}: {got}", flush=True)
    out: dict[str, object] = {"when": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%MZ"),
                              "repeat_fraction": FRACTION, "concurrency": CONCURRENCY, "runs": rows}  # fmt: skip
    gains = {}
    for tool in ("perf_analyzer_2.60", "perfkit"):
        mean = {}
        for model in ("cacheable", "cacheable_cached"):
            figs = [r["throughput_rps"] for r in rows[f"{tool}:{model}"]["runs"] if r["throughput_rps"]]  # type: ignore[index,union-attr]  # dicts of the runs above
            mean[model] = sum(figs) / len(figs) if figs else None
        ok = mean["cacheable"] and mean["cacheable_cached"]
        gains[tool] = round(mean["cacheable_cached"] / mean["cacheable"], 3) if ok else None  # type: ignore[operator]  # both checked
    out["cache_gain"] = gains
    pa, pk = gains["perf_analyzer_2.60"], gains["perfkit"]
    out["perfkit_over_perf_analyzer"] = round(pk / pa, 3) if pa and pk else None
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"response_cache-{out['when']}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"cache gain: perf_analyzer {pa}, perfkit {pk} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
