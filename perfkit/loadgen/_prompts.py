"""Synthetic prompts of an exact length under a model's tokenizer, and the OpenAI request bodies that carry them.

The tokenizer is a local Hugging Face one (`tokenizer.json`, read by the `tokenizers` library's
`Tokenizer.from_file`, which never downloads) or the one inside a GGUF model file (`_gguf_tokenizer`).
A prompt of N tokens is built from words of the
tokenizer's own vocabulary, then encoded again and trimmed or extended until it encodes to exactly
N tokens (without the special tokens the tokenizer adds: a server's chat template or BOS adds its
own, which the level's usage check shows). Lengths are drawn per prompt from a normal
distribution (AIPerf's --synthetic-input-tokens-mean/-stddev), at least 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from perfkit.errors import InputError, UsageError
from perfkit.records import OpenAISpec

_FIX_STEPS = 64  # trims and extensions a prompt may take to reach its length
_MAX_WORDS = 2000  # enough words for varied prompts; a large vocabulary is not walked to its end


def load_tokenizer(path: str) -> Any:
    """The tokenizer of a local folder holding tokenizer.json (or the file itself), or the one inside a GGUF
    model file (a path ending .gguf); raises UsageError naming the path when it is missing or unreadable,
    or when the `tokenizers` library is absent."""
    p = Path(path)
    if p.suffix.lower() == ".gguf":
        from perfkit.loadgen._gguf_tokenizer import load_gguf_tokenizer

        return load_gguf_tokenizer(path)
    file = p / "tokenizer.json" if p.is_dir() else p
    if not file.is_file():
        raise UsageError(
            f"--tokenizer {path}: no tokenizer.json there",
            hint="give a local Hugging Face tokenizer folder (perfkit never downloads one)",
        )
    try:
        from tokenizers import Tokenizer
    except ImportError as err:
        raise UsageError(f"--tokenizer {path}: the `tokenizers` library is not installed ({err})") from None
    try:
        return Tokenizer.from_file(str(file))
    except Exception as err:  # the library raises its own Exception subclass for any bad file
        raise UsageError(f"--tokenizer {path}: {file} is not a readable tokenizer ({err})") from None


def _words(tok: Any) -> list[str]:
    """The vocabulary's plain words that encode alone to one token (the prompts' material)."""
    vocab = tok.get_vocab(with_added_tokens=False)
    special = set(tok.get_vocab(with_added_tokens=True)) - set(vocab)
    words: list[str] = []
    for token_id in sorted(vocab.values()):
        text = tok.decode([token_id]).strip()
        if text.isalpha() and text.isascii() and text not in special and count_tokens(tok, text) == 1:
            words.append(text)
            if len(words) >= _MAX_WORDS:
                break
    if not words:
        raise UsageError("--tokenizer: its vocabulary has no plain words to build prompts from")
    return words


def count_tokens(tok: Any, text: str) -> int:
    """Tokens of text under tok, without the special tokens it adds."""
    return len(tok.encode(text, add_special_tokens=False))


def make_prompt(tok: Any, words: list[str], n: int, rng: np.random.Generator) -> str:
    """A text of exactly n tokens under tok; raises UsageError if the tokenizer cannot be brought to it."""
    picked = [words[i] for i in rng.integers(0, len(words), size=n)]
    for _ in range(_FIX_STEPS):
        text = " ".join(picked)
        have = count_tokens(tok, text)
        if have == n:
            return text
        if have > n:
            del picked[-max(1, min(len(picked) - 1, have - n)) :]
        else:
            picked.extend(words[i] for i in rng.integers(0, len(words), size=n - have))
    raise UsageError(f"--synthetic-input-tokens-mean: no prompt of exactly {n} tokens could be made with it")


def draw_lengths(mean: float, stddev: float, count: int, rng: np.random.Generator) -> list[int]:
    """count lengths from a normal distribution (rounded, at least 1); all `mean` where stddev is 0."""
    if stddev <= 0:
        return [max(1, round(mean))] * count
    return [max(1, round(x)) for x in rng.normal(mean, stddev, size=count)]


def openai_bodies(spec: OpenAISpec, model: str, streaming: bool, seed: int) -> tuple[list[dict[str, Any]], list[int]]:
    """The request bodies of spec's prompts, and each prompt's input length; raises UsageError."""
    if not spec.tokenizer:
        raise UsageError(
            "--service-kind openai needs --tokenizer DIR for synthetic prompts",
            hint="a local Hugging Face tokenizer folder with tokenizer.json; or --input-data FILE of request bodies",
        )
    tok = load_tokenizer(spec.tokenizer)
    words = _words(tok)
    rng = np.random.default_rng(seed)
    inputs = draw_lengths(spec.input_tokens_mean, spec.input_tokens_stddev, spec.prompt_count, rng)
    outputs: list[int | None] = [None] * spec.prompt_count
    if spec.output_tokens_mean is not None:
        outputs = list(draw_lengths(spec.output_tokens_mean, spec.output_tokens_stddev, spec.prompt_count, rng))
    extra = {k: json.loads(v) for k, v in spec.extra_inputs}
    bodies = []
    for n, out in zip(inputs, outputs):
        prompt = make_prompt(tok, words, n, rng)
        body: dict[str, Any] = {"model": model}
        if spec.endpoint_type == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        elif spec.endpoint_type == "completions":
            body["prompt"] = prompt
        else:
            body["input"] = prompt
        if spec.endpoint_type != "embeddings":
            if streaming:
                body["stream"] = True
                body["stream_options"] = {"include_usage": True}  # the usage the level's check reads
            if out is not None:
                body["max_tokens"] = out
                body["ignore_eos"] = True  # an exact length (vLLM, TensorRT-LLM, llama.cpp); --extra-inputs overrides
        body.update(extra)
        bodies.append(body)
    return bodies, inputs


def file_bodies(path: str, model: str, streaming: bool, tokenizer: str = "") -> tuple[list[dict[str, Any]], list[int]]:
    """The request bodies of a perf_analyzer-format input file for the openai service kind (what genai-perf
    writes: `{"data": [{"payload": [BODY]}, ...]}`, each BODY sent as it is), and each one's input length
    under `tokenizer` (-1 each without one); raises InputError naming the file and the entry."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise InputError(f"--input-data {path}: not a readable JSON file ({err})") from None
    entries = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise InputError(f'--input-data {path}: expected {{"data": [{{"payload": [{{...}}]}}, ...]}}')
    tok = load_tokenizer(tokenizer) if tokenizer else None
    bodies, lengths = [], []
    for i, entry in enumerate(entries):
        payload = entry.get("payload") if isinstance(entry, dict) else None
        if not isinstance(payload, list) or len(payload) != 1 or not isinstance(payload[0], dict):
            raise InputError(f'--input-data {path}: data[{i}] needs "payload": [ONE REQUEST BODY]')
        body = dict(payload[0])
        body.setdefault("model", model)
        if streaming and "stream" not in body:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        bodies.append(body)
        lengths.append(count_tokens(tok, _body_text(body)) if tok is not None else -1)
    return bodies, lengths


def _body_text(body: dict[str, Any]) -> str:
    if isinstance(body.get("messages"), list):
        return "\n".join(str(m.get("content", "")) for m in body["messages"] if isinstance(m, dict))
    text = body.get("prompt", body.get("input", ""))
    return text if isinstance(text, str) else " ".join(map(str, text))


def openai_request(
    host: str, port: int, path: str, body: dict[str, Any], headers: tuple[tuple[str, str], ...] = ()
) -> bytes:
    """One HTTP/1.1 POST of body (JSON) to path, `headers` (perf_analyzer's -H) among its own."""
    data = json.dumps(body, separators=(",", ":")).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream, application/json\r\nContent-Length: {len(data)}\r\n"
        + "".join(f"{k}: {v}\r\n" for k, v in headers)
        + "\r\n"
    )
    return head.encode() + data
