"""perfkit profile --service-kind openai beside AIPerf 0.13.0 (the anchor), in one run, on one server.

The server is the known-truth OpenAI-compatible server (tests/support/openai_server.py): first token
FIRST_MS after a request gets a slot, one more every TOKEN_MS, and each request's receive time and
every token's write time logged (CLOCK_MONOTONIC, as this process reads it). Both tools stream chat
completions of INPUT tokens in and OUTPUT tokens out, at concurrency 1 and 4 and at a Poisson rate,
the same request count, alternately. Against the server's log of the same run's requests:

- TTFT p50/p99: each tool's against the server's own (receive -> first token written).
- ITL p50/p99: perfkit's `itl` is every gap between tokens (against the server's gaps); AIPerf's
  `inter_token_latency` is per request, (latency - TTFT) / (tokens - 1) (against the server's per-
  request mean gap), as is perfkit's `tpot` (shown beside it).
- Output tokens/s: perfkit's over its level against AIPerf's `output_token_throughput`.
- Client CPU per streamed response (one token's chunk): the tool's whole process tree (AIPerf runs a
  controller, workers and record processors), user + system, from /proc sampled every 200 ms; over
  the whole run (start-up included) and over a steady window (from the 20th to the 80th percent of
  the run's requests, as the server logged them), each divided by the tokens the server wrote in it.

The server runs on its own CPU (--server-cpus, default 0) and the tools on the rest, so a tool's
own cost does not slow the server it measures. AIPerf lives in its own virtual environment:
    python3 -m venv ../aiperf-venv && ../aiperf-venv/bin/pip install aiperf==0.13.0
and reads the fixture's Hugging Face tokenizer folder (tests/support/tokenizer; offline, nothing is
fetched). AIPerf is given --use-server-token-count: by default it counts output tokens by tokenizing
the streamed text, which under this tokenizer is more tokens than the server sent chunks (its ITL
and tokens/s then describe other tokens than the server's). Results: --out PREFIX writes PREFIX.json and PREFIX.md.

Run: .venv/bin/python benchmarks/aiperf_compare.py --aiperf ../aiperf-venv/bin/aiperf \
         --out benchmarks/results/aiperf_compare-2026-12-02
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._cpus import parse_cpus, pin_apart  # noqa: E402
from perfkit.records import RunRecord  # noqa: E402
from tests.support.openai_server import OpenAIServer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT / "tests" / "support" / "tokenizer"
TICK = os.sysconf("SC_CLK_TCK")
FIRST_MS, TOKEN_MS, SLOTS = 40.0, 10.0, 8
INPUT, OUTPUT = 32, 16


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds of the process, every thread) from /proc/PID/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None  # the process ended while we looked
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


@dataclass
class TreeCpu:
    """A process tree's CPU seconds, sampled: each process's last reading (an ended one keeps it, so
    up to one sampling interval of a process that ends between samples is not counted)."""

    root: int
    seen: dict[int, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> float:
        stats = {int(p.name): st for p in Path("/proc").glob("[0-9]*") if (st := _stat(int(p.name))) is not None}
        tree, todo = set(), [self.root]
        while todo:
            pid = todo.pop()
            if pid in stats and pid not in tree:
                tree.add(pid)
                todo.extend(c for c, (ppid, _) in stats.items() if ppid == pid)
        for pid in tree:
            self.seen[pid] = stats[pid][1]
        return self.total()

    def total(self) -> float:
        return sum(self.seen.values())

    def run(self) -> None:
        while not self.stop.wait(0.2):
            self.sample()


def _pct(values: list[float] | np.ndarray, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else float("nan")


def server_truth(entries: list[dict[str, Any]]) -> dict[str, float]:
    """The server's own figures (ms) for these requests."""
    ttft = [(e["token_ns"][0] - e["received_ns"]) / 1e6 for e in entries if e.get("token_ns")]
    gaps = np.concatenate([np.diff(e["token_ns"]) / 1e6 for e in entries if len(e.get("token_ns", ())) > 1])
    per_req = [float(np.mean(np.diff(e["token_ns"]))) / 1e6 for e in entries if len(e.get("token_ns", ())) > 1]
    return {
        "ttft_p50_ms": _pct(ttft, 50), "ttft_p99_ms": _pct(ttft, 99),
        "itl_p50_ms": _pct(gaps, 50), "itl_p99_ms": _pct(gaps, 99),
        "itl_per_request_p50_ms": _pct(per_req, 50), "itl_per_request_p99_ms": _pct(per_req, 99),
        "requests": len(entries),
    }  # fmt: skip


def perfkit_cmd(url: str, load: tuple[str, float], n: int, out: Path) -> list[str]:
    kind, value = load
    level = ["--concurrency-range", str(int(value))] if kind == "concurrency" else [
        "--request-rate-range", str(value), "--request-distribution", "poisson"]  # fmt: skip
    return [sys.executable, "-m", "perfkit", "profile", "--service-kind", "openai", "-u", url, "-m", "truth",
            "--tokenizer", str(TOKENIZER), "--streaming", "--synthetic-input-tokens-mean", str(INPUT),
            "--synthetic-input-tokens-stddev", "0", "--output-tokens-mean", str(OUTPUT),
            "--output-tokens-stddev", "0", *level, "--request-count", str(n), "-o", str(out)]  # fmt: skip


def aiperf_cmd(aiperf: str, url: str, load: tuple[str, float], n: int, out: Path) -> list[str]:
    kind, value = load
    level = ["--concurrency", str(int(value))] if kind == "concurrency" else [
        "--request-rate", str(value), "--arrival-pattern", "poisson"]  # fmt: skip
    return [aiperf, "profile", "-m", "truth", "-u", f"http://{url}", "--endpoint-type", "chat", "--streaming",
            *level, "--request-count", str(n), "--tokenizer", str(TOKENIZER),
            "--synthetic-input-tokens-mean", str(INPUT), "--synthetic-input-tokens-stddev", "0",
            "--output-tokens-mean", str(OUTPUT), "--output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true",
            "--use-server-token-count",
            "--ui", "none", "--artifact-dir", str(out)]  # fmt: skip


def perfkit_figures(path: Path) -> dict[str, float]:
    lv = RunRecord.load(path).levels[0]
    st = lv.streaming
    assert st is not None and st.tpot is not None
    return {
        "ttft_p50_ms": st.ttft.p50_us / 1e3, "ttft_p99_ms": st.ttft.p99_us / 1e3,
        "itl_p50_ms": st.itl.p50_us / 1e3, "itl_p99_ms": st.itl.p99_us / 1e3,
        "tpot_p50_ms": st.tpot.p50_us / 1e3, "tpot_p99_ms": st.tpot.p99_us / 1e3,
        "output_tokens_per_s": st.output_tokens_per_s, "errors": lv.error_count,
    }  # fmt: skip


def aiperf_figures(artifacts: Path) -> dict[str, float]:
    found = sorted(artifacts.rglob("profile_export_aiperf.json"))
    if not found:
        raise SystemExit(f"AIPerf wrote no profile_export_aiperf.json under {artifacts}")
    doc = json.loads(found[0].read_text())
    records = doc.get("records", doc)

    def metric(name: str) -> dict[str, Any]:
        m = records.get(name) if isinstance(records, dict) else None
        if m is None:
            raise SystemExit(f"{found[0]}: no {name!r} (keys: {sorted(records)[:30]})")
        return m

    ttft, itl, tput = metric("time_to_first_token"), metric("inter_token_latency"), metric("output_token_throughput")
    errors = records.get("error_request_count", {}).get("avg", 0) if isinstance(records, dict) else 0
    return {
        "ttft_p50_ms": float(ttft["p50"]), "ttft_p99_ms": float(ttft["p99"]),
        "itl_p50_ms": float(itl["p50"]), "itl_p99_ms": float(itl["p99"]),
        "output_tokens_per_s": float(tput["avg"]), "errors": float(errors or 0),
        "units": f"{ttft.get('unit', '?')}, {itl.get('unit', '?')}, {tput.get('unit', '?')}",
    }  # fmt: skip


def _shown(cmd: list[str]) -> list[str]:
    """The command as the results record it: the repository's paths relative to it, AIPerf by name
    (the paths of the machine that ran it say nothing of the run)."""
    root = f"{ROOT}/"
    return ["python" if a == sys.executable else "aiperf" if a.endswith("/aiperf") else a.replace(root, "")
            for a in cmd]  # fmt: skip


def run_tool(cmd: list[str], server: OpenAIServer, n: int) -> dict[str, Any]:
    """Run one tool to its end; its tree's CPU over the whole run and the steady window, and the server's
    log of its requests."""
    skip = len(server.entries())
    t_start = time.perf_counter_ns()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    cpu = TreeCpu(proc.pid)
    sampler = threading.Thread(target=cpu.run, daemon=True)
    sampler.start()
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    window: dict[str, tuple[int, float]] = {}
    while proc.poll() is None:
        done = len(server.entries()) - skip
        for name, frac in (("a", 0.2), ("b", 0.8)):
            if name not in window and done >= frac * n:
                window[name] = (time.perf_counter_ns(), cpu.sample())
        time.sleep(0.05)
    reader.join(10)
    cpu.stop.set()
    sampler.join()
    t_end = time.perf_counter_ns()
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}):\n{''.join(lines)[-4000:]}")
    entries = [e for e in server.entries()[skip:] if not e.get("failed")]
    tokens = [t for e in entries for t in e.get("token_ns", ())]
    out: dict[str, Any] = {"wall_s": (t_end - t_start) / 1e9, "cpu_s": cpu.total(), "processes": len(cpu.seen)}
    out["cpu_us_per_response"] = cpu.total() / max(len(tokens), 1) * 1e6
    if "a" in window and "b" in window:
        (ta, ca), (tb, cb) = window["a"], window["b"]
        in_window = sum(ta <= t <= tb for t in tokens)
        out["steady_cpu_us_per_response"] = (cb - ca) / max(in_window, 1) * 1e6
        out["steady_responses"] = in_window
    out["truth"] = server_truth(entries)
    return out


def machine_load() -> dict[str, Any]:
    return {"loadavg_1m": os.getloadavg()[0], "cpus": os.cpu_count(), "platform": platform.platform()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aiperf", default=os.environ.get("AIPERF", "aiperf"))  # AIPerf's own venv: $AIPERF or PATH
    ap.add_argument("--requests", type=int, default=120, help="requests per tool and load")
    ap.add_argument("--rate", type=float, default=10.0, help="the Poisson rate (requests/s)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--server-cpus", type=parse_cpus, default=None, help="default: CPU 0 where there are two or more")
    ap.add_argument("--out", default="", help="PREFIX: write PREFIX.json and PREFIX.md")
    args = ap.parse_args()
    aiperf_version = subprocess.run([str(Path(args.aiperf).parent / "pip"), "show", "aiperf"], capture_output=True,
                                    text=True).stdout  # fmt: skip
    version = next((ln.split()[-1] for ln in aiperf_version.splitlines() if ln.startswith("Version:")), "?")
    loads: list[tuple[str, float]] = [("concurrency", 1), ("concurrency", 4), ("poisson", args.rate)]
    rows: list[dict[str, Any]] = []
    meta: dict[str, Any] = {"aiperf": version, "python": platform.python_version(), "before": machine_load(),
                            "server": {"first_token_ms": FIRST_MS, "token_ms": TOKEN_MS, "slots": SLOTS},
                            "input_tokens": INPUT, "output_tokens": OUTPUT, "requests": args.requests}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        server = OpenAIServer(TOKENIZER, Path(tmp) / "log.jsonl", first_token_ms=FIRST_MS, token_ms=TOKEN_MS,
                              slots=SLOTS, default_tokens=OUTPUT)  # fmt: skip
        try:
            cpus = args.server_cpus or (frozenset({0}) if len(os.sched_getaffinity(0)) > 1 else None)
            if cpus:
                meta["client_cpus"] = sorted(pin_apart(server.proc.pid, cpus))
                meta["server_cpus"] = sorted(cpus)
            for r in range(args.rounds):
                for load in loads:
                    tools = ("perfkit", "aiperf") if (r + loads.index(load)) % 2 == 0 else ("aiperf", "perfkit")
                    for tool in tools:
                        out = Path(tmp) / f"{tool}-{load[0]}-{load[1]}-{r}"
                        if tool == "perfkit":
                            cmd = perfkit_cmd(server.url, load, args.requests, out.with_suffix(".json"))
                        else:
                            cmd = aiperf_cmd(args.aiperf, server.url, load, args.requests, out)
                        got = run_tool(cmd, server, args.requests)
                        figs = perfkit_figures(out.with_suffix(".json")) if tool == "perfkit" else aiperf_figures(out)
                        row = {"tool": tool, "load": f"{load[0]} {load[1]:g}", "round": r,
                               "command": _shown(cmd), **got, "figures": figs}  # fmt: skip
                        rows.append(row)
                        t = got["truth"]
                        print(
                            f"{tool:8} {row['load']:14} TTFT p50 {figs['ttft_p50_ms']:.2f} (server "
                            f"{t['ttft_p50_ms']:.2f}) p99 {figs['ttft_p99_ms']:.2f} ({t['ttft_p99_ms']:.2f}) | ITL p50 "
                            f"{figs['itl_p50_ms']:.2f} p99 {figs['itl_p99_ms']:.2f} | {figs['output_tokens_per_s']:.1f}"
                            f" tok/s | CPU {got['cpu_us_per_response']:.0f} us/response"
                            f" (steady {got.get('steady_cpu_us_per_response', float('nan')):.0f})",
                            flush=True,
                        )
        finally:
            server.stop()
    meta["after"] = machine_load()
    doc = {"meta": meta, "rows": rows, "summary": summarize(rows)}
    if args.out:
        Path(f"{args.out}.json").write_text(json.dumps(doc, indent=2) + "\n")
        Path(f"{args.out}.md").write_text(markdown(doc))
    print(markdown(doc))


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per load: each tool's error against the server's figures, and the ratios perfkit / AIPerf."""
    out = []
    for load in dict.fromkeys(r["load"] for r in rows):
        pk = [r for r in rows if r["load"] == load and r["tool"] == "perfkit"]
        ai = [r for r in rows if r["load"] == load and r["tool"] == "aiperf"]
        if not pk or not ai:
            continue

        def err(rs: list[dict[str, Any]], fig: str, truth: str) -> float:
            return float(np.median([r["figures"][fig] - r["truth"][truth] for r in rs]))

        def med(rs: list[dict[str, Any]], key: str, sub: str = "") -> float:
            return float(np.median([(r[sub][key] if sub else r.get(key, float("nan"))) for r in rs]))

        out.append({
            "load": load,
            "perfkit_ttft_p50_err_ms": err(pk, "ttft_p50_ms", "ttft_p50_ms"),
            "aiperf_ttft_p50_err_ms": err(ai, "ttft_p50_ms", "ttft_p50_ms"),
            "perfkit_ttft_p99_err_ms": err(pk, "ttft_p99_ms", "ttft_p99_ms"),
            "aiperf_ttft_p99_err_ms": err(ai, "ttft_p99_ms", "ttft_p99_ms"),
            "perfkit_itl_p50_err_ms": err(pk, "itl_p50_ms", "itl_p50_ms"),
            "perfkit_itl_p99_err_ms": err(pk, "itl_p99_ms", "itl_p99_ms"),
            "perfkit_tpot_p50_err_ms": err(pk, "tpot_p50_ms", "itl_per_request_p50_ms"),
            "perfkit_tpot_p99_err_ms": err(pk, "tpot_p99_ms", "itl_per_request_p99_ms"),
            "aiperf_itl_p50_err_ms": err(ai, "itl_p50_ms", "itl_per_request_p50_ms"),
            "aiperf_itl_p99_err_ms": err(ai, "itl_p99_ms", "itl_per_request_p99_ms"),
            "tokens_per_s_ratio": med(pk, "output_tokens_per_s", "figures") / med(ai, "output_tokens_per_s", "figures"),
            "cpu_ratio": med(pk, "cpu_us_per_response") / med(ai, "cpu_us_per_response"),
            "steady_cpu_ratio": med(pk, "steady_cpu_us_per_response") / med(ai, "steady_cpu_us_per_response"),
            "perfkit_cpu_us": med(pk, "cpu_us_per_response"), "aiperf_cpu_us": med(ai, "cpu_us_per_response"),
            "perfkit_steady_cpu_us": med(pk, "steady_cpu_us_per_response"),
            "aiperf_steady_cpu_us": med(ai, "steady_cpu_us_per_response"),
            "aiperf_processes": max(r["processes"] for r in ai),
        })  # fmt: skip
    return out


def markdown(doc: dict[str, Any]) -> str:
    m = doc["meta"]
    lines = [
        "# perfkit profile --service-kind openai beside AIPerf " + m["aiperf"],
        "",
        f"Known-truth server: first token {m['server']['first_token_ms']:g} ms after a slot, then one every "
        f"{m['server']['token_ms']:g} ms, {m['server']['slots']} slots; {m['input_tokens']} tokens in, "
        f"{m['output_tokens']} out, {m['requests']} requests per tool and load, streamed chat. Server on CPUs "
        f"{m.get('server_cpus', '-')}, tools on {m.get('client_cpus', '-')}; load average "
        f"{m['before']['loadavg_1m']:.1f} before, {m['after']['loadavg_1m']:.1f} after"
        " (other work shares the machine).",
        "",
        "Errors are each tool's figure minus the server's own for the same run's requests (ms); AIPerf's ITL is "
        "per request, held against the server's per-request mean gap, as perfkit's TPOT is.",
        "",
        "| load | TTFT p50 err perfkit / AIPerf | TTFT p99 err | ITL p50 err perfkit (gaps) / TPOT / AIPerf |"
        " ITL p99 err | tokens/s perfkit/AIPerf | CPU us/response perfkit / AIPerf (ratio) | steady (ratio) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in doc["summary"]:

        def errs(*keys: str, s: dict[str, Any] = s) -> str:
            return " / ".join(f"{s[k]:+.2f}" for k in keys)

        cpu = f"{s['perfkit_cpu_us']:.0f} / {s['aiperf_cpu_us']:.0f} ({s['cpu_ratio']:.2f})"
        steady = f"{s['perfkit_steady_cpu_us']:.0f} / {s['aiperf_steady_cpu_us']:.0f} ({s['steady_cpu_ratio']:.2f})"
        cells = [
            s["load"],
            errs("perfkit_ttft_p50_err_ms", "aiperf_ttft_p50_err_ms"),
            errs("perfkit_ttft_p99_err_ms", "aiperf_ttft_p99_err_ms"),
            errs("perfkit_itl_p50_err_ms", "perfkit_tpot_p50_err_ms", "aiperf_itl_p50_err_ms"),
            errs("perfkit_itl_p99_err_ms", "perfkit_tpot_p99_err_ms", "aiperf_itl_p99_err_ms"),
            f"{s['tokens_per_s_ratio']:.3f}",
            cpu,
            steady,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Commands (one round):", ""]
    for r in doc["rows"]:
        if r["round"] == 0:
            lines.append(f"- {r['tool']} {r['load']}: `{' '.join(r['command'])}`")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
