"""The tokenizer inside a GGUF model file (llama.cpp's format), as a `tokenizers` Tokenizer: no download.

A GGUF file's metadata holds its vocabulary (`tokenizer.ggml.tokens`, with `scores` and `token_type`),
for byte-level BPE models its merges, and how text is prepared (`add_bos_token`, `add_space_prefix`).
Two vocabulary kinds are read, as llama.cpp reads them (src/llama-vocab.cpp, `llama_vocab::impl::load`):
  - `llama` (SentencePiece BPE: Llama 2, Gemma, Mistral): llama.cpp's `llm_tokenizer_spm` merges the
    adjacent pair whose joined piece is in the vocabulary with the highest score, falling back to
    `<0xXX>` byte tokens. That is BPE with merges ranked by the joined piece's score (the conversion
    Hugging Face's GGUF import makes), spaces written as "▁", a "▁" in front only with add_space_prefix;
  - `gpt2` (byte-level BPE: Llama 3, Qwen): the file's own merges over GPT-2's byte-level pre-split
    (a model whose `tokenizer.ggml.pre` splits otherwise may count a few tokens differently: the
    level's usage check against the server shows it).
CONTROL tokens are special (never made from text; the BOS is added in front where add_bos_token says so,
which `count_tokens` leaves out, as it leaves out every special token a tokenizer adds).

The metadata is parsed here with `gguf`'s value types and key names: `gguf.GGUFReader` maps every
array element as its own numpy view, minutes of CPU for a 262,144-token vocabulary, where this reads the
key-value section once (well under a second) and never touches the tensors.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

from perfkit.errors import UsageError

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9  # gguf.GGUFValueType.STRING, .ARRAY
_KEEP = ("tokenizer.ggml.",)  # only these keys' values are kept (the rest are skipped over)


def _read(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise EOFError
    return data


def _value(f: BinaryIO, vtype: int, keep: bool) -> Any:
    if vtype == _STRING:
        (n,) = struct.unpack("<Q", _read(f, 8))
        data = _read(f, n)
        return data.decode("utf-8", errors="replace") if keep else None
    if vtype == _ARRAY:
        etype, count = struct.unpack("<IQ", _read(f, 12))
        if etype in _SCALARS:
            fmt = _SCALARS[etype]
            size = struct.calcsize(fmt)
            data = _read(f, size * count)
            return list(struct.unpack(f"<{count}{fmt[1]}", data)) if keep else None
        values = [_value(f, etype, keep) for _ in range(count)]
        return values if keep else None
    scalar = _SCALARS.get(vtype)
    if scalar is None:
        raise ValueError(f"unknown GGUF value type {vtype}")
    return struct.unpack(scalar, _read(f, struct.calcsize(scalar)))[0]


def read_gguf_metadata(path: str) -> dict[str, Any]:
    """The `tokenizer.ggml.*` metadata of a GGUF file (and `general.architecture`); raises UsageError naming the
    file when it is not a readable GGUF file (version 2 or 3)."""
    try:
        import gguf
    except ImportError as err:
        raise UsageError(f"--tokenizer {path}: the `gguf` library is not installed ({err})") from None
    out: dict[str, Any] = {}
    try:
        with open(path, "rb") as f:
            magic, version = struct.unpack("<II", _read(f, 8))
            if magic != gguf.GGUF_MAGIC or version not in (2, 3):
                raise ValueError(f"not a GGUF v2/v3 file (magic {magic:#x}, version {version})")
            _tensors, kv_count = struct.unpack("<QQ", _read(f, 16))
            for _ in range(kv_count):
                (klen,) = struct.unpack("<Q", _read(f, 8))
                key = _read(f, klen).decode("utf-8", errors="replace")
                (vtype,) = struct.unpack("<I", _read(f, 4))
                keep = key.startswith(_KEEP) or key == gguf.Keys.General.ARCHITECTURE
                value = _value(f, vtype, keep)
                if keep:
                    out[key] = value
    except (OSError, EOFError, ValueError, struct.error) as err:
        raise UsageError(f"--tokenizer {path}: not a readable GGUF file ({err or 'truncated'})") from None
    return out


def _spm_merges(tokens: list[str], scores: list[float], types: list[int]) -> list[tuple[str, str]]:
    """BPE merges equal to SentencePiece's score-ranked pair merging: each NORMAL piece made of two pieces of
    the vocabulary, best score first (ties in vocabulary order of the two parts)."""
    vocab = {t: i for i, t in enumerate(tokens)}
    ranked: list[tuple[float, int, int, str, str]] = []
    for i, piece in enumerate(tokens):
        if types[i] != 1 or len(piece) < 2:  # gguf.TokenType.NORMAL: the pieces text is made of
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            li, ri = vocab.get(left), vocab.get(right)
            if li is not None and ri is not None:
                ranked.append((-scores[i], li, ri, left, right))
    ranked.sort()
    return [(left, right) for _, _, _, left, right in ranked]


def load_gguf_tokenizer(path: str) -> Any:
    """The tokenizer of a GGUF model file as a `tokenizers.Tokenizer`; raises UsageError naming the file and the
    field when it holds no tokenizer perfkit can read."""
    if not Path(path).is_file():
        raise UsageError(f"--tokenizer {path}: no such file", hint="give a local .gguf model file")
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    meta = read_gguf_metadata(path)
    kind = meta.get("tokenizer.ggml.model")
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        raise UsageError(f"--tokenizer {path}: no tokenizer.ggml.tokens in the file (it holds no tokenizer)")
    types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    vocab = {t: i for i, t in enumerate(tokens)}
    unk_id = meta.get("tokenizer.ggml.unknown_token_id")
    unk = tokens[unk_id] if isinstance(unk_id, int) and 0 <= unk_id < len(tokens) else None
    if kind == "llama":
        scores = meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
        merges = _spm_merges(tokens, scores, types)
        tok = Tokenizer(models.BPE(vocab, merges, unk_token=unk, byte_fallback=True, fuse_unk=True))
        spaces = normalizers.Replace(" ", "▁")
        prefix = meta.get("tokenizer.ggml.add_space_prefix", True)
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), spaces] if prefix else [spaces])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    elif kind == "gpt2":
        pairs = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or [] if " " in m]
        tok = Tokenizer(models.BPE(vocab, pairs, unk_token=unk))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
    else:
        raise UsageError(
            f"--tokenizer {path}: tokenizer.ggml.model {kind!r} is not read by perfkit (only llama and gpt2)",
            hint="give the model's Hugging Face tokenizer folder instead",
        )
    control = [AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types) if k == 3]
    user = [AddedToken(t, special=False, normalized=False) for t, k in zip(tokens, types) if k == 4]
    tok.add_special_tokens(control)
    tok.add_tokens(user)
    bos_id = meta.get("tokenizer.ggml.bos_token_id")
    if meta.get("tokenizer.ggml.add_bos_token", False) and isinstance(bos_id, int) and 0 <= bos_id < len(tokens):
        bos = tokens[bos_id]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, bos_id)]
        )
    return tok
