"""What reading an OpenAI-compatible server's event stream costs perfkit per chunk, on this machine.

The OpenAI transport (perfkit/loadgen/_openai.py) reads each streamed chunk as `SseParser.feed`
(line splitting, no JSON) plus a look at its bytes (`carries_text`, an "error"/"usage" key), and
parses JSON only for the usage chunk. This measures that path per chunk, beside what a reader that
parses every chunk's JSON (`json.loads` and a dict walk for the text, as a typical Python client does)
costs, on the chunks a chat stream sends (a vLLM-style chunk of one token each), read one chunk per
feed (one token per read, what a streamed answer does at low load) and 16 per feed (a busy connection).

    .venv/bin/python benchmarks/sse_parse.py [--chunks 20000] [--repeats 5]

Prints µs per chunk (the best of the repeats: the least disturbed by other work on the machine).
"""

from __future__ import annotations

import argparse
import json
import time

from perfkit.loadgen._openai import carries_text
from perfkit.loadgen._sse import DONE, SseParser


def _chunk(k: int) -> bytes:
    delta = {"content": f"tok{k % 50} "}
    obj = {
        "id": "chatcmpl-0123456789abcdef", "object": "chat.completion.chunk", "created": 1764633600,
        "model": "gemma-3-270m", "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}],
    }  # fmt: skip
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def perfkit_path(reads: list[bytes]) -> int:
    """perfkit's reader: events split by SseParser, text found in bytes; returns the chunks with text."""
    parser, tokens = SseParser(), 0
    for read in reads:
        for data in parser.feed(read):
            if data == DONE:
                continue
            if b'"error"' in data:
                continue
            if carries_text(data):
                tokens += 1
    return tokens


def json_path(reads: list[bytes]) -> int:
    """A reader that parses every chunk: the same events, each one's JSON loaded and walked."""
    parser, tokens = SseParser(), 0
    for read in reads:
        for data in parser.feed(read):
            if data == DONE:
                continue
            obj = json.loads(data)
            choices = obj.get("choices") or [{}]
            if (choices[0].get("delta") or {}).get("content"):
                tokens += 1
    return tokens


def _best_us(fn, reads: list[bytes], chunks: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        got = fn(reads)
        best = min(best, (time.perf_counter_ns() - t0) / 1e3 / chunks)
        assert got == chunks, (fn.__name__, got)
    return best


def main() -> None:
    """Measure and print µs per chunk for each reader and read size."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    chunks = [_chunk(k) for k in range(args.chunks)]
    print(f"{args.chunks} chat chunks of {len(chunks[0])} bytes; best of {args.repeats}; µs per chunk")
    for per_read in (1, 16):
        reads = [b"".join(chunks[i : i + per_read]) for i in range(0, len(chunks), per_read)]
        ours = _best_us(perfkit_path, reads, args.chunks, args.repeats)
        theirs = _best_us(json_path, reads, args.chunks, args.repeats)
        print(
            f"  {per_read:>2} chunk(s) per read: perfkit {ours:.2f}  json.loads per chunk {theirs:.2f}"
            f"  ratio {ours / theirs:.2f}"
        )


if __name__ == "__main__":
    main()
