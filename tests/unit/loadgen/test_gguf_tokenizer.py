"""--tokenizer model.gguf: the tokenizer read from a GGUF file's metadata (a small one written here with `gguf`'s
own writer, so the file is what llama.cpp's converter writes)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from perfkit.errors import UsageError
from perfkit.loadgen._gguf_tokenizer import read_gguf_metadata
from perfkit.loadgen._prompts import _words, count_tokens, load_tokenizer, make_prompt

# A SentencePiece vocabulary: control tokens, byte fallbacks, then pieces (score: higher merges first)
CONTROL = ["<pad>", "<eos>", "<bos>", "<unk>"]
BYTES = [f"<0x{b:02X}>" for b in range(256)]
PIECES = ["▁", "a", "b", "c", "l", "o", "w", "e", "r", "lo", "low", "▁low", "er", "▁lower", "ab", "▁ab", "▁c"]


def _write(path: Path, *, add_bos: bool = True, space_prefix: bool = False, model: str = "llama") -> Path:
    w = gguf.GGUFWriter(str(path), "llama")
    tokens = CONTROL + BYTES + PIECES
    types = [gguf.TokenType.CONTROL] * 4 + [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * len(PIECES)
    scores = [0.0] * 260 + [-float(i) for i in range(len(PIECES))]
    scores[260 + PIECES.index("▁lower")] = 10.0  # a whole word's piece ranks first
    w.add_tokenizer_model(model)
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_add_bos_token(add_bos)
    w.add_bool(gguf.Keys.Tokenizer.ADD_PREFIX, space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_sentencepiece_vocabulary_tokenizes_by_score_with_bytes_for_the_rest(tmp_path):
    tok = load_tokenizer(str(_write(tmp_path / "m.gguf")))
    enc = tok.encode("low lower ab cz")
    assert enc.tokens == ["<bos>", "low", "▁lower", "▁ab", "▁c", "<0x7A>"]  # z: not in the vocabulary
    assert count_tokens(tok, "low lower ab cz") == 5  # the BOS the tokenizer adds is not counted
    assert tok.decode(enc.ids, skip_special_tokens=True) == "low lower ab cz"


def test_add_space_prefix_and_add_bos_are_read_from_the_file(tmp_path):
    tok = load_tokenizer(str(_write(tmp_path / "m.gguf", add_bos=False, space_prefix=True)))
    assert tok.encode("low").tokens == ["▁low"]


def test_prompts_of_exactly_the_asked_length_under_a_gguf_tokenizer(tmp_path):
    tok = load_tokenizer(str(_write(tmp_path / "m.gguf")))
    words = _words(tok)
    rng = np.random.default_rng(3)
    for n in (1, 5, 17):
        assert count_tokens(tok, make_prompt(tok, words, n, rng)) == n


def test_the_metadata_reader_skips_what_it_does_not_keep(tmp_path):
    meta = read_gguf_metadata(str(_write(tmp_path / "m.gguf")))
    assert meta["general.architecture"] == "llama" and meta["tokenizer.ggml.model"] == "llama"
    assert meta["tokenizer.ggml.tokens"][260:263] == ["▁", "a", "b"] and meta["tokenizer.ggml.bos_token_id"] == 2


def test_a_file_that_is_not_gguf_is_a_one_line_usage_error(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not a model at all")
    with pytest.raises(UsageError, match=r"model\.gguf: not a readable GGUF file"):
        load_tokenizer(str(bad))
    with pytest.raises(UsageError, match="no such file"):
        load_tokenizer(str(tmp_path / "absent.gguf"))


def test_an_unknown_vocabulary_kind_names_the_field(tmp_path):
    with pytest.raises(UsageError, match=r"tokenizer\.ggml\.model 'rwkv'"):
        load_tokenizer(str(_write(tmp_path / "m.gguf", model="rwkv")))
