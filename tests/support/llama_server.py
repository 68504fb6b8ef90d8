"""llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`) on loopback, for the tests
and benchmarks that measure a real engine (tests/server/llm, benchmarks/aiperf_gemma.py)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def llama_server(model: Path, log: Path, *, n_threads: int, warm: bool = False) -> Iterator[tuple[str, int]]:
    """Serve the GGUF file as model "gemma"; yields (host:port, pid) once /v1/models answers.

    A request queues behind the one in flight (--interrupt_requests False: by default a new request cuts
    the stream in flight short). One OpenMP thread per llama.cpp thread: a team sized to the machine's
    cores spins at its barriers on CPUs the server may be pinned away from. warm: one completion first,
    which pages the weights in and builds the graph (seconds, in which the server answers nothing else).
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "gemma",
           "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(n_threads), "--n_ctx", "512",
           "--interrupt_requests", "False"]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:  # ready when it lists its model (the weights loaded)
            if proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server ended: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://{url}/v1/models", timeout=2):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server not ready in 120 s: {log.read_text()[-2000:]}")
            time.sleep(0.2)  # polling a starting process: no event to wait on
        if warm:
            body = json.dumps({"model": "gemma", "prompt": "warm up", "max_tokens": 4}).encode()
            req = urllib.request.Request(f"http://{url}/v1/completions", body, {"content-type": "application/json"})
            with urllib.request.urlopen(req, timeout=120):
                pass
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
