"""How good is perfkit tune's pick on an ensemble, and how cheaply? perfkit's joint search of the
three-step `stages` fixture against an exhaustive grid, and (optionally) model_analyzer on the
same ensemble and budget; every pick re-measured in the same run with the same load search.

The grid is carefully reduced to the knob that decides this fixture: dynamic batching on or off
for each of the three steps (queue delay 2 ms, no preferred sizes, max_batch_size 8: 8 configs).
Instance counts stay at 1 because every instance of a step shares its step's emulated device (more
instances only queue on the same lock); larger batches than the ensemble's 8 are left to perfkit's
wider search, so it can beat the grid. perfkit tune
searches the full joint space of every step (max_batch_size, dynamic batching, queue delay,
preferred sizes, instance count: 15 dimensions) within --trials and --max-time.

model_analyzer (PyPI triton-model-analyzer, --model-analyzer PATH to its `model-analyzer`) runs in
its quick search mode with local launch of the bundled tritonserver (a wrapper script adds the
python backend directory and libraries) and the real perf_analyzer from benchmarks/_anchor.py on
PATH; its best ensemble configuration is read from its output model repository and re-measured.

    .venv/bin/python benchmarks/pipeline_quality.py                          # ~20 min on 2 cores
    .venv/bin/python benchmarks/pipeline_quality.py --max-time 600 --model-analyzer /tmp/ma/bin/model-analyzer \
        --keep /tmp/picks                                                     # + model_analyzer, ~35 min
    .venv/bin/python benchmarks/pipeline_quality.py --remeasure /tmp/picks   # the kept picks only, ~5 min
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perfkit.measure import profile
from perfkit.server import LocalLaunch, launch_local
from perfkit.server.local import _bundled_backends, _bundled_root
from perfkit.server.modelconfig import apply_config, parse_config, render_config
from perfkit.tuner import Budget, TuneSettings, TuneSpace, judge_trial, tune
from perfkit.tuner.parts import RepoGuard, find_load, unbundle

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("stage_decode", "stage_infer", "stage_post")
MODEL = "stages"


def _settings(out: Path, budget_ms: float, trials: int, sampler: str, max_time_s: float | None) -> TuneSettings:
    return TuneSettings(
        model=MODEL,
        budget=Budget(budget_ms),
        trials=trials,
        max_time_s=max_time_s,
        output_dir=out,
        sampler=sampler,  # type: ignore[arg-type]  # argparse gives str; the values are the Literal's
        max_concurrency=64,
        search="measure",  # as every run recorded here (predict_quality.py measures --search predict)
        measurement_interval_ms=300,
        load="concurrency",  # the grid and the re-measurements here are closed loop
    )


def _put(server: object, repo: Path, texts: dict[str, str]) -> None:
    """Write a pick's configs (the ensemble's first, when the pick changes it) and reload."""
    (repo / MODEL / "config.pbtxt").write_text(texts[MODEL])
    for step in STEPS:
        apply_config(server, step, repo / step / "config.pbtxt", texts[step])  # type: ignore[arg-type]  # a Server
    server.load_model(MODEL)  # type: ignore[attr-defined]  # a Server


def _model_analyzer(binary: Path, repo: Path, work: Path, budget_ms: float) -> tuple[dict[str, str], float, str]:
    """Run model_analyzer quick search on the ensemble; returns its best step configs, its wall
    time and a note. Reads its output model repository (one folder per variant it measured)."""
    root = _bundled_root()
    assert root is not None, "the bundled tritonserver (nvidia-pytriton) is needed"
    backends = _bundled_backends(root)
    libs = root.parent.parent / "nvidia_pytriton.libs"
    wrapper = work / "tritonserver"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'export LD_LIBRARY_PATH="{libs}:$LD_LIBRARY_PATH" PATH="{Path(sys.executable).parent}:$PATH"'
        " OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1\n"
        f'exec "{root / "bin" / "tritonserver"}" --backend-directory={backends} "$@"\n'
    )
    wrapper.chmod(0o755)
    sys.path.insert(0, str(ROOT))
    from benchmarks._anchor import perf_analyzer

    pa, pa_env = perf_analyzer()
    env = {**os.environ, "PATH": f"{pa.parent}:{os.environ['PATH']}"}
    env["LD_LIBRARY_PATH"] = f"{pa_env['LD_LIBRARY_PATH']}:{env.get('LD_LIBRARY_PATH', '')}"
    out_repo = work / "ma-output"
    ports = _free_ports(3)
    cmd = [
        str(binary), "profile", "--model-repository", str(repo), "--profile-models", MODEL,
        "--triton-launch-mode", "local", "--triton-server-path", str(wrapper),
        "--run-config-search-mode", "quick", "--latency-budget", str(int(budget_ms)),
        "--output-model-repository-path", str(out_repo), "--override-output-model-repository",
        "--export-path", str(work / "ma-results"), "--checkpoint-directory", str(work / "ma-ckpt"),
        "--perf-analyzer-path", str(pa), "--client-protocol", "http", "--run-config-search-max-concurrency", "64",
        "--cpu-only-composing-models", ",".join(STEPS),  # no GPU here: its quick mode would try KIND_GPU
        # free ports: its defaults (8000-8002) may be taken by another server on this machine
        "--triton-http-endpoint", f"localhost:{ports[0]}", "--triton-grpc-endpoint", f"localhost:{ports[1]}",
        "--triton-metrics-url", f"http://localhost:{ports[2]}/metrics",
    ]  # fmt: skip
    t0 = time.monotonic()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600, check=False)
    wall = time.monotonic() - t0
    (work / "ma.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        return {}, wall, f"model_analyzer exited {done.returncode}: " + (done.stderr or done.stdout)[-400:]
    best = _ma_best(work / "ma-results", out_repo)
    return best, wall, f"model_analyzer log: {work / 'ma.log'}"


def _free_ports(n: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _ma_best(results: Path, out_repo: Path) -> dict[str, str]:
    """The step configs of model_analyzer's top ensemble variant: the first row of its ensemble
    metrics table names the variant of each step it used (<step>_config_<n>)."""
    import csv
    import re

    tables = sorted(results.rglob("metrics-model-*.csv"))
    for table in tables:
        with open(table, encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        if not rows:
            continue
        cells = " ".join(str(v) for v in rows[0].values())
        out: dict[str, str] = {}
        ens = re.search(rf"\b{MODEL}_config_\w+", cells)
        if ens and (out_repo / ens.group(0) / "config.pbtxt").is_file():
            # model_analyzer changes the ensemble's own max_batch_size too: its steps need it
            out[MODEL] = (out_repo / ens.group(0) / "config.pbtxt").read_text()
        for step in STEPS:
            m = re.search(rf"\b{step}_config_\w+", cells)
            if m and (out_repo / m.group(0) / "config.pbtxt").is_file():
                out[step] = (out_repo / m.group(0) / "config.pbtxt").read_text()
        if out:
            return out
    return {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-ms", type=float, default=100.0)
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--max-time", type=float, default=900.0, help="seconds (the goal: 15 minutes)")
    ap.add_argument("--keep", type=Path, help="write each tool's pick here (<tool>/<model>/config.pbtxt)")
    ap.add_argument("--remeasure", type=Path, help="only re-measure the picks kept in this folder by --keep")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model-analyzer", type=Path, help="path of model_analyzer's `model-analyzer` to compare")
    ap.add_argument("--skip-grid", action="store_true", help="no exhaustive grid (perfkit and model_analyzer only)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="perfkit-pipeline-bench-"))
    repo = work / "models"
    for m in (MODEL, *STEPS):
        shutil.copytree(ROOT / "fixtures" / "models" / m, repo / m, ignore=shutil.ignore_patterns("__pycache__"))
    originals = {m: (repo / m / "config.pbtxt").read_bytes() for m in STEPS}
    grid_space = TuneSpace(max_batch_sizes=(8,), queue_delay_us=(2000, 2000), preferred_batch_sizes=("none",),
                           instance_counts=(1,))  # fmt: skip
    print(f"{MODEL}: 3-step ensemble, p99 <= {args.budget_ms:g} ms (noisy shared machine: compare within this run)")
    picks: dict[str, dict[str, str]] = {}
    walls: dict[str, float] = {}
    trials: dict[str, int] = {}
    if args.remeasure:
        for tool in sorted(p.name for p in args.remeasure.iterdir() if p.is_dir()):
            picks[tool] = {m.name: (m / "config.pbtxt").read_text() for m in (args.remeasure / tool).iterdir()}
        return _remeasure(args, repo, work, picks, walls, trials, [], originals)
    with launch_local(LocalLaunch(repo, models=(MODEL,))) as server:
        if not args.skip_grid:
            t0 = time.monotonic()
            grid = tune(server, _settings(work / "grid", args.budget_ms, 10_000, "grid", None), grid_space,
                        model_repository=repo)  # fmt: skip
            walls["grid"] = time.monotonic() - t0
            trials["grid"] = sum(1 for t in grid.record.trials if "reload_s" in t.metrics)
            if grid.record.best_config:
                picks["grid"] = unbundle(grid.record.best_config)
        t0 = time.monotonic()
        tuned = tune(server, _settings(work / "tune", args.budget_ms, args.trials, "auto", args.max_time),
                     TuneSpace(), model_repository=repo, on_event=lambda e: print(e.line()))  # fmt: skip
        walls["perfkit"] = time.monotonic() - t0
        trials["perfkit"] = sum(1 for t in tuned.record.trials if "reload_s" in t.metrics)
        if tuned.record.best_config:
            picks["perfkit"] = unbundle(tuned.record.best_config)
        assert {m: (repo / m / "config.pbtxt").read_bytes() for m in STEPS} == originals, "configs not restored"
    notes = []
    if args.model_analyzer:
        ma, walls["model_analyzer"], note = _model_analyzer(args.model_analyzer, repo, work, args.budget_ms)
        notes.append(note)
        if ma:
            picks["model_analyzer"] = {
                m: render_config(originals[m].decode(), _as_step(parse_config(t), m)) for m, t in ma.items()
            }
    return _remeasure(args, repo, work, picks, walls, trials, notes, originals)


def _remeasure(  # noqa: PLR0917
    args: argparse.Namespace,
    repo: Path,
    work: Path,
    picks: dict[str, dict[str, str]],
    walls: dict[str, float],
    trials: dict[str, int],
    notes: list[str],
    originals: dict[str, bytes],
) -> int:
    """Re-measure every pick alternately on one fresh server, with the same load search."""
    originals = {**originals, MODEL: (repo / MODEL / "config.pbtxt").read_bytes()}
    picks = {k: {m: v.get(m, originals[m].decode()) for m in (MODEL, *STEPS)} for k, v in picks.items()}
    if args.keep:
        for label, texts in picks.items():
            for m, text in texts.items():
                (args.keep / label / m).mkdir(parents=True, exist_ok=True)
                (args.keep / label / m / "config.pbtxt").write_text(text)
    again: dict[str, list[float]] = {k: [] for k in picks}
    trial_load = _settings(work / "x", args.budget_ms, 1, "auto", None).trial_load_settings(None)
    with launch_local(LocalLaunch(repo, models=(MODEL,))) as server:
        with RepoGuard({m: repo / m / "config.pbtxt" for m in (MODEL, *STEPS)}, server, reload_last=(MODEL,)):
            for _ in range(args.rounds):
                for label, texts in picks.items():
                    _put(server, repo, texts)
                    rec = find_load(profile, server, trial_load, MODEL, None)
                    v = judge_trial(rec, latency_budget_ms=args.budget_ms, percentile=99)
                    again[label].append(v.throughput_infer_per_s or 0.0)
    print()
    for label, texts in picks.items():
        changed = {m: read_changes(originals[m].decode(), texts.get(m)) for m in STEPS}
        print(f"{label:<15} re-measured {statistics.mean(again[label]):8.1f} infer/s; {trials.get(label, '-')} trials,"
              f" {walls.get(label, 0):.0f} s; {changed}")  # fmt: skip
    base = statistics.mean(again["grid"]) if "grid" in again else None
    if base:
        for label in picks:
            print(f"{label}: {100 * statistics.mean(again[label]) / base:.1f}% of the grid's best")
    for n in notes:
        print(n)
    shutil.rmtree(work / "grid", ignore_errors=True)
    return 0


def _as_step(cfg: object, name: str) -> object:
    cfg.name = name  # type: ignore[attr-defined]  # model_analyzer renames variants <model>_config_N
    return cfg


def read_changes(original: str, text: str | None) -> str:
    """The fields a pick changes in a step (max_batch_size, batcher, instances), in short."""
    if text is None:
        return "as is"
    a, b = parse_config(original), parse_config(text)
    out = []
    if a.max_batch_size != b.max_batch_size:
        out.append(f"mbs {b.max_batch_size}")
    if b.HasField("dynamic_batching") != a.HasField("dynamic_batching") or a.dynamic_batching != b.dynamic_batching:
        out.append(
            f"db {b.dynamic_batching.max_queue_delay_microseconds}us" if b.HasField("dynamic_batching") else "db off"
        )
    if [g.count for g in a.instance_group] != [g.count for g in b.instance_group]:
        out.append(f"x{sum(g.count for g in b.instance_group)}")
    return ",".join(out) or "as is"


if __name__ == "__main__":
    raise SystemExit(main())
