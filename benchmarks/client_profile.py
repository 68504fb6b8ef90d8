"""Where perfkit's client CPU goes, per transport: a sampling profile of the running client.

For each case (HTTP/1.1, HTTP/2 gRPC, system shared memory, gRPC streaming; c1/c4 and open
loop) a `perfkit profile` process runs against the bundled server; over a steady-state span
`perf record` samples the process (all threads, user and kernel stacks) and the samples are
split into: the Python interpreter, perfkit's compiled HTTP/1.1 sender (its own code, not the
system calls it makes), syscalls and the network stack, scheduler wake-ups
(futex/epoll waits, context switches), memory copies, numpy and other extension code. The
client CPU per request and the voluntary context switches per request (wake-ups) are read
from /proc over the same span.

Needs `perf` (Debian's linux-perf) and perf_event_paranoid <= 2 for a process you own.
Run: .venv/bin/python benchmarks/client_profile.py [--cases http-c1,grpc-c4] [--span 4]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.profile_vs_perf_analyzer import ROOT, cpu_s, successes, url_for  # noqa: E402
from perfkit.server import LocalLaunch, launch_local  # noqa: E402
from perfkit.server.local import LocalServer  # noqa: E402


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    protocol: str
    args: tuple[str, ...]
    per_request: int = 1  # responses counted per request (a stream's tokens)


STREAM_DATA = [{"text_input": ["hello"], "max_tokens": [16]}]
CASES = (
    Case("http-c1", "identity", "http", ("--concurrency-range", "1")),
    Case("http-c4", "identity", "http", ("--concurrency-range", "4")),
    Case("grpc-c1", "identity", "grpc", ("--concurrency-range", "1")),
    Case("grpc-c4", "identity", "grpc", ("--concurrency-range", "4")),
    Case("http-open", "identity", "http", ("--request-rate-range", "1000")),
    Case("grpc-open", "identity", "grpc", ("--request-rate-range", "1000")),
    Case("shm-c4", "identity", "http", ("--concurrency-range", "4", "--shared-memory", "system")),
    Case("large-http-c1", "image", "http", ("--concurrency-range", "1")),
    Case("large-http-c4", "image", "http", ("--concurrency-range", "4")),
    Case("large-grpc-c1", "image", "grpc", ("--concurrency-range", "1")),
    Case("large-grpc-c4", "image", "grpc", ("--concurrency-range", "4")),
    Case("stream-c4", "streamer", "grpc", ("--concurrency-range", "4", "--streaming"), per_request=16),
)

# Symbol/DSO patterns, first match wins; a sample's leaf frame decides its category.
CATEGORIES = (
    ("copies", re.compile(r"memcpy|memmove|copy_user|copy_to_user|copy_from_user|rep_movs|"
                          r"_copy_(?:to|from)_iter|copy_page")),
    ("wake-ups", re.compile(r"schedule|switch_to|futex|ep_poll|do_epoll|try_to_wake_up|pick_next|finish_task|"
                            r"enqueue_task|dequeue_task|hrtimer|timerfd|do_nanosleep|select|poll_schedule|idle")),
    ("syscalls+net", re.compile(r"\[kernel|tcp_|ip_|sock|skb|sys_|entry_SYSCALL|syscall|__x64|net_|inet_|"
                                r"loopback|__dev_|napi|unix_|lock_sock|do_syscall")),
    ("compiled sender", re.compile(r"_native\.cpython")),  # perfkit/loadgen/_native.c (HTTP/1.1)
    ("interpreter", re.compile(r"libpython|python3|_PyEval|_Py|Py[A-Z]")),
    ("numpy", re.compile(r"numpy|_multiarray|openblas")),
)  # fmt: skip


def classify(dso: str, symbol: str) -> str:
    text = f"{dso} {symbol}"
    for name, pattern in CATEGORIES[:2]:  # copies and wake-ups are recognised by symbol wherever they run
        if pattern.search(symbol):
            return name
    for name, pattern in CATEGORIES[2:]:
        if pattern.search(text):
            return name
    return "other (libc, extensions)"


def perf_shares(data: Path) -> dict[str, float]:
    """Self-time shares (percent of samples) per category from a perf.data file."""
    out = subprocess.run(
        ["perf", "report", "-i", str(data), "--stdio", "--no-children", "--sort", "dso,sym", "-g", "none",
         "--percent-limit", "0"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    shares: dict[str, float] = defaultdict(float)
    for line in out.splitlines():
        m = re.match(r"\s*([0-9.]+)%\s+(\S+)\s+\[[.kuH]\]\s+(.*)", line)
        if m:
            shares[classify(m.group(2), m.group(3))] += float(m.group(1))
    return dict(shares)


def ctx_switches(pid: int) -> int:
    """Voluntary context switches of every thread of a process: one per wake-up from a blocking wait."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            m = re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status.read_text(), re.M)
        except OSError:  # a thread that ended between the listing and the read
            continue
        total += int(m.group(1)) if m else 0
    return total


def profile_case(server: LocalServer, case: Case, warm_s: float, span_s: float, stream_data: Path) -> dict:
    out = Path(tempfile.mkdtemp()) / "run.json"
    windows = str(int(warm_s + span_s + 2))
    extra = ("--input-data", str(stream_data)) if case.model == "streamer" else ()
    cmd = [sys.executable, "-m", "perfkit", "profile", "-m", case.model, "-u", url_for(server, case.protocol),
           "--admin-url", server.endpoints.http_url, "-i", case.protocol, *case.args, *extra,
           "-p", "1000", "-r", windows, "--min-windows", windows, "-o", str(out)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(warm_s)
        data = out.parent / "perf.data"
        n0, c0, s0 = successes(server, case.model), cpu_s(proc.pid), ctx_switches(proc.pid)
        subprocess.run(["perf", "record", "-q", "-F", "1999", "-g", "-p", str(proc.pid), "-o", str(data), "--",
                        "sleep", str(span_s)], check=True, capture_output=True)  # fmt: skip
        n1, c1, s1 = successes(server, case.model), cpu_s(proc.pid), ctx_switches(proc.pid)
    finally:
        proc.wait(120)
    responses = max((n1 - n0) * case.per_request, 1)
    row = {
        "case": case.name,
        "requests_per_s": (n1 - n0) / span_s,
        "cpu_us_per_response": (c1 - c0) / responses * 1e6,
        "wakeups_per_response": (s1 - s0) / responses,
        "shares_pct": perf_shares(data),
    }
    if os.environ.get("CLIENT_PROFILE_KEEP"):
        print(f"  perf data kept: {data}")
    else:
        shutil.rmtree(out.parent, ignore_errors=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = ",".join(c.name for c in CASES)
    ap.add_argument("--cases", default="", help=f"comma-separated case names (default all): {names}")
    ap.add_argument("--warm", type=float, default=2.5, help="seconds before sampling starts")
    ap.add_argument("--span", type=float, default=4.0, help="seconds sampled per case")
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args()
    if shutil.which("perf") is None:
        sys.exit("client_profile: needs `perf` (apt-get install linux-perf)")
    chosen = [c for c in CASES if not args.cases or c.name in args.cases.split(",")]
    repo = Path(tempfile.mkdtemp()) / "models"
    for model in {c.model for c in chosen}:
        shutil.copytree(ROOT / "fixtures" / "models" / model, repo / model)
    stream_data = repo.parent / "stream.json"
    stream_data.write_text(json.dumps({"data": STREAM_DATA}))
    rows = []
    with launch_local(LocalLaunch(repo)) as server:
        print(f"Triton {server.version()}; perf samples at 1999 Hz over {args.span:g} s per case (self time)")
        names = ("interpreter", "compiled sender", "syscalls+net", "wake-ups", "copies", "numpy",
                 "other (libc, extensions)")  # fmt: skip
        head = "  ".join(f"{n:>11.11}" for n in names)
        print(f"{'case':14} {'req/s':>8} {'CPU us/resp':>11} {'wakeups/resp':>12}  {head}")
        for case in chosen:
            row = profile_case(server, case, args.warm, args.span, stream_data)
            rows.append(row)
            shares = "  ".join(f"{row['shares_pct'].get(n, 0.0):10.1f}%" for n in names)
            print(f"{case.name:14} {row['requests_per_s']:8.0f} {row['cpu_us_per_response']:11.1f} "
                  f"{row['wakeups_per_response']:12.2f}  {shares}", flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
