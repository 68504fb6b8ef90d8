"""`perfkit profile --service-kind openai` against a real engine: llama.cpp's llama-server serving Gemma 3 270M.

Prompts are made under the tokenizer read from the model's own GGUF file (--tokenizer model.gguf) and the
server's `usage.prompt_tokens` is held to them exactly: llama.cpp tokenizes a completion's prompt with the
BOS token in front (the GGUF's tokenizer.ggml.add_bos_token; perfkit's count leaves out the special tokens
a tokenizer adds), so it counts one more; a chat's prompt is Gemma's chat template around the user's text,
whose tokens are counted here with the same tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from perfkit.cli import main
from perfkit.loadgen import openai_bodies
from perfkit.loadgen._prompts import load_tokenizer
from perfkit.records import OpenAISpec, RunRecord
from tests.support.llama_server import GEMMA_CHAT_TEMPLATE, LlamaServer

INPUT_TOKENS, OUTPUT_TOKENS, SEED = 48, 12, 7


def _profile(server: LlamaServer, gemma: Path, out: Path, *args: str) -> tuple[int, RunRecord | None]:
    argv = [
        "profile", "--service-kind", "openai", "-u", server.url, "-m", "gemma", "--tokenizer", str(gemma),
        "--synthetic-input-tokens-mean", str(INPUT_TOKENS), "--output-tokens-mean", str(OUTPUT_TOKENS),
        "--seed", str(SEED), "-o", str(out), *args,
    ]  # fmt: skip
    rc = main(argv)
    return rc, RunRecord.load(out) if out.exists() else None


def _gemma_chat_prompt_tokens(gemma: Path) -> set[int]:
    """What llama.cpp should count for each prompt perfkit sends as a chat: Gemma's chat template
    (tests.support.llama_server.GEMMA_CHAT_TEMPLATE, the server's) rendered around it, BOS included."""
    spec = OpenAISpec(endpoint_type="chat", tokenizer=str(gemma), input_tokens_mean=INPUT_TOKENS)
    bodies, lengths = openai_bodies(spec, "gemma", True, SEED)
    assert set(lengths) == {INPUT_TOKENS}
    tok = load_tokenizer(str(gemma))
    template = jinja2.Template(GEMMA_CHAT_TEMPLATE)
    counts = set()
    for body in bodies:
        # the template's BOS left out, as llama.cpp drops it; the tokenizer's own BOS (add_bos_token) counted
        text = template.render(bos_token="", messages=body["messages"], add_generation_prompt=True)
        counts.add(len(tok.encode(text, add_special_tokens=True).ids))
    return counts


def test_the_gguf_tokenizer_counts_a_prompt_as_llama_cpp_does(llama, gemma, tmp_path):
    # completions: the prompt as it is, BOS in front; each request's count is held to what was sent
    rc, rec = _profile(
        llama, gemma, tmp_path / "run.json", "--endpoint-type", "completions", "--concurrency-range", "2",
        "--request-count", "8", "--synthetic-input-tokens-stddev", "8",
    )  # fmt: skip
    assert rc == 0 and rec is not None
    check = rec.levels[0].workload
    assert check is not None and check.reported_requests >= 8
    assert check.sent_input_tokens_mean is not None and check.reported_input_tokens_mean is not None
    assert check.reported_input_tokens_mean == check.sent_input_tokens_mean + 1  # the BOS token, per request
    assert check.mismatch == ""  # each request within one token (the BOS) of what was sent
    assert check.reported_output_tokens_mean == OUTPUT_TOKENS  # max_tokens with ignore_eos: exactly


def test_streamed_chat_records_ttft_itl_and_the_servers_counts(llama, gemma, tmp_path):
    rc, rec = _profile(
        llama, gemma, tmp_path / "run.json", "--endpoint", "v1/chat/completions", "--streaming",
        "--concurrency-range", "2", "--request-count", "8",
    )  # fmt: skip
    assert rc == 0 and rec is not None
    (level,) = rec.levels
    assert level.error_count == 0
    st = level.streaming
    assert st is not None and st.request_count >= 8
    assert st.output_len_mean == OUTPUT_TOKENS
    # a real engine's TTFT (the prompt's prefill) is longer than its gaps between tokens
    assert 0 < st.itl.p50_us < st.ttft.p99_us
    assert st.tpot is not None and st.output_tokens_per_s is not None and st.output_tokens_per_s > 0
    # llama.cpp counted each prompt as Gemma's template around exactly what perfkit sent
    (expected,) = _gemma_chat_prompt_tokens(gemma)
    check = level.workload
    assert check is not None and check.reported_requests >= 8
    assert check.reported_input_tokens_mean == expected
    assert check.reported_output_tokens_mean == OUTPUT_TOKENS


def test_streamed_completions_record_every_token(llama, gemma, tmp_path):
    rc, rec = _profile(
        llama, gemma, tmp_path / "run.json", "--endpoint-type", "completions", "--streaming",
        "--concurrency-range", "1", "--request-count", "4",
    )  # fmt: skip
    assert rc == 0 and rec is not None
    level = rec.levels[0]
    st = level.streaming
    assert st is not None and st.output_len_mean == OUTPUT_TOKENS and st.itl.p50_us > 0
    assert level.workload is not None
    assert level.workload.reported_input_tokens_mean == INPUT_TOKENS + 1 and level.workload.mismatch == ""
