"""A known-truth OpenAI-compatible server: its timing is stated, so what a client measures can be checked.

`/v1/chat/completions` and `/v1/completions` (streamed as server-sent events, or one JSON answer),
`/v1/embeddings`, `/v1/models`; stdlib asyncio only, on loopback. Each generation takes one of
`--slots` slots (a request beyond them waits for one: the saturation knee is at `slots` requests in
flight), answers its first token `--first-token-ms` after it got its slot and one more every
`--token-ms` (times from an absolute schedule, so they do not drift), `max_tokens` tokens (default
`--default-tokens`). A streamed answer starts with a role-only chunk (no text, as vLLM's and OpenAI's
do), may carry comments, and ends with a usage chunk (with `stream_options.include_usage`) and
`data: [DONE]`. Each request's prompt length under `--tokenizer` (without special tokens) and its
times go to `--log` (one JSON line per request). `--fail-every K` answers every K-th request
with HTTP 500; `--close-each` closes the connection after each answer (saying `Connection: close`).

Run: `python -m tests.support.openai_server --tokenizer DIR --log FILE` prints `listening on PORT`.
`OpenAIServer` starts it as a subprocess for a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

WORDS = ("alpha", "beta", "gamma", "delta")


class _Truth:
    def __init__(self, args: argparse.Namespace) -> None:
        from tokenizers import Tokenizer

        path = Path(args.tokenizer)
        self.tok = Tokenizer.from_file(str(path / "tokenizer.json" if path.is_dir() else path))
        self.args = args
        self.slots = asyncio.Semaphore(args.slots)
        self.count = 0
        self.log = open(args.log, "a", buffering=1) if args.log else None  # noqa: SIM115 (open for the server's life)

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        if "messages" in body:
            text = "\n".join(str(m.get("content", "")) for m in body["messages"])
        else:
            text = str(body.get("prompt", body.get("input", "")))
        return len(self.tok.encode(text, add_special_tokens=False).ids)

    def note(self, entry: dict[str, Any]) -> None:
        if self.log is not None:
            self.log.write(json.dumps(entry) + "\n")


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes] | None:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return method, path, body


def _answer(writer: asyncio.StreamWriter, code: int, obj: Any, close: bool = False) -> None:
    data = json.dumps(obj).encode()
    reason = {200: "OK", 404: "Not Found", 500: "Internal Server Error", 400: "Bad Request"}[code]
    extra = "Connection: close\r\n" if close else ""
    head = f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n{extra}\r\n"
    writer.write(head.encode() + data)


def _chunk(writer: asyncio.StreamWriter, text: str) -> None:
    data = text.encode()
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))


async def _generate(truth: _Truth, writer: asyncio.StreamWriter, path: str, body: dict[str, Any]) -> None:
    args = truth.args
    chat = path.endswith("/chat/completions")
    received_ns = time.perf_counter_ns()
    prompt = truth.prompt_tokens(body)
    n = int(body.get("max_tokens") or args.default_tokens)
    stream = bool(body.get("stream"))
    usage_wanted = bool((body.get("stream_options") or {}).get("include_usage"))
    usage = {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
    obj = "chat.completion.chunk" if chat else "text_completion"
    async with truth.slots:
        loop = asyncio.get_running_loop()
        slot_ns = time.perf_counter_ns()
        t0 = loop.time()
        if stream:
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                + (b"Connection: close\r\n" if args.close_each else b"")
                + b"Cache-Control: no-cache\r\n\r\n"
            )
            if chat:  # the role comes first, with no text
                role = {"object": obj, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
                _chunk(writer, f"data: {json.dumps(role)}\n\n")
            _chunk(writer, ": the first token is on its way\n\n")
            await writer.drain()
        token_ns = []
        for k in range(n):
            due = t0 + (args.first_token_ms + k * args.token_ms) / 1e3
            await asyncio.sleep(max(0.0, due - loop.time()))
            token_ns.append(time.perf_counter_ns())
            if stream:
                word = WORDS[k % len(WORDS)] + " "
                choice = {"index": 0, "delta": {"content": word}} if chat else {"index": 0, "text": word}
                _chunk(writer, f"data: {json.dumps({'object': obj, 'choices': [choice]})}\n\n")
                await writer.drain()
    text = "".join(WORDS[k % len(WORDS)] + " " for k in range(n))
    if stream:
        if usage_wanted:
            _chunk(writer, f"data: {json.dumps({'object': obj, 'choices': [], 'usage': usage})}\n\n")
        _chunk(writer, "data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
    else:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}} if chat else {"index": 0, "text": text}
        answer = {"object": obj.removesuffix(".chunk"), "choices": [choice], "usage": usage}
        _answer(writer, 200, answer, close=args.close_each)
    await writer.drain()
    truth.note(
        {
            "path": path,
            "prompt_tokens": prompt,
            "max_tokens": n,
            "stream": stream,
            "received_ns": received_ns,
            "slot_ns": slot_ns,
            "token_ns": token_ns,
        }  # fmt: skip
    )


async def _serve(truth: _Truth, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                got = await _read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            if got is None:
                return
            method, path, raw = got
            if method == "GET" and path == "/v1/models":
                _answer(writer, 200, {"object": "list", "data": [{"id": truth.args.model, "object": "model"}]})
                await writer.drain()
                continue
            truth.count += 1
            if truth.args.fail_every and truth.count % truth.args.fail_every == 0:
                truth.note({"path": path, "failed": True})
                _answer(writer, 500, {"error": {"message": "known-truth server: failing as asked", "code": 500}})
                await writer.drain()
                continue
            body = json.loads(raw or b"{}")
            if path.endswith("/embeddings"):
                truth.note({"path": path, "prompt_tokens": truth.prompt_tokens(body)})
                usage = {"prompt_tokens": truth.prompt_tokens(body), "total_tokens": truth.prompt_tokens(body)}
                _answer(writer, 200, {"object": "list", "data": [{"embedding": [0.0] * 8, "index": 0}], "usage": usage})
            elif path.endswith("/completions"):
                await _generate(truth, writer, path, body)
                if truth.args.close_each:
                    return
            else:
                _answer(writer, 404, {"error": {"message": f"no route {path}"}})
            await writer.drain()
    except ConnectionError:
        return
    finally:
        writer.close()


async def _main(args: argparse.Namespace) -> None:
    truth = _Truth(args)
    server = await asyncio.start_server(lambda r, w: _serve(truth, r, w), "127.0.0.1", args.port)
    port = server.sockets[0].getsockname()[1]
    print(f"listening on {port}", flush=True)
    async with server:
        await server.serve_forever()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The server's options (see the module's docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--model", default="truth")
    p.add_argument("--first-token-ms", type=float, default=40.0)
    p.add_argument("--token-ms", type=float, default=10.0)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--default-tokens", type=int, default=16)
    p.add_argument("--fail-every", type=int, default=0)
    p.add_argument("--close-each", action="store_true", help="answer with Connection: close and close")
    p.add_argument("--log", default="")
    return p.parse_args(argv)


class OpenAIServer:
    """The known-truth server in a subprocess for a test: `.port`, `.entries()` (its log), stopped on exit."""

    def __init__(self, tokenizer: Path, log: Path, **options: Any) -> None:
        self.log = log
        self.options = options
        argv = [sys.executable, "-m", "tests.support.openai_server", "--tokenizer", str(tokenizer), "--log", str(log)]
        for key, value in options.items():
            flag = f"--{key.replace('_', '-')}"
            argv += ([flag] if value else []) if isinstance(value, bool) else [flag, str(value)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"the known-truth OpenAI server did not start: {line!r}")
        self.port = int(line.split()[-1])

    @property
    def url(self) -> str:
        """host:port, as `-u` takes it."""
        return f"127.0.0.1:{self.port}"

    def entries(self) -> list[dict[str, Any]]:
        """One dict per request answered so far (prompt_tokens, max_tokens, times; or failed)."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def stop(self) -> None:
        """Stop the server process."""
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


@contextlib.contextmanager
def openai_server(tokenizer: Path, log: Path, **options: Any) -> Iterator[OpenAIServer]:
    """A running known-truth server for the block."""
    server = OpenAIServer(tokenizer, log, **options)
    try:
        yield server
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(_main(parse_args()))
