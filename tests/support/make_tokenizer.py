"""Makes tests/support/tokenizer/tokenizer.json: a small BPE tokenizer of the project's own.

Trained with the `tokenizers` library on the short corpus below (written for this purpose), so
that the tests have a real Hugging Face tokenizer folder without downloading one. Its merges
make many words two or more tokens, which the exact-length prompts must handle. Run again
(`.venv/bin/python tests/support/make_tokenizer.py`) only to change it; the output is committed.
"""

from __future__ import annotations

from pathlib import Path

CORPUS = """
the server answers each request with a stream of tokens and the client measures the time to the
first token and the time between tokens while the load rises from one request to many requests
a model behind an endpoint takes a prompt and returns text one token after another until it stops
throughput latency concurrency rate budget window level percentile median tail error success
inference server client batch queue slot model prompt token stream chunk event record report
"""

OUT = Path(__file__).parent / "tokenizer"


def main() -> None:
    """Train and save the tokenizer (tokenizer.json and a tokenizer_config.json, as a folder of the Hub has)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.BPEDecoder()
    trainer = trainers.BpeTrainer(vocab_size=160, special_tokens=["[UNK]", "<s>", "</s>"], min_frequency=1)
    tok.train_from_iterator([" ".join(CORPUS.split())] * 4, trainer=trainer)
    OUT.mkdir(exist_ok=True)
    tok.save(str(OUT / "tokenizer.json"))
    (OUT / "tokenizer_config.json").write_text('{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "[UNK]"}\n')


if __name__ == "__main__":
    main()
