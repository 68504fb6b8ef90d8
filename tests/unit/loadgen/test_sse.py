"""The event-stream parser and the OpenAI chunk readers: events split over reads, several per read,
comments, CR/CRLF line ends, multi-line data and the [DONE] sentinel."""

from __future__ import annotations

import json

import pytest

from perfkit.loadgen._openai import carries_text, read_usage
from perfkit.loadgen._sse import DONE, SseParser

STREAM = (
    b": keep-alive\n\n"
    b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n'
    b"event: ping\n\n"
    b'data: {"choices":[{"delta":{"content":"lo"}}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}\n\n'
    b"data: [DONE]\n\n"
)
EVENTS = [
    b'{"choices":[{"delta":{"role":"assistant","content":""}}]}',
    b'{"choices":[{"delta":{"content":"Hel"}}]}',
    b'{"choices":[{"delta":{"content":"lo"}}]}',
    b'{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}',
    DONE,
]


def test_a_stream_in_one_read_gives_every_event_in_order_and_skips_comments_and_other_fields():
    p = SseParser()
    assert p.feed(STREAM) == EVENTS
    assert not p.pending


@pytest.mark.parametrize("size", [1, 2, 3, 7, 16, 61])
def test_a_stream_split_anywhere_gives_the_same_events(size: int):
    p = SseParser()
    got = []
    for i in range(0, len(STREAM), size):
        got += p.feed(STREAM[i : i + size])
    assert got == EVENTS


def test_an_event_is_dispatched_only_at_its_blank_line():
    p = SseParser()
    assert p.feed(b'data: {"a":1}\n') == []
    assert p.pending
    assert p.feed(b"\n") == [b'{"a":1}']
    assert not p.pending


@pytest.mark.parametrize("ending", [b"\r\n", b"\r", b"\n"])
def test_cr_crlf_and_lf_all_end_lines_even_split_between_cr_and_lf(ending: bytes):
    text = ending.join([b"data: one", b"", b": note", b"data: two", b"", b""])
    p = SseParser()
    got = []
    for i in range(len(text)):  # byte by byte: a CRLF is split between two reads
        got += p.feed(text[i : i + 1])
    assert got == [b"one", b"two"]


def test_multi_line_data_joins_with_newlines_and_one_leading_space_is_dropped():
    p = SseParser()
    assert p.feed(b"data: a\ndata:b\ndata:  c\ndata\n\n") == [b"a\nb\n c\n"]


def test_reset_forgets_a_partial_event():
    p = SseParser()
    p.feed(b"data: half")
    p.reset()
    assert p.feed(b"data: x\n\n") == [b"x"]


@pytest.mark.parametrize(
    ("chunk", "text"),
    [
        ({"choices": [{"delta": {"content": "a"}}]}, True),
        ({"choices": [{"delta": {"role": "assistant", "content": ""}}]}, False),
        ({"choices": [{"delta": {"content": None}}]}, False),
        ({"choices": [{"text": "x"}]}, True),
        ({"choices": [{"text": ""}]}, False),
        ({"choices": [{"delta": {"content": '"'}}]}, True),  # an escaped quote is text
        ({"choices": [], "usage": {"prompt_tokens": 3}}, False),
    ],
)
def test_a_chunk_carries_text_when_its_content_or_text_is_a_non_empty_string(chunk: dict, text: bool):
    for separators in ((",", ":"), (", ", ": ")):  # compact and Python's default spacing
        data = json.dumps(chunk, separators=separators).encode()
        assert carries_text(data) is text, data
        assert carries_text(data) is bool(_parsed_text(chunk))


def _parsed_text(chunk: dict) -> str:
    choice = (chunk.get("choices") or [{}])[0]
    return (choice.get("delta") or {}).get("content") or choice.get("text") or ""


def test_usage_is_read_from_a_chunk_or_an_answer_and_missing_counts_are_minus_one():
    assert read_usage(b'{"usage":{"prompt_tokens":7,"completion_tokens":2}}') == (7, 2)
    assert read_usage(b'{"usage":{"prompt_tokens":7}}') == (7, -1)
    assert read_usage(b'{"usage":null}') is None
    assert read_usage(b"not json") is None


def test_extra_blank_lines_between_events_dispatch_nothing():
    p = SseParser()
    assert p.feed(b"\n\n\ndata: a\n\n\n\ndata: b\n\n") == [b"a", b"b"]
    assert p.feed(b": only a comment\n\nevent: x\nid: 3\n\n") == []
    assert not p.pending
