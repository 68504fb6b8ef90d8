"""Synthetic prompts of an exact length under a real tokenizer (tests/support/tokenizer, a BPE of the
project's own), the tokenizer's errors, and the request bodies that carry the prompts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from perfkit.errors import UsageError
from perfkit.loadgen import count_tokens, load_tokenizer, openai_bodies, openai_request
from perfkit.loadgen._prompts import _words, draw_lengths, make_prompt
from perfkit.records import OpenAISpec

TOKENIZER = Path(__file__).parents[2] / "support" / "tokenizer"


def test_the_fixture_tokenizer_splits_words_so_lengths_are_not_word_counts():
    tok = load_tokenizer(str(TOKENIZER))
    assert count_tokens(tok, "throughput latency") > 2


@pytest.mark.parametrize("n", [1, 2, 5, 31, 128, 550])
def test_a_prompt_has_exactly_the_asked_tokens(n: int):
    tok = load_tokenizer(str(TOKENIZER / "tokenizer.json"))
    rng = np.random.default_rng(n)
    words = _words(tok)
    for _ in range(5):
        assert count_tokens(tok, make_prompt(tok, words, n, rng)) == n


def test_prompts_differ_from_one_another():
    tok = load_tokenizer(str(TOKENIZER))
    rng = np.random.default_rng(0)
    words = _words(tok)
    assert len({make_prompt(tok, words, 32, rng) for _ in range(10)}) == 10


def test_a_missing_tokenizer_is_a_usage_error_naming_the_path(tmp_path: Path):
    with pytest.raises(UsageError, match=str(tmp_path)):
        load_tokenizer(str(tmp_path))
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not a tokenizer")
    with pytest.raises(UsageError, match="is not a readable tokenizer"):
        load_tokenizer(str(tmp_path))


def test_lengths_are_drawn_around_the_mean_and_never_below_one():
    rng = np.random.default_rng(1)
    assert draw_lengths(32, 0, 4, rng) == [32] * 4
    drawn = draw_lengths(3, 5, 2000, rng)
    assert min(drawn) == 1 and abs(np.mean(drawn) - 4.5) < 1.0  # the normal's mass below 1 is moved to 1
    assert abs(np.mean(draw_lengths(200, 20, 2000, rng)) - 200) < 2


def test_chat_bodies_stream_with_usage_and_fix_the_output_length():
    spec = OpenAISpec(tokenizer=str(TOKENIZER), input_tokens_mean=16, output_tokens_mean=8, prompt_count=3)
    bodies, lengths = openai_bodies(spec, "m", streaming=True, seed=0)
    tok = load_tokenizer(str(TOKENIZER))
    assert lengths == [16, 16, 16]
    for body in bodies:
        assert body["model"] == "m" and body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert body["max_tokens"] == 8 and body["ignore_eos"] is True
        assert count_tokens(tok, body["messages"][0]["content"]) == 16


def test_extra_inputs_go_last_and_override_and_embeddings_never_stream():
    spec = OpenAISpec(
        endpoint_type="embeddings", tokenizer=str(TOKENIZER), input_tokens_mean=4, prompt_count=1,
        extra_inputs=(("encoding_format", '"float"'),),
    )  # fmt: skip
    (body,), _ = openai_bodies(spec, "e", streaming=True, seed=0)
    assert "stream" not in body and "max_tokens" not in body and body["encoding_format"] == "float"
    spec = OpenAISpec(
        endpoint_type="completions", tokenizer=str(TOKENIZER), input_tokens_mean=4, output_tokens_mean=2,
        prompt_count=1, extra_inputs=(("ignore_eos", "false"),),
    )  # fmt: skip
    (body,), _ = openai_bodies(spec, "c", streaming=False, seed=0)
    assert body["ignore_eos"] is False and "prompt" in body and "stream" not in body


def test_a_request_is_one_http_post_of_the_body_with_its_length():
    raw = openai_request("h", 1, "/v1/completions", {"a": 1}, (("X-K", "v"),))
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/completions HTTP/1.1\r\nHost: h:1\r\n")
    assert b"Content-Length: %d" % len(body) in head and b"X-K: v" in head
    assert json.loads(body) == {"a": 1}
