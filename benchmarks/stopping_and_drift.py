"""When a level stops, how honest its precision is, and whether the gate tells a busier machine from a
slower model: perfkit against perf_analyzer (the anchor) on one server, quiet and under a competing
CPU load started on purpose (one spinning process per core), in one run.

  1. time to a result: one sweep (-p 1000, the same concurrency levels) with each tool's defaults
     (perfkit: windows until precise, a drift, a precision out of reach or its 10-window budget;
     perf_analyzer: 3 windows within 10%, at most 10), quiet and loaded, both to the end of the sweep
     (perf_analyzer's levels after an unstable one by a new process); wall time, windows per level;
  2. coverage: the same level run R times quiet and R times loaded; for every ordered pair of runs,
     whether run j's figure lies in run i's stated ~95% interval (nominal 83.4%: two runs' figures
     differ by sqrt(2) of one's error) and whether the two differ by less than their combined
     interval sqrt(h_i^2 + h_j^2) (nominal 95%), for the run's own interval and for its re-run
     interval (the machine's between-run spread added); the DerSimonian-Laird between-run sd;
  3. the gate (stored baseline, throughput:-5%, p90:+10%): unchanged pairs whose current run has the
     competing load started after its 3rd window (false REGRESSIONs), and x1.3 slower pairs (the
     sleeper's delay 10 -> 13 ms) with the same load (caught as REGRESSION); --save keeps every
     pair's records, --regate DIR re-runs today's gate on them.

  .venv/bin/python benchmarks/stopping_and_drift.py --only coverage --runs 16 --save DIR      # ~3 min
  .venv/bin/python benchmarks/stopping_and_drift.py --only gate --pairs 20 --save DIR         # ~15 min
  .venv/bin/python benchmarks/stopping_and_drift.py --only time --levels 1:4:1 --reps 2       # ~5 min
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._anchor import perf_analyzer  # noqa: E402
from perfkit import measure  # noqa: E402
from perfkit.gate import GateOptions, compare_records, parse_thresholds  # noqa: E402
from perfkit.measure import WindowMeasured  # noqa: E402
from perfkit.measure._coverage import (  # noqa: E402
    NOMINAL_COMBINED,
    NOMINAL_INSIDE_OTHER,
    between_run_rel,
    pair_coverage,
)
from perfkit.records import LevelResult, LoadLevel, ProfileSpec, RunRecord  # noqa: E402
from perfkit.server import LocalLaunch, launch_local  # noqa: E402
from perfkit.server.local import LocalServer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HOGS = os.cpu_count() or 2
# the default throughput threshold, and p90 for the default p99: 8 windows of a 10 ms model at c2
# hold ~700 requests on a quiet machine, fewer on a busy one, and p99 needs 662 to be judged at all
GATE = GateOptions(thresholds=tuple(parse_thresholds(["throughput:-5%", "p90:+10%"])))


@contextlib.contextmanager
def competing_load(on: bool = True) -> Iterator[list[subprocess.Popen[bytes]]]:
    """One spinning process per core while inside (none when not `on`)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(HOGS if on else 0)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


# -- 1. time to a result ----------------------------------------------------------------------


def _level_values(levels: str) -> list[int]:
    parts = [int(x) for x in levels.split(":")]
    end = parts[1] if len(parts) > 1 else parts[0]
    return list(range(parts[0], end + 1, parts[2] if len(parts) > 2 else 1))


def sweep_perfkit(server: LocalServer, model: str, levels: str) -> dict:
    out = Path(tempfile.mkdtemp()) / "run.json"
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "perfkit", "profile", "-m", model, "-u", str(server.endpoints.grpc_url),
                    "-i", "grpc", "--admin-url", server.endpoints.http_url, "--concurrency-range", levels,
                    "-p", "1000", "-o", str(out)],
                   capture_output=True, check=True)  # fmt: skip
    wall = time.monotonic() - t0
    rec = RunRecord.load(out)
    return {
        "wall_s": wall,
        "windows_s": sum(lv.duration_s for lv in rec.levels),
        "processes": 1,
        "levels": [
            {"windows": len(lv.windows), "stable": lv.stable, "drift": lv.drift is not None} for lv in rec.levels
        ],
    }


def sweep_pa(server: LocalServer, model: str, levels: str) -> dict:
    """perf_analyzer over the same levels, to the end of the sweep: an unstable level ends its process's
    sweep, so the levels after it are run by a new process (each process's wall time counted)."""
    binary, env = perf_analyzer()
    values = _level_values(levels)
    step = values[1] - values[0] if len(values) > 1 else 1
    wall = 0.0
    lv: list[dict] = []
    processes = 0
    while len(lv) < len(values):
        first = values[len(lv)]
        t0 = time.monotonic()
        pa = subprocess.run([str(binary), "-m", model, "-u", str(server.endpoints.grpc_url), "-i", "grpc",
                             "--concurrency-range", f"{first}:{values[-1]}:{step}", "-p", "1000", "-v"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **env},
                            timeout=300)  # fmt: skip
        wall += time.monotonic() - t0
        processes += 1
        parts = re.split(r"Request concurrency: \d+", pa.stdout)[1:]
        if not parts:  # it measured nothing: count the level as failed and go on
            lv.append({"windows": 0, "stable": False, "drift": False})
        for part in parts:
            passes = len(re.findall(r"Pass \[\d+\] throughput", part))
            lv.append({"windows": passes, "stable": "failed to obtain stable" not in part.lower(), "drift": False})
    return {"wall_s": wall, "windows_s": None, "processes": processes, "levels": lv[: len(values)]}


def time_to_result(server: LocalServer, model: str, levels: str, reps: int) -> None:
    n_levels = len(_level_values(levels))
    print(f"1. time to a result: {model}, gRPC, --concurrency-range {levels}, -p 1000, each tool's defaults, "
          f"both to the end of the sweep (perf_analyzer's levels after an unstable one by a new process)")  # fmt: skip
    for loaded in (False, True):
        rows: dict[str, list[dict]] = {"perfkit": [], "perf_analyzer": []}
        for r in range(reps):
            order = [("perfkit", sweep_perfkit), ("perf_analyzer", sweep_pa)]
            for tool, fn in order if r % 2 == 0 else order[::-1]:
                with competing_load(loaded):
                    rows[tool].append(fn(server, model, levels))
        for tool, runs in rows.items():
            walls = sorted(x["wall_s"] for x in runs)
            per_level = [[lv["windows"] for lv in x["levels"]] for x in runs]
            measured = sum(len(x["levels"]) for x in runs)
            unstable = sum(not lv["stable"] for x in runs for lv in x["levels"])
            drifts = sum(lv["drift"] for x in runs for lv in x["levels"])
            print(f"   {'loaded' if loaded else 'quiet ':6} {tool:13}: sweep median {walls[len(walls) // 2]:5.1f} s "
                  f"(runs {', '.join(f'{w:.1f}' for w in walls)}); windows per level measured {per_level}; "
                  f"{measured} of {len(runs) * n_levels} levels measured, {unstable} unstable, "
                  f"{drifts} ended by drift; {sum(x['processes'] for x in runs)} processes"
                  + (f"; time in windows {sorted(x['windows_s'] for x in runs)[len(runs) // 2]:.1f} s (median)"
                     if runs[0]["windows_s"] is not None else ""))  # fmt: skip
        med = {tool: _per_level_windows(runs) for tool, runs in rows.items()}
        print(f"   => {'loaded' if loaded else 'quiet'}: windows per measured level, median: perfkit "
              f"{med['perfkit']:.1f}, perf_analyzer {med['perf_analyzer']:.1f} (ratio "
              f"{med['perfkit'] / med['perf_analyzer']:.2f}); whole process per sweep: see above")  # fmt: skip


def _per_level_windows(runs: list[dict]) -> float:
    counts = sorted(lv["windows"] for x in runs for lv in x["levels"])
    return float(counts[len(counts) // 2]) if counts else math.nan


# -- 2. coverage of the stated precision -------------------------------------------------------


def coverage_section(server: LocalServer, model: str, c: int, runs: int, save: Path | None) -> None:
    spec = ProfileSpec(model=model, levels=(LoadLevel("concurrency", c),), protocol="grpc", percentile=99.0)
    print(f"\n2. coverage: {model} c{c}, gRPC, perfkit's defaults with --percentile 99, {runs} runs each; "
          f"nominal rates: another run's figure inside a run's ~95% interval {NOMINAL_INSIDE_OTHER:.1%} "
          f"(the difference of two runs has sqrt(2) x one run's spread), the difference within the combined "
          f"interval {NOMINAL_COMBINED:.0%}")  # fmt: skip
    rows = []
    for loaded in (False, True):
        levels = []
        loads = []
        with competing_load(loaded):
            for _ in range(runs):
                loads.append(os.getloadavg()[0])
                levels.append(measure.profile(server, spec).levels[0])
        cond = "loaded" if loaded else "quiet "
        for name, fig in (("throughput", lambda lv: lv.throughput_infer_per_s), ("p99", lambda lv: lv.service.p99_us)):
            within, rerun = _stated(levels, name)
            figs = [(fig(lv), h) for lv, h in zip(levels, within)]
            cov = pair_coverage(figs)
            line = (f"   {cond} {name:10}: within-run interval: inside another run's {cov.inside_other:.0%}, "
                    f"combined {cov.combined:.0%}")  # fmt: skip
            if all(h is not None for h in rerun):
                re_cov = pair_coverage([(fig(lv), h or 0.0) for lv, h in zip(levels, rerun)])
                line += f"; with the between-run spread: {re_cov.inside_other:.0%}, combined {re_cov.combined:.0%}"
            vals = ", ".join(f"{x:.4g}±{h:.1%}" for x, h in figs)
            print(f"{line}; over {cov.pairs} pairs of {cov.runs} runs; between-run sd past the within-run "
                  f"intervals (DerSimonian-Laird) {between_run_rel(figs):.1%}; {vals}", flush=True)  # fmt: skip
        print(f"   {cond} windows {[len(lv.windows) for lv in levels]}, drift "
              f"{sum(lv.drift is not None for lv in levels)} of {runs}, load average {min(loads):.1f}-"
              f"{max(loads):.1f}; method {levels[0].precision.method}")  # fmt: skip
        rows += [
            {"loaded": loaded, "load_avg": la, "throughput": lv.throughput_infer_per_s,
             "throughput_rel": lv.precision.throughput_rel, "p99_us": lv.service.p99_us,
             "p99_rel": lv.precision.latency_rel, "throughput_rerun_rel": lv.precision.throughput_rerun_rel,
             "p99_rerun_rel": lv.precision.latency_rerun_rel, "windows": len(lv.windows), "drift": lv.drift is not None,
             "stable": lv.stable, "method": lv.precision.method}
            for la, lv in zip(loads, levels)
        ]  # fmt: skip
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        (save / "coverage.json").write_text(json.dumps(rows, indent=1))


def _stated(levels: list[LevelResult], name: str) -> tuple[list[float], list[float | None]]:
    """Each run's within-run relative half-width of `name`, and its re-run one (None in older code)."""
    p = [lv.precision for lv in levels]
    if name == "throughput":
        return [x.throughput_rel or 0.0 for x in p], [x.throughput_rerun_rel for x in p]
    return [x.latency_rel or 0.0 for x in p], [x.latency_rerun_rel for x in p]


# -- 3. the gate --------------------------------------------------------------------------------


def _profile(server: LocalServer, spec: ProfileSpec, load_after: int | None) -> RunRecord:
    hogs: list[subprocess.Popen[bytes]] = []

    def start(ev: object) -> None:
        if load_after is not None and isinstance(ev, WindowMeasured) and ev.window == load_after and not hogs:
            hogs.extend(subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(HOGS))

    try:
        return measure.profile(server, spec, on_progress=start)
    finally:
        for p in hogs:
            p.kill()
        for p in hogs:
            p.wait()


def _set_delay(server: LocalServer, repo: Path, delay_ms: int) -> None:
    cfg = repo / "sleeper" / "config.pbtxt"
    text = re.sub(r'string_value: "\d+"', f'string_value: "{delay_ms}"', cfg.read_text())
    cfg.write_text(text)
    server.load_model("sleeper")


def gate_section(server: LocalServer, repo: Path, pairs: int, save: Path | None, only: list[str]) -> None:
    print(f"\n3. the gate, stored baseline, throughput:-5% and p90:+10%; the current run's competing load starts "
          f"after window 3; {pairs} pairs per case")  # fmt: skip
    cases = [("identity", 4, 1.0), ("sleeper", 2, 1.0), ("sleeper", 2, 1.3)]
    for model, c, slower in cases:
        if only and f"{model}x{slower:g}" not in only:
            continue
        spec = ProfileSpec(model=model, levels=(LoadLevel("concurrency", c),), protocol="grpc",
                           measurement_interval_ms=800, min_windows=8, max_trials=8, tail_percentiles=())  # fmt: skip
        verdicts = []
        for _ in range(pairs):
            base = _profile(server, spec, None)
            if slower != 1.0:
                _set_delay(server, repo, round(10 * slower))
            try:
                cur = _profile(server, spec, 3)
            finally:
                if slower != 1.0:
                    _set_delay(server, repo, 10)
            result = compare_records(base, cur, GATE)
            verdicts.append(result.verdict)
            if save is not None:
                save.mkdir(parents=True, exist_ok=True)
                for side, rec in (("base", base), ("cur", cur)):
                    rec.save(save / f"gate_{model}_x{slower:g}_{len(verdicts)}_{side}_{result.verdict}.json")
            lb, lc = base.levels[0], cur.levels[0]
            _print_pair(model, c, slower, lb, lc, result.verdict)
        what = "false REGRESSION" if slower == 1.0 else "caught (REGRESSION)"
        print(f"   => {model} c{c} x{slower:g}: {what} in {verdicts.count('regression')} of {pairs}; "
              f"verdicts {sorted(verdicts)}")  # fmt: skip


def regate(folder: Path) -> None:
    """The gate of today on the pairs a --save folder kept: verdicts per case, as recorded and now."""
    print(f"\n3. the gate re-run on the records kept in {folder}")
    cases: dict[str, list[tuple[str, str]]] = {}
    for cur_path in sorted(folder.glob("gate_*_cur_*.json")):
        case, recorded = re.match(r"gate_(\w+_x[\d.]+)_\d+_cur_(\w+)\.json", cur_path.name).groups()  # type: ignore[union-attr]  # the benchmark's own names
        base = RunRecord.load(cur_path.with_name(cur_path.name.replace("_cur_", "_base_")))
        cases.setdefault(case, []).append((recorded, compare_records(base, RunRecord.load(cur_path), GATE).verdict))
    for case, pairs in cases.items():
        was = [r for r, _ in pairs]
        now = [v for _, v in pairs]
        print(f"   {case}: {len(pairs)} pairs; REGRESSION as recorded {was.count('regression')}, now "
              f"{now.count('regression')}; now {sorted(now)}")  # fmt: skip


def _print_pair(model: str, c: int, slower: float, b: LevelResult, cur: LevelResult, verdict: str) -> None:
    change = cur.throughput_infer_per_s / b.throughput_infer_per_s - 1
    print(f"   {model} c{c} x{slower:g}: throughput {b.throughput_infer_per_s:.1f} -> {cur.throughput_infer_per_s:.1f} "
          f"({change:+.1%}), p99 {b.service.p99_us / 1e3:.2f} -> {cur.service.p99_us / 1e3:.2f} ms: {verdict}",
          flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=4, help="sweeps per tool and condition; runs per coverage set")
    ap.add_argument("--pairs", type=int, default=3, help="gate pairs per case")
    ap.add_argument("--levels", default="1:4:3", help="the sweep's --concurrency-range")
    ap.add_argument("--only", choices=["time", "coverage", "gate"], help="one section only")
    ap.add_argument("--cases", default="", help="gate cases, comma-separated: identityx1, sleeperx1, sleeperx1.3")
    ap.add_argument("--runs", type=int, help="runs per coverage set (default: --reps)")
    ap.add_argument("--save", type=Path, help="keep the coverage figures and the gate's records in this folder")
    ap.add_argument("--regate", type=Path, help="only re-run the gate on the pairs a --save folder kept")
    args = ap.parse_args()
    if args.regate:
        regate(args.regate)
        return
    repo = Path(tempfile.mkdtemp()) / "models"
    for model in ("identity", "sleeper"):
        shutil.copytree(ROOT / "fixtures" / "models" / model, repo / model)
    t0 = time.monotonic()
    with launch_local(LocalLaunch(repo)) as server:
        print(f"Triton {server.version()}, {os.cpu_count()} cores shared by server, client and the competing load "
              f"({HOGS} spinning processes when loaded); load average now {os.getloadavg()[0]:.1f}")  # fmt: skip
        if args.only in (None, "time"):
            time_to_result(server, "identity", args.levels, args.reps)
        if args.only in (None, "coverage"):
            coverage_section(server, "identity", 4, args.runs or args.reps, args.save)
        if args.only in (None, "gate"):
            gate_section(server, repo, args.pairs, args.save, [c for c in args.cases.split(",") if c])
    print(f"\n({time.monotonic() - t0:.0f} s in all)")


if __name__ == "__main__":
    main()
